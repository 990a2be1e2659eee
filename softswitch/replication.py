"""The packet replication engine (P4Runtime spec §9.5): clone sessions, which fabric.p4's
`clone(CloneType.I2E, NAK_SAMPLE_SESSION)` copies sampled NAKs into. Multicast groups: the
program uses none, so writing one is UNIMPLEMENTED and a wildcard read finds none.

A session is its replicas' egress ports (a port, or the CPU port for packet-in). Like bmv2
(PI keeps a clone session as a multicast group of the replicas, PI's pre_clone_mgr.cpp), a
replica names its port in `egress_port`; the P4Runtime 1.4 `port` bytes are taken too. Class of
service is refused as PI refuses it; truncation (`packet_length_bytes`) is kept and applied.
Pure: the pipeline asks `ports_of(session)` for each clone.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from finsy.proto import p4r

from railfabric.p4bytes import ValueWidthError, decode
from softswitch.codes import Code, P4Error
from softswitch.entities import UpdateType

# PI's range for clone session ids (bmv2's mirroring sessions): 1 .. 32767.
MAX_SESSION_ID = 32767


@dataclass(frozen=True, slots=True)
class CloneSession:
    session_id: int
    replicas: tuple[tuple[int, int], ...]  # (egress port, instance), in the order written
    packet_length_bytes: int  # 0: the whole frame


class ReplicationStore:
    """The clone sessions of one pipeline config; `valid_ports` are where a replica may go."""

    def __init__(self, valid_ports: Iterable[int]) -> None:
        self.valid_ports = frozenset(valid_ports)
        self.sessions: dict[int, CloneSession] = {}

    def write(self, msg: p4r.PacketReplicationEngineEntry, utype: UpdateType) -> None:
        kind = msg.WhichOneof("type")
        if kind == "multicast_group_entry":
            raise P4Error(Code.UNIMPLEMENTED, "fabric.p4 uses no multicast groups")
        if kind != "clone_session_entry":
            raise P4Error(Code.INVALID_ARGUMENT, "packet replication entry is empty")
        entry = msg.clone_session_entry
        sid = entry.session_id
        if not 1 <= sid <= MAX_SESSION_ID:
            raise P4Error(Code.OUT_OF_RANGE, f"clone session id {sid} out of 1..{MAX_SESSION_ID}")
        exists = sid in self.sessions
        if utype is UpdateType.DELETE:
            if not exists:
                raise P4Error(Code.NOT_FOUND, f"clone session {sid} does not exist")
            del self.sessions[sid]
            return
        if utype is UpdateType.INSERT and exists:
            raise P4Error(Code.ALREADY_EXISTS, f"clone session {sid} already exists")
        if utype is UpdateType.MODIFY and not exists:
            raise P4Error(Code.NOT_FOUND, f"clone session {sid} does not exist")
        if utype is UpdateType.UNSPECIFIED:
            raise P4Error(Code.INVALID_ARGUMENT, "update type is unspecified")
        if entry.class_of_service:
            raise P4Error(Code.UNIMPLEMENTED, f"clone session {sid}: class of service")
        replicas = tuple(self._replica(sid, r) for r in entry.replicas)
        if len(set(replicas)) != len(replicas):
            raise P4Error(Code.INVALID_ARGUMENT, f"clone session {sid}: a replica is repeated")
        self.sessions[sid] = CloneSession(sid, replicas, entry.packet_length_bytes)

    def _replica(self, sid: int, replica: p4r.Replica) -> tuple[int, int]:
        kind = replica.WhichOneof("port_kind")
        if kind == "port":
            try:
                port = decode(replica.port, 32, f"clone session {sid} replica port")
            except ValueWidthError as err:
                raise P4Error(Code.INVALID_ARGUMENT, str(err)) from None
        else:
            port = replica.egress_port
        if port not in self.valid_ports:
            raise P4Error(Code.INVALID_ARGUMENT, f"clone session {sid}: no port {port}")
        return port, replica.instance

    def read(self, query: p4r.PacketReplicationEngineEntry) -> Iterator[p4r.Entity]:
        kind = query.WhichOneof("type")
        if kind != "clone_session_entry":
            return  # no multicast groups; an empty query reads none
        sid = query.clone_session_entry.session_id
        if sid and sid not in self.sessions:
            raise P4Error(Code.NOT_FOUND, f"clone session {sid} does not exist")
        for session in sorted(self.sessions.values(), key=lambda s: s.session_id):
            if sid and session.session_id != sid:
                continue
            yield p4r.Entity(
                packet_replication_engine_entry=p4r.PacketReplicationEngineEntry(
                    clone_session_entry=p4r.CloneSessionEntry(
                        session_id=session.session_id,
                        replicas=[
                            p4r.Replica(egress_port=port, instance=instance)
                            for port, instance in session.replicas
                        ],
                        packet_length_bytes=session.packet_length_bytes,
                    )
                )
            )
