"""The controller daemon's parts around the pure core: link state with hold-down and damping,
the state store, agent sessions, the admin API and metrics."""
