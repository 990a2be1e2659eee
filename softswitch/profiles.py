"""Action profiles (P4Runtime spec §9.2): members, groups, and the references table entries and
groups hold on them.

Members are ordered as bmv2 orders them: by its member handle, which is the lowest free handle
when the member is created (creation order while nothing is deleted; PI and bmv2's
action_profile.cpp), never by P4Runtime member id. A selector picks among a group's members in
that order (railfabric.ecmp.choose_member). A member or group still referenced cannot be
deleted (FAILED_PRECONDITION). Pure.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol

from finsy.proto import p4r

from softswitch.codes import Code, P4Error
from softswitch.entities import (
    DELETE,
    INSERT,
    MODIFY,
    ActionCall,
    GroupRef,
    MemberRef,
    OneShot,
    OneShotAction,
    TableAction,
    UpdateType,
    decode_action,
    decode_watch_port,
)
from softswitch.schema import FabricSchema, ProfileInfo, TableInfo


@dataclass(slots=True)
class MemberState:
    member_id: int
    handle: int  # bmv2's member handle: the lowest free one at creation; orders a group
    action: ActionCall
    message: p4r.ActionProfileMember


@dataclass(frozen=True, slots=True)
class GroupMemberState:
    member_id: int
    weight: int
    watch_port: int | None


@dataclass(slots=True)
class GroupState:
    group_id: int
    max_size: int
    members: tuple[GroupMemberState, ...]
    message: p4r.ActionProfileGroup


class ProfileHooks(Protocol):
    def profile_changed(self) -> None: ...


class ProfileStore:
    """The members and groups of every action profile of one pipeline config."""

    def __init__(self, schema: FabricSchema, hooks: ProfileHooks) -> None:
        self.schema = schema
        self._hooks = hooks
        self.members: dict[int, dict[int, MemberState]] = {p: {} for p in schema.profiles}
        self.groups: dict[int, dict[int, GroupState]] = {p: {} for p in schema.profiles}
        # Table entries and groups that reference a member / a group (delete refuses them).
        self._member_refs: dict[tuple[int, int], int] = {}
        self._group_refs: dict[tuple[int, int], int] = {}
        self._free_handles: dict[int, list[int]] = {p: [] for p in schema.profiles}
        self._next_handle: dict[int, int] = dict.fromkeys(schema.profiles, 0)
        # The actions a member of each profile may call: those of the tables it implements.
        self._member_actions: dict[int, frozenset[int]] = {
            p.id: frozenset().union(
                *(schema.tables[t].entry_actions for t in p.table_ids if t in schema.tables)
            )
            for p in schema.profiles.values()
        }

    def _profile(self, profile_id: int) -> ProfileInfo:
        profile = self.schema.profiles.get(profile_id)
        if profile is None:
            raise P4Error(Code.INVALID_ARGUMENT, f"no action profile with id {profile_id}")
        return profile

    # ---- what table entries refer to ---------------------------------------------------

    def table_action(self, table: TableInfo, action: p4r.TableAction, which: str) -> TableAction:
        """The indirect action of an entry of `table` (implemented by a profile): an existing
        member, an existing group, or a one-shot action set (§9.2.3)."""
        profile_id = table.implementation_id
        if which == "action_profile_member_id":
            member_id = action.action_profile_member_id
            if member_id not in self.members[profile_id]:
                raise P4Error(Code.NOT_FOUND, f"{table.name}: no member {member_id}")
            return MemberRef(member_id)
        if which == "action_profile_group_id":
            group_id = action.action_profile_group_id
            if group_id not in self.groups[profile_id]:
                raise P4Error(Code.NOT_FOUND, f"{table.name}: no group {group_id}")
            return GroupRef(group_id)
        if which == "action_profile_action_set":
            return self._one_shot(table, action.action_profile_action_set)
        raise P4Error(Code.INVALID_ARGUMENT, f"{table.name}: entry has no action")

    def _one_shot(self, table: TableInfo, action_set: p4r.ActionProfileActionSet) -> OneShot:
        profile = self.schema.profiles[table.implementation_id]
        where = f"{table.name} one-shot"
        actions: list[OneShotAction] = []
        total = 0
        for item in action_set.action_profile_actions:
            call = decode_action(self.schema.actions, item.action, table.entry_actions, where)
            if item.weight < 0:
                raise P4Error(Code.INVALID_ARGUMENT, f"{where}: weight < 0")
            weight = item.weight or 1
            total += weight
            actions.append(OneShotAction(call, weight, decode_watch_port(item, where)))
        if not actions:
            raise P4Error(Code.INVALID_ARGUMENT, f"{table.name}: empty one-shot action set")
        if profile.max_group_size and total > profile.max_group_size:
            raise P4Error(
                Code.RESOURCE_EXHAUSTED,
                f"{where}: {total} weighted actions exceed {profile.max_group_size}",
            )
        return OneShot(tuple(actions))

    def ref(self, profile_id: int, action: TableAction) -> None:
        if isinstance(action, MemberRef):
            k = (profile_id, action.member_id)
            self._member_refs[k] = self._member_refs.get(k, 0) + 1
        elif isinstance(action, GroupRef):
            k = (profile_id, action.group_id)
            self._group_refs[k] = self._group_refs.get(k, 0) + 1

    def unref(self, profile_id: int, action: TableAction) -> None:
        if isinstance(action, MemberRef):
            self._member_refs[(profile_id, action.member_id)] -= 1
        elif isinstance(action, GroupRef):
            self._group_refs[(profile_id, action.group_id)] -= 1

    # ---- members ------------------------------------------------------------------------

    def write_member(self, msg: p4r.ActionProfileMember, utype: UpdateType) -> None:
        profile = self._profile(msg.action_profile_id)
        profile_id = profile.id
        members = self.members[profile_id]
        old = members.get(msg.member_id)
        where = f"{profile.name} member {msg.member_id}"
        if utype is DELETE:
            if old is None:
                raise P4Error(Code.NOT_FOUND, f"{where}: no such member to delete")
            if self._member_refs.get((profile_id, msg.member_id), 0) > 0:
                raise P4Error(
                    Code.FAILED_PRECONDITION, f"{where} is still used by a group or table entry"
                )
            del members[msg.member_id]
            heapq.heappush(self._free_handles[profile_id], old.handle)
            self._hooks.profile_changed()
            return
        if utype is INSERT and old is not None:
            raise P4Error(Code.ALREADY_EXISTS, f"{where} already exists")
        if utype is MODIFY and old is None:
            raise P4Error(Code.NOT_FOUND, f"{where}: no such member to modify")
        action = decode_action(
            self.schema.actions, msg.action, self._member_actions[profile_id], where
        )
        if old is not None:
            old.action = action
            old.message = msg
        else:
            if profile.size and len(members) >= profile.size:
                raise P4Error(Code.RESOURCE_EXHAUSTED, f"{profile.name}: {profile.size} members")
            members[msg.member_id] = MemberState(
                msg.member_id, self._new_handle(profile_id), action, msg
            )
        self._hooks.profile_changed()

    def _new_handle(self, profile_id: int) -> int:
        """bmv2's handle for a new member: the lowest one free."""
        free = self._free_handles[profile_id]
        if free:
            return heapq.heappop(free)
        handle = self._next_handle[profile_id]
        self._next_handle[profile_id] = handle + 1
        return handle

    # ---- groups -------------------------------------------------------------------------

    def write_group(self, msg: p4r.ActionProfileGroup, utype: UpdateType) -> None:
        profile = self._profile(msg.action_profile_id)
        profile_id = profile.id
        groups = self.groups[profile_id]
        old = groups.get(msg.group_id)
        where = f"{profile.name} group {msg.group_id}"
        if utype is DELETE:
            if old is None:
                raise P4Error(Code.NOT_FOUND, f"{where}: no such group to delete")
            if self._group_refs.get((profile_id, msg.group_id), 0) > 0:
                raise P4Error(Code.FAILED_PRECONDITION, f"{where} is still used by a table entry")
            del groups[msg.group_id]
            for old_member in old.members:
                self._member_refs[(profile_id, old_member.member_id)] -= 1
            self._hooks.profile_changed()
            return
        if utype is INSERT and old is not None:
            raise P4Error(Code.ALREADY_EXISTS, f"{where} already exists")
        if utype is MODIFY and old is None:
            raise P4Error(Code.NOT_FOUND, f"{where}: no such group to modify")
        max_size = msg.max_size
        if max_size < 0 or (profile.max_group_size and max_size > profile.max_group_size):
            raise P4Error(
                Code.INVALID_ARGUMENT,
                f"{where}: max_size {max_size} exceeds the profile's {profile.max_group_size}",
            )
        if old is not None and max_size and max_size != old.max_size:
            raise P4Error(Code.INVALID_ARGUMENT, f"{where}: max_size cannot be modified")
        limit = (old.max_size if old is not None else max_size) or profile.max_group_size
        members: list[GroupMemberState] = []
        seen: set[int] = set()
        total = 0
        existing = self.members[profile_id]
        for m in msg.members:
            if m.member_id in seen:
                raise P4Error(Code.INVALID_ARGUMENT, f"{where}: member {m.member_id} repeated")
            seen.add(m.member_id)
            if m.member_id not in existing:
                raise P4Error(Code.NOT_FOUND, f"{where}: no member {m.member_id}")
            if m.weight < 0:
                raise P4Error(Code.INVALID_ARGUMENT, f"{where}: member {m.member_id} weight < 0")
            weight = m.weight or 1  # clients that leave weight unset mean 1
            total += weight
            members.append(GroupMemberState(m.member_id, weight, decode_watch_port(m, where)))
        if limit and total > limit:
            raise P4Error(
                Code.RESOURCE_EXHAUSTED, f"{where}: {total} weighted members exceed max {limit}"
            )
        if old is None and profile.size and len(groups) >= profile.size:
            raise P4Error(Code.RESOURCE_EXHAUSTED, f"{profile.name}: {profile.size} groups")
        for gm in members:
            k = (profile_id, gm.member_id)
            self._member_refs[k] = self._member_refs.get(k, 0) + 1
        if old is not None:
            for gm in old.members:
                self._member_refs[(profile_id, gm.member_id)] -= 1
        groups[msg.group_id] = GroupState(
            msg.group_id, old.max_size if old is not None else max_size, tuple(members), msg
        )
        self._hooks.profile_changed()

    # ---- reads --------------------------------------------------------------------------

    def _profiles_for(self, profile_id: int) -> list[int]:
        return [self._profile(profile_id).id] if profile_id else list(self.schema.profiles)

    def read_members(self, query: p4r.ActionProfileMember) -> Iterator[p4r.Entity]:
        for profile_id in self._profiles_for(query.action_profile_id):
            for member in self.members[profile_id].values():
                if query.member_id and member.member_id != query.member_id:
                    continue
                yield p4r.Entity(action_profile_member=member.message)

    def read_groups(self, query: p4r.ActionProfileGroup) -> Iterator[p4r.Entity]:
        for profile_id in self._profiles_for(query.action_profile_id):
            for group in self.groups[profile_id].values():
                if query.group_id and group.group_id != query.group_id:
                    continue
                yield p4r.Entity(action_profile_group=group.message)
