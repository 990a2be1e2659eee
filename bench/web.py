"""Benchmark of the controller's web view on a fabric file:

    python -m bench.web examples/ref-100k.yaml [--repeat 20] [--json]

A decision core is started in process as a restarted controller's is with every link up
(bench.core's restart), the web view's aiohttp application is served on a loopback port on
this process's loop (controller/web/app.py, as the daemon serves it), and each endpoint the page
reads is requested `--repeat` times over HTTP by a client on the same loop. Per endpoint: the
wall time of one request (the event loop is held for nearly all of it: the answer is built on
the loop), and the bytes answered; the first request of each is said apart, as it also builds
what is kept per plan. The page asks for /api/fabric, then the /api/view pages of one rail and
pod (a fabric of more than 2,000 links is not drawn whole).

Figures only, with their samples: nothing here asserts a speed.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import aiohttp

from controller.core.clock import Now
from controller.core.links import DampingParams
from controller.core.machine import (
    EVERY_LINK_USABLE,
    ROUTING_BASELINE,
    DecisionCore,
    topology_digest,
)
from controller.core.records import LinkRecord, Restored
from controller.daemon.admin import AdminService
from controller.daemon.core_planner import load_planner
from controller.intent import IntentError
from controller.web.app import WebView


def _core(fabric: Path) -> tuple[DecisionCore, float]:
    planner = load_planner(fabric)
    at = Now(mono_ns=time.monotonic_ns(), wall_ns=time.time_ns())
    restored = Restored(
        meta={"topology_digest": topology_digest(planner), ROUTING_BASELINE: EVERY_LINK_USABLE},
        links={x.key: LinkRecord(x.key, "up", at.wall_ns, 0) for x in planner.links()},
    )
    core = DecisionCore(planner, DampingParams())
    started = time.perf_counter()
    core.start(restored, at)
    return core, time.perf_counter() - started


def _figures(seconds: list[float], sizes: list[int]) -> dict[str, Any]:
    ms = sorted(s * 1000 for s in seconds)
    return {
        "requests": len(ms),
        "median_ms": round(statistics.median(ms), 1),
        "max_ms": round(ms[-1], 1),
        "bytes": max(sizes),
    }


async def _measure(core: DecisionCore, repeat: int) -> dict[str, Any]:
    admin = AdminService(core)
    web = WebView(admin, ready=lambda: True)
    await web.serve("127.0.0.1:0", None)
    base = f"http://127.0.0.1:{web.port}"
    ix = admin.index()
    pods = sorted({s.pod for s in ix.switches if s.pod >= 0})
    largest = max(ix.links_of, key=lambda name: len(ix.links_of[name]))
    paths = {
        "fabric": "/api/fabric",
        "view_first_page": "/api/view",
        "view_rail_pod": f"/api/view?rail={ix.rails[0]}&pod={pods[0]}" if pods else "/api/view",
        "view_last_page": f"/api/view?offset={max(0, len(ix.links) - 1)}",
        "switch": f"/api/switches/{largest}",
        "alarms": "/api/alarms",
    }
    out: dict[str, Any] = {}
    first: dict[str, float] = {}
    try:
        async with aiohttp.ClientSession() as http:
            for name, path in paths.items():
                seconds, sizes = [], []
                # The first request also builds what is kept per plan (the admin API's index,
                # the rails' and pods' link lists): said apart.
                for i in range(repeat + (1 if name not in first else 0)):
                    started = time.perf_counter()
                    async with http.get(base + path) as reply:
                        body = await reply.read()
                        if reply.status != 200:
                            raise RuntimeError(f"{path}: {reply.status} {body[:200]!r}")
                    took = time.perf_counter() - started
                    if i == 0 and name not in first:
                        first[name] = took
                        continue
                    seconds.append(took)
                    sizes.append(len(body))
                out[name] = {
                    "path": path,
                    "first_ms": round(first[name] * 1000, 1),
                    **_figures(seconds, sizes),
                }
                if name == "view_rail_pod":
                    out[name]["links"] = json.loads(body)["total_links"]
    finally:
        await web.stop()
    return out


def run(fabric: Path, repeat: int) -> dict[str, Any]:
    core, start_s = _core(fabric)
    gc.collect()
    out: dict[str, Any] = {
        "fabric": core.planner.fabric_name,
        "switches": len(core.views),
        "links": sum(1 for _ in core.links()),
        "core_start_s": round(start_s, 1),
    }
    out["endpoints"] = asyncio.run(_measure(core, repeat))
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.web", description=__doc__.split("\n")[0])
    parser.add_argument("fabric", type=Path, help="fabric intent YAML")
    parser.add_argument("--repeat", type=int, default=20, help="requests per endpoint")
    parser.add_argument("--json", action="store_true", help="print JSON")
    args = parser.parse_args(argv)
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")
    try:
        out = run(args.fabric, args.repeat)
    except IntentError as exc:
        print(f"bench.web: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(out, indent=2))
        return 0
    print(f"{out['fabric']}: {out['switches']} switches, {out['links']} links, every link up "
          f"(core started in {out['core_start_s']} s)")  # fmt: skip
    for name, f in out["endpoints"].items():
        print(
            f"{name:16s} {f['path']:40s} median {f['median_ms']:6.1f} ms, max "
            f"{f['max_ms']:6.1f} ms, {f['bytes']:>9,} bytes ({f['requests']} requests; the "
            f"first {f['first_ms']:.1f} ms)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
