"""The controller under a swarm: the real `railfabric-controller` and one simulated agent per
switch, speaking only the public API (railfabric.v1).

    python -m bench.swarm FABRIC [--agents N] [--processes K] [--cuts M] [--json] [--insecure]
                             [--railctl-runs R] [--reports-s S]

The controller runs as a child process on 127.0.0.1 (store `memory:`), pinned to one CPU; the
agents share K processes pinned to the other CPUs, each an asyncio loop with one grpc.aio
channel and Session per agent (bench/swarm/agents.py mirrors agent/session.py: Hello with
every port of the switch up, Applied at once for every DesiredState and StateDelta,
PortStatus on carrier changes, reconnect with backoff). By default every connection is mutual
TLS, with a per-run CA and a certificate per switch. An agent waits for its channel as long
as it takes (gRPC retries the connection); `--connect-timeout-s 2` gives up after 2 s and
starts a new connection, as the real agent does, which thousands of TLS agents sharing one
swarm process cannot meet whatever the controller does (bench/swarm/agents.py). With
`--reports-s S` each agent also reports as a real one does (bench/swarm/reports.py): its LLDP
neighbours once it holds state, Counters every S seconds (5: the agent's default); the storm
then ends once every agent sent Counters twice, and the run checks that the controller holds
two reports and the planned LLDP peers of 16 switches spread over the fabric.

Figures, each with its sample (bench/swarm/figures.py):
- start -> SERVING: the controller's process start to grpc.health.v1 saying SERVING;
- every DesiredState ready: until the last agent received its first DesiredState, from the
  start and from the storm's beginning;
- session storm: every agent opens its session at once right after SERVING; until every
  agent holds state (received a DesiredState and sent its Applied), per-agent distribution,
  until quiet (every link between agents up, no message for 0.3 s), session resets by gRPC
  status code, retries, snapshot requests (delta gaps), messages and bytes pushed, and the
  controller's own count of connected and converged switches (ListSwitches);
- the controller's resident memory idle (at SERVING), connected (after the storm) and after
  the cuts, and its CPU seconds per phase (/proc);
- admin latency during the storm: ListAlarms every 100 ms, p50/p99/max and errors, and the
  five slowest calls with when each was made (s after the storm began);
- cable cuts, cycling over three kinds (a ToR-spine cable of the first block, one of the
  last block, a spine-core cable; bench/swarm/plan.py), each cable once: both ends send
  PortStatus down; the messages agents receive until none comes for 0.3 s are the cut's;
  event (the earlier PortStatus wall time) -> last StateDelta received, -> last Applied sent,
  switches touched, bytes pushed. Then both ends send PortStatus up, and the next cut waits
  until the cable is back in routing (the controller's hold-down, --hold-down-s 0.5 here
  against its 2 s default) and the fabric is quiet;
- railctl as an operator runs it, every agent still connected (bench/swarm/railctl.py): each
  read command (topology, links, switches, events, alarms, diagnose) and
  `expand FABRIC`, `--railctl-runs` times (3) one after another, the real `railctl` process
  with default client settings: wall time p50/p99/max with the lines it printed.

Load-generator checks: each swarm process samples its event loop's lag (reported), and one
that grows past 20% of the machine's memory (gRPC buffering what its agents cannot read) stops
the run, saying the swarm is the bottleneck. Progress goes to stderr every 10 s.

A figure from an empty or broken sample (an agent that never got state, a cut that changed no
switch) fails the run: exit 1 with the sample named. Every process and the temporary
directory are removed on every way out, Ctrl-C included.
"""
