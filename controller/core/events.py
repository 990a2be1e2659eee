"""Typed events: one constructor per kind, so every event carries its figures in fields (the
admin API's `Event.detail`) and its sentence is derived from them, never the other way."""

from __future__ import annotations

from typing import TypeAlias

from railfabric.v1 import admin_pb2

Kind: TypeAlias = admin_pb2.EventKind.ValueType
K = admin_pb2


def kind_name(kind: Kind) -> str:
    """ "port_down" for EVENT_KIND_PORT_DOWN: the short name people and grep see."""
    return admin_pb2.EventKind.Name(kind).removeprefix("EVENT_KIND_").lower()


def event(
    wall_ns: int,
    kind: Kind,
    message: str,
    *,
    switch: str = "",
    port: int = 0,
    generation: int = 0,
) -> admin_pb2.Event:
    return admin_pb2.Event(
        wall_ns=wall_ns,
        type=kind,
        kind=kind_name(kind),
        switch_name=switch,
        port=port,
        message=message,
        generation=generation,
    )


def port_change(
    wall_ns: int, switch: str, port: int, change: admin_pb2.PortChange
) -> admin_pb2.Event:
    state = "up" if change.up else "down"
    text = f"carrier {state}"
    if change.groups_repaired:  # an agent older than LocalRepair
        text += (
            f", {change.groups_repaired} groups repaired locally in "
            f"{change.local_repair_ns / 1e6:.2f} ms"
        )
    kind = K.EVENT_KIND_PORT_UP if change.up else K.EVENT_KIND_PORT_DOWN
    e = event(wall_ns, kind, text, switch=switch, port=port)
    e.port_change.CopyFrom(change)
    return e


def local_repair(
    wall_ns: int, switch: str, port: int, change: admin_pb2.PortChange
) -> admin_pb2.Event:
    text = (
        f"{change.groups_repaired} groups repaired locally in "
        f"{change.local_repair_ns / 1e6:.2f} ms after carrier loss"
    )
    e = event(wall_ns, K.EVENT_KIND_LOCAL_REPAIR, text, switch=switch, port=port)
    e.port_change.CopyFrom(change)
    return e


def link_change(wall_ns: int, change: admin_pb2.LinkChange) -> admin_pb2.Event:
    verb = "returns to routing" if change.usable else "leaves routing"
    text = (
        f"link {change.link} {verb}; {change.switches_changed} switches change "
        f"(computed in {change.compute_ns / 1e6:.2f} ms)"
    )
    kind = K.EVENT_KIND_LINK_UP if change.usable else K.EVENT_KIND_LINK_DOWN
    e = event(wall_ns, kind, text, switch=change.a.switch_name, port=change.a.port)
    e.link_change.CopyFrom(change)
    return e


def converged(wall_ns: int, figures: admin_pb2.ConvergenceFigures) -> admin_pb2.Event:
    f = figures
    text = (
        f"link {f.link}: {f.switches} switches applied {f.entries} objects "
        f"{f.event_to_applied_ns / 1e6:.1f} ms after the event (report {f.report_ns / 1e6:.1f} "
        f"ms, compute {f.compute_ns / 1e6:.1f} ms, push {f.push_ns / 1e6:.1f} ms, apply "
        f"{f.apply_ns / 1e6:.1f} ms)"
    )
    e = event(wall_ns, K.EVENT_KIND_CONVERGED, text)
    e.convergence.CopyFrom(figures)
    return e


def pushed(
    wall_ns: int, summary: admin_pb2.PushSummary, switch: str = "", generation: int = 0
) -> admin_pb2.Event:
    what = f"{summary.switches} switches" if not switch else f"generation {generation}"
    text = f"pushed {what} ({summary.objects} objects"
    text += f", {summary.snapshots} full states)" if summary.snapshots else ")"
    e = event(wall_ns, K.EVENT_KIND_PUSHED, text, switch=switch, generation=generation)
    e.push.CopyFrom(summary)
    return e


def drain(wall_ns: int, d: admin_pb2.LinkDrain, *, undrain: bool = False) -> admin_pb2.Event:
    """An operator drained `d.link` (or returned it to routing), with who and why."""
    verb = "returned to routing" if undrain else "drained"
    text = f"link {d.link} {verb} by {d.who}"
    if d.reason:
        text += f": {d.reason}"
    if d.forced and not undrain:
        text += " (forced past the what-if check)"
    kind = K.EVENT_KIND_UNDRAIN if undrain else K.EVENT_KIND_DRAIN
    e = event(wall_ns, kind, text, switch=d.a.switch_name, port=d.a.port)
    e.drain.CopyFrom(d)
    return e
