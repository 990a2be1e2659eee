"""`mininet>`: Mininet's CLI on the live lab, with railfabric's commands.

Mininet's own commands work as always (`pingall`, `net`, `links`, `dump`, `nodes`, `py`,
`xterm` where there is a display, `srv-b1-s1 ping ...`, `source FILE`). A NIC's full name
(`srv-b2-s1/nic2`) anywhere in a host command stands for its address, as a host's name does
for its first NIC's. railfabric adds:

    cut A B | cut SW:PORT          pull a cable (both ends lose carrier)
    restore A B | restore SW:PORT  plug it back
    miswire SW:PORT SW:PORT        swap the far ends of two cables (only LLDP can tell)
    repatch SW:PORT SW:PORT        undo a miswire
    swapnics SERVER NIC NIC        swap two NICs' cables at the server (again to undo)
    path SRC DST [--sport N] [--qp N]   the controller's predicted path (SRC, DST: NIC names
                                   or addresses)
    tables SW                      the P4 entries read back from the switch's target
    counters SW                    the switch's per-port counters
    railctl ARGS...                any railctl command against the lab's controller
    scenario NAME                  run a scenario on the live fabric and print its table

Each command says what it did or, for bad input, what was wrong; none ends the CLI.
"""

from __future__ import annotations

import cmd
import re
import shlex
import subprocess
import sys
from collections.abc import Callable, Sequence
from typing import IO

from mininet.cli import CLI

from controller.fabric import ipv4_str
from mininet_labs.lab import Lab
from mininet_labs.netlinks import LabError
from mininet_labs.report import Table, render
from mininet_labs.scenarios import SCENARIOS, Budget
from mininet_labs.topology import Cable

NIC_NAME = re.compile(r"[\w.-]+/[\w.-]+")


