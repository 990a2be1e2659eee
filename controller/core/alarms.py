"""Active alarms: raised once, cleared once, each with a stable id (pure).

The core owns one `Alarms`; raising an alarm that is already active or clearing one that is
not changes nothing, so inputs that repeat (a Neighbors report every few seconds, a store
that keeps failing) do not flood the store or the event history.
"""

from __future__ import annotations

from collections.abc import Mapping

from controller.core.records import AlarmRecord


class Alarms:
    def __init__(self, active: list[AlarmRecord] | None = None) -> None:
        self.active: dict[str, AlarmRecord] = {}
        # The active alarms of each kind (what a check of one kind looks at, without a pass
        # over every alarm: a large fabric may hold thousands).
        self.of_kind: dict[str, dict[str, AlarmRecord]] = {}
        for a in active or []:
            self.raise_(a)

    def raise_(self, alarm: AlarmRecord) -> bool:
        """True when `alarm` is new (it must be recorded and announced)."""
        if alarm.id in self.active:
            return False
        self.active[alarm.id] = alarm
        self.of_kind.setdefault(alarm.kind, {})[alarm.id] = alarm
        return True

    def clear(self, alarm_id: str) -> AlarmRecord | None:
        """The alarm that was cleared, or None when it was not active."""
        alarm = self.active.pop(alarm_id, None)
        if alarm is not None:
            kind = self.of_kind[alarm.kind]
            del kind[alarm_id]
            if not kind:
                del self.of_kind[alarm.kind]
        return alarm

    def kind(self, kind: str) -> Mapping[str, AlarmRecord]:
        """The active alarms of `kind`, by id."""
        return self.of_kind.get(kind, {})

    def __contains__(self, alarm_id: object) -> bool:
        return alarm_id in self.active

    def __len__(self) -> int:
        return len(self.active)
