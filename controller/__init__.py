"""The fabric controller: intent, topology, route and QoS computation, incremental failover,
and the daemon that streams desired state to agents (docs/architecture.md §1-4).

The core is pure and synchronous (no I/O, no clock). The daemon and the labs use it as:

    from controller.intent import load_fabric          # IntentError: file:line: field: what
    from controller.routing import FabricRouting, LinkEvent
    from controller import export

    fabric = load_fabric("examples/lab-2rail.yaml")    # parametric or explicit YAML
    routing = FabricRouting(fabric)                    # full computation
    state = export.desired_state(routing, "tor-r1-b1", generation=1)   # DesiredState
    deltas = routing.apply([LinkEvent("spine-p1-1", 1, up=False)])     # incremental
    for name, delta in deltas.items():
        msg = export.state_delta(routing, delta, from_generation=1)    # StateDelta

Labs and agents read the cabling plan with `controller.topology.switch_ports(fabric)` and
`controller.topology.host_nics(fabric)`; paths come from `controller.path.predict_path`.
See controller/README.md for the conventions and the measured figures.
"""
