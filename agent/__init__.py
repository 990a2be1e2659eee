"""The switch agent: controller session, P4Runtime programming, port monitor, local repair,
LLDP and counters (ARCHITECTURE §1, §7)."""