class FabricCLI(CLI):  # type: ignore[misc]  # mininet is untyped
    prompt = "mininet> "
    identchars = cmd.Cmd.identchars + "-"  # node names such as srv-b1-s1 start a command

    def __init__(self, lab: Lab, *, script: str | None = None, stdin: IO[str] = sys.stdin) -> None:
        if lab.net is None:
            raise LabError("the lab's network is not running")
        self.lab = lab
        self.nic_ips = {nic.full_name: ipv4_str(nic.ipv4) for nic in lab.fabric.nics}
        # Mininet's CLI runs the script (or the prompt) from its constructor.
        super().__init__(lab.net, stdin=stdin, script=script)

    # -- names ---------------------------------------------------------------------------

    def _nics_to_ips(self, line: str) -> str:
        return NIC_NAME.sub(lambda m: self.nic_ips.get(m.group(0), m.group(0)), line)

    def default(self, line: str) -> None:
        """A host command: NIC names become their addresses, then Mininet's own handling."""
        super().default(self._nics_to_ips(line))

    def _say(self, text: str) -> None:
        self.stdout.write(text.rstrip("\n") + "\n")

    def _fail(self, command: str, why: str) -> None:
        self._say(f"*** {command}: {why}")

    def _args(self, command: str, line: str, count: int) -> list[str] | None:
        args = shlex.split(line)
        if len(args) != count:
            self._fail(command, f"expected {count} arguments, got {len(args)}: {line!r}")
            return None
        return args

    def _port(self, text: str) -> tuple[str, int]:
        switch, sep, port = text.rpartition(":")
        if not sep or not port.isdigit():
            raise LabError(f"{text!r} is not SWITCH:PORT")
        if switch not in self.lab.fabric.switch_by_name:
            raise LabError(f"no switch {switch!r} in fabric {self.lab.fabric.name}")
        return switch, int(port)

    def _cable(self, line: str) -> Cable:
        """A cable named by its two switches, or by one end as SW:PORT."""
        args = shlex.split(line)
        topology = self.lab.topology
        if len(args) == 1:
            return topology.cable(*self._port(args[0]))
        if len(args) != 2:
            raise LabError(f"name a cable as A B (two switches) or SW:PORT, got {line!r}")
        if all(":" in a for a in args):
            (sa, pa), (sb, pb) = (self._port(a) for a in args)
            cable = topology.cable(sa, pa)
            if {(cable.link.a, cable.link.a_port), (cable.link.b, cable.link.b_port)} != {
                (sa, pa),
                (sb, pb),
            }:
                raise LabError(f"{args[0]} and {args[1]} are not the two ends of one cable")
            return cable
        a, b = args
        found = [c for c in topology.cables.values() if {c.link.a, c.link.b} == {a, b}]
        if not found:
            raise LabError(f"no cable between {a} and {b}")
        if len(found) > 1:
            ends = ", ".join(c.link.key for c in found)
            raise LabError(f"{len(found)} cables between {a} and {b} ({ends}): name one SW:PORT")
        return found[0]

    # -- cabling -------------------------------------------------------------------------

    def _on_cable(self, command: str, line: str, change: Callable[[str], None], done: str) -> None:
        try:
            cable = self._cable(line)
        except LabError as err:
            self._fail(command, str(err))
            return
        change(cable.link.key)
        self._say(f"{done} {cable.link.key}")

    def do_cut(self, line: str) -> None:
        """cut A B | cut SW:PORT: pull a cable (both switch ports lose carrier)."""
        self._on_cable("cut", line, self.lab.topology.cut, "cut")

    def do_restore(self, line: str) -> None:
        """restore A B | restore SW:PORT: plug a cable back in."""
        self._on_cable("restore", line, self.lab.topology.restore, "restored")

    def _two_cables(self, command: str, line: str) -> tuple[Cable, Cable] | None:
        args = self._args(command, line, 2)
        if args is None:
            return None
        try:
            first, second = (self.lab.topology.cable(*self._port(a)) for a in args)
        except LabError as err:
            self._fail(command, str(err))
            return None
        if first is second:
            self._fail(command, f"{args[0]} and {args[1]} are on the same cable")
            return None
        return first, second

    def do_miswire(self, line: str) -> None:
        """miswire SW:PORT SW:PORT: swap the far ends of the two cables on these ports."""
        pair = self._two_cables("miswire", line)
        if pair is not None:
            self.lab.topology.swap_far_ends(pair[0].link.key, pair[1].link.key)
            self._say(f"miswired {pair[0].link.key} and {pair[1].link.key} (far ends swapped)")

    def do_repatch(self, line: str) -> None:
        """repatch SW:PORT SW:PORT: undo a miswire of these two cables."""
        pair = self._two_cables("repatch", line)
        if pair is not None:
            self.lab.topology.repatch([pair[0].link.key, pair[1].link.key])
            self._say(f"repatched {pair[0].link.key} and {pair[1].link.key}")

    def do_swapnics(self, line: str) -> None:
        """swapnics SERVER NIC NIC: swap two NICs' cables at the server (a NIC in the wrong
        rail); the same command again puts them back."""
        args = self._args("swapnics", line, 3)
        if args is None:
            return
        try:
            self.lab.topology.swap_nics(*args)
        except LabError as err:
            self._fail("swapnics", str(err))
            return
        host, first, second = args
        self._say(f"swapped the cables of {host} {first} and {second} (again to put them back)")

    # -- the controller and the targets ---------------------------------------------------

    def _railctl(self, args: Sequence[str]) -> None:
        argv = self.lab.railctl_argv(*args)
        done = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
        self._say(done.stdout + done.stderr)

    def do_railctl(self, line: str) -> None:
        """railctl ARGS...: any railctl command against the lab's controller."""
        self._railctl(shlex.split(line))

    def do_path(self, line: str) -> None:
        """path SRC DST [--sport N] [--qp N]: the predicted path of a flow; SRC and DST are
        NIC names (srv-b1-s1/nic1) or addresses. --sport defaults to 49152."""
        args = shlex.split(self._nics_to_ips(line))
        if "--sport" not in args:
            args += ["--sport", "49152"]
        self._railctl(["path", *args])

    def _switch(self, command: str, line: str) -> str | None:
        args = self._args(command, line, 1)
        if args is None:
            return None
        if args[0] not in self.lab.fabric.switch_by_name:
            self._fail(command, f"no switch {args[0]!r} in fabric {self.lab.fabric.name}")
            return None
        return args[0]

    def do_tables(self, line: str) -> None:
        """tables SW: the P4 entries the switch's target holds (read back over P4Runtime)."""
        switch = self._switch("tables", line)
        if switch is not None:
            self._say(self.lab.read_tables(switch).render())

    def do_counters(self, line: str) -> None:
        """counters SW: packets per port (rx, tx, drops, ECN marks, PAUSE, PFC storms)."""
        switch = self._switch("counters", line)
        if switch is None:
            return
        ports = sorted(self.lab.topology.switch_ports(switch))
        values = self.lab.counters(switch, ports)
        keys = sorted({k for v in values.values() for k in v})
        rows = tuple((str(p), *(str(values[p].get(k, 0)) for k in keys)) for p in ports)
        self._say(Table(("port", *keys), rows).render())

    def do_scenario(self, line: str) -> None:
        """scenario NAME: run one scenario on the live fabric (quick budget)."""
        args = self._args("scenario", line, 1)
        if args is None:
            return
        scenario = SCENARIOS.get(args[0])
        if scenario is None:
            self._fail("scenario", f"no scenario {args[0]!r}; one of {', '.join(SCENARIOS)}")
            return
        try:
            result = scenario.run(self.lab, Budget.quick())
        except LabError as err:
            self._fail("scenario", f"{args[0]} could not run: {err}")
            return
        self._say(render(result))
