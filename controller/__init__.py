"""The fabric controller: intent, topology, route and QoS computation, incremental failover,
and the daemon that streams desired state to agents (ARCHITECTURE §1-4)."""
