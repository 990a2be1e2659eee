"""railctl against the swarm's controller, as an operator runs it: the real `railctl` console
script in its own process, default client settings (gRPC's 4 MiB receive limit, its own
paging), the run's reader certificate. Each read command runs RUNS times, pinned with the
swarm (an operator's machine is not the controller's); the figure is the command's whole
wall time (start-up, every page, output written), with what it printed as its sample.

`railctl expand FABRIC` (offline: the intent's explicit form) is timed the same way.

A command that fails (an exit code other than 0, or 3 for `diagnose` finding problems)
fails the run with its stderr: a figure of a command that gave no answer means nothing."""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.swarm.figures import EmptySample, distribution
from mininet_labs.certs import flags as tls_flags
from mininet_labs.processes import this_checkout_env
from railfabric import tls

RAILCTL = Path(sys.executable).parent / "railctl"
# The read commands an operator runs on a large fabric (each should answer in <= 2 s on
# ref-100k; `expand` in <= 5 s), each a command line after the connection's flags; a script's
# `--json links` too.
COMMANDS = ("topology", "links", "--json links", "switches", "events", "alarms", "diagnose")
RUNS = 3
# `diagnose` exits 3 when it finds problems: an answer all the same.
_ANSWERED = {"diagnose": (0, 3)}
TIMEOUT_S = 300.0


class RailctlFailed(Exception):
    """A railctl command gave no answer; the text says which and why."""


@dataclass(frozen=True)
class Ran:
    seconds: float
    code: int
    lines: int
    size: int


async def run_once(
    args: Sequence[str], prefix: Sequence[str], answered: Sequence[int] = (0,)
) -> Ran:
    """One railctl process: its wall time, exit code and the output it wrote; RailctlFailed
    when it exits other than `answered` or prints nothing."""
    started = time.perf_counter()
    proc = await asyncio.create_subprocess_exec(
        *prefix,
        str(RAILCTL),
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=this_checkout_env(),
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), TIMEOUT_S)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise RailctlFailed(f"railctl {' '.join(args)}: no answer in {TIMEOUT_S:g} s") from None
    seconds = time.perf_counter() - started
    code = proc.returncode
    assert code is not None
    if code not in answered:
        tail = err.decode(errors="replace").strip().splitlines()[-3:]
        raise RailctlFailed(f"railctl {' '.join(args)} exited {code}: {' | '.join(tail)}")
    if not out:
        raise RailctlFailed(f"railctl {' '.join(args)} printed nothing")
    return Ran(seconds, code, out.count(b"\n"), len(out))


def _figures(what: str, runs: list[Ran]) -> dict[str, Any]:
    if not runs:
        raise EmptySample(f"{what}: not run")
    return {
        "seconds": distribution(what, [r.seconds for r in runs], digits=2),
        "lines": runs[-1].lines,
        "bytes": runs[-1].size,
        "exit_code": runs[-1].code,
    }


async def measure(
    address: str,
    files: tls.TlsFiles | None,
    fabric: str,
    prefix: Sequence[str],
    runs: int = RUNS,
) -> dict[str, Any]:
    """Each read command `runs` times, then `expand`, one after another (never two at once:
    each is measured alone)."""
    connection = ["--controller", address, *tls_flags(files)]
    out: dict[str, Any] = {"runs": runs}
    for command in COMMANDS:
        answered = _ANSWERED.get(command, (0,))
        args = [*connection, *command.split()]
        ran = [await run_once(args, prefix, answered) for _ in range(runs)]
        out[command] = _figures(f"railctl {command}", ran)
    ran = [await run_once(["expand", fabric], prefix) for _ in range(runs)]
    out["expand"] = _figures("railctl expand", ran)
    return out
