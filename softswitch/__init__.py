"""softswitch: a P4Runtime server in front of a Python model of p4/fabric.p4, forwarding real
frames between Linux interfaces (docs/architecture.md §6)."""
