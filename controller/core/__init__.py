"""The controller's decision core: pure, synchronous, no I/O (docs/architecture.md §3).

Every input is a method that takes `now` and returns typed effects (effects.py); the daemon
(controller/daemon/) applies them. Nothing here reads a clock, a socket, the store or writes a
log line of its own.
"""
