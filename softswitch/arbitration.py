"""P4Runtime client arbitration (spec §5 "Client Arbitration and Controller Replication").

Per (device, role) the connected client with the highest election id is the primary. Every
client is answered with the primary's election id (or the highest ever seen when there is no
primary) and OK when it is the primary, ALREADY_EXISTS when another client is, NOT_FOUND when
none is. A second client with an election id already in use is refused INVALID_ARGUMENT.
When the primary leaves or is outbid, the next highest is promoted and every client of that
role is told. Pure: the server maps streams to hashable client keys.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field

from softswitch.codes import Code, P4Error


@dataclass(frozen=True)
class ArbitrationAnswer:
    """What to send one client: the primary's election id and the status for this client."""

    client: Hashable
    role: str
    election_id: int
    code: Code


@dataclass
class _Client:
    role: str
    election_id: int | None


@dataclass
class Arbiter:
    device_id: int
    _clients: dict[Hashable, _Client] = field(default_factory=dict)
    _highest: dict[str, int] = field(default_factory=dict)  # highest election id ever, per role

    def primary(self, role: str) -> Hashable | None:
        best: tuple[int, Hashable] | None = None
        for key, client in self._clients.items():
            if (
                client.role == role
                and client.election_id is not None
                and (best is None or client.election_id > best[0])
            ):
                best = (client.election_id, key)
        return None if best is None else best[1]

    def primary_election_id(self, role: str) -> int | None:
        key = self.primary(role)
        return None if key is None else self._clients[key].election_id

    def election_id(self, client: Hashable) -> int | None:
        """`client`'s election id; None when it has none or is not connected."""
        c = self._clients.get(client)
        return None if c is None else c.election_id

    def primaries(self) -> list[Hashable]:
        roles = {c.role for c in self._clients.values()}
        return [p for p in (self.primary(r) for r in roles) if p is not None]

    def is_primary(self, client: Hashable) -> bool:
        c = self._clients.get(client)
        return c is not None and self.primary(c.role) == client

    def update(
        self, client: Hashable, device_id: int, role: str, election_id: int | None
    ) -> list[ArbitrationAnswer]:
        """A MasterArbitrationUpdate from `client`; the answers to send (it always gets one)."""
        if device_id != self.device_id:
            raise P4Error(
                Code.NOT_FOUND, f"device id {device_id} not found (this is {self.device_id})"
            )
        current = self._clients.get(client)
        if current is not None and current.role != role:
            raise P4Error(Code.FAILED_PRECONDITION, "a stream cannot change its role")
        if election_id is not None:
            for key, other in self._clients.items():
                if key != client and other.role == role and other.election_id == election_id:
                    raise P4Error(
                        Code.INVALID_ARGUMENT,
                        f"Election id {election_id} is already used by another client",
                    )
            self._highest[role] = max(self._highest.get(role, 0), election_id)
        before = self.primary(role)
        self._clients[client] = _Client(role, election_id)
        after = self.primary(role)
        if before != after:
            return self._answers(role)
        return [a for a in self._answers(role) if a.client == client]

    def remove(self, client: Hashable) -> list[ArbitrationAnswer]:
        """`client`'s stream closed; the answers to send when that changed the primary."""
        gone = self._clients.get(client)
        if gone is None:
            return []
        before = self.primary(gone.role)
        del self._clients[client]
        return self._answers(gone.role) if before == client else []

    def _answers(self, role: str) -> list[ArbitrationAnswer]:
        primary = self.primary(role)
        if primary is None:
            election_id = self._highest.get(role, 0)
        else:
            election_id = self._clients[primary].election_id or 0
        answers = []
        for key, client in self._clients.items():
            if client.role != role:
                continue
            if primary is None:
                code = Code.NOT_FOUND
            elif key == primary:
                code = Code.OK
            else:
                code = Code.ALREADY_EXISTS
            answers.append(ArbitrationAnswer(key, role, election_id, code))
        return answers
