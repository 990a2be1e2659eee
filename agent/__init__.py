"""The switch agent: controller session, P4Runtime programming, port monitor, local repair,
LLDP and counters (docs/architecture.md §1, §7)."""
