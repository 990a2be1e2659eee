"""P4Runtime entities formatted for people, with the P4Info's names: the one formatter behind
the labs' `tables SW` and the agent's TablesReport (`railctl tables`).

A table entry is (table, key, action): `("routing_v4", "ipv4_dst=10.0.0.16/29",
"set_next_id(next_id=3)")`. MACs (48-bit values) print as aa:bb:cc:dd:ee:ff, an LPM key on a
32-bit field as a dotted IPv4 address (an LPM field left out as /0), an EtherType in hex, every
other value in decimal. With `qualified`, tables, actions and the action profile carry their
full P4Info names ("FabricIngress.routing_v4", "FabricIngress.ecmp_selector member"); without,
their aliases ("routing_v4", "ecmp member")."""

from __future__ import annotations

from finsy.proto import p4i, p4r

from railfabric.p4bytes import decode_unchecked


def format_value(raw: bytes, bitwidth: int, as_address: bool = False, name: str = "") -> str:
    """A value of a `bitwidth`-bit field (`name`d: an EtherType prints in hex, 0x88cc)."""
    number = decode_unchecked(raw)
    if name.endswith("eth_type"):
        return f"{number:#06x}"
    if bitwidth == 48:
        return ":".join(f"{(number >> s) & 0xFF:02x}" for s in range(40, -8, -8))
    if bitwidth == 32 and as_address:
        return ".".join(str((number >> s) & 0xFF) for s in (24, 16, 8, 0))
    return str(number)


class EntityFormatter:
    """Formats entities of one P4Info (its lookups built once: a switch has many entries)."""

    def __init__(self, info: p4i.P4Info, *, qualified: bool = False) -> None:
        self.qualified = qualified
        self._actions = {a.preamble.id: a for a in info.actions}
        self._tables = {t.preamble.id: t for t in info.tables}
        self._profiles = {p.preamble.id: p for p in info.action_profiles}

    def _name(self, preamble: p4i.Preamble) -> str:
        return preamble.name if self.qualified or not preamble.alias else preamble.alias

    def _profile(self, profile_id: int) -> str:
        profile = self._profiles.get(profile_id)
        if profile is None:
            return f"action profile {profile_id}"
        return self._name(profile.preamble) if self.qualified else "ecmp"

    def action(self, action: p4r.Action) -> str:
        a = self._actions.get(action.action_id)
        if a is None:
            return f"action {action.action_id}"
        widths = {p.id: (p.name, p.bitwidth) for p in a.params}
        params = ", ".join(
            f"{widths[p.param_id][0]}={format_value(p.value, widths[p.param_id][1])}"
            for p in action.params
            if p.param_id in widths
        )
        return f"{self._name(a.preamble)}({params})"

    def __call__(self, entity: p4r.Entity) -> tuple[str, str, str]:
        """(object, key, action) of a table entry, action-profile member or group."""
        kind = entity.WhichOneof("entity")
        if kind == "action_profile_member":
            m = entity.action_profile_member
            profile = self._profile(m.action_profile_id)
            return (f"{profile} member", str(m.member_id), self.action(m.action))
        if kind == "action_profile_group":
            g = entity.action_profile_group
            profile = self._profile(g.action_profile_id)
            return (
                profile if self.qualified else f"{profile} group",
                str(g.group_id),
                f"members {', '.join(_group_member(m) for m in g.members)}",
            )
        te = entity.table_entry
        table = self._tables.get(te.table_id)
        if table is None:
            return (f"table {te.table_id}", "", "")
        fields = {f.id: f for f in table.match_fields}
        key: list[str] = []
        given = {fm.field_id for fm in te.match}
        if not te.is_default_action:
            # An LPM field left out is /0 (P4Runtime omits don't-care fields): say so.
            key.extend(
                f"{f.name}={format_value(b'', f.bitwidth, True)}/0"
                for f in table.match_fields
                if f.id not in given and f.match_type == p4i.MatchField.LPM
            )
        for fm in te.match:
            f = fields.get(fm.field_id)
            name, width = (f.name, f.bitwidth) if f is not None else (f"field {fm.field_id}", 0)
            which = fm.WhichOneof("field_match_type")
            if which == "exact":
                key.append(f"{name}={format_value(fm.exact.value, width, name=name)}")
            elif which == "lpm":
                address = format_value(fm.lpm.value, width, True)
                key.append(f"{name}={address}/{fm.lpm.prefix_len}")
            elif which == "ternary":
                value = format_value(fm.ternary.value, width, name=name)
                key.append(f"{name}={value}&&&{format_value(fm.ternary.mask, width, name=name)}")
        if te.is_default_action:
            key.append("(default)")
        if te.priority:
            key.append(f"priority {te.priority}")
        chosen = te.action.WhichOneof("type")
        if chosen == "action":
            action = self.action(te.action.action)
        elif chosen == "action_profile_member_id":
            action = f"member {te.action.action_profile_member_id}"
        elif chosen == "action_profile_group_id":
            action = f"group {te.action.action_profile_group_id}"
        else:
            action = "-"
        return (self._name(table.preamble), " ".join(key), action)


def _group_member(m: p4r.ActionProfileGroup.Member) -> str:
    """A group's member: its id, its weight when not 1, and the port it watches."""
    out = str(m.member_id)
    if m.weight > 1:
        out += f" weight {m.weight}"
    kind = m.WhichOneof("watch_kind")
    if kind == "watch_port":
        out += f" watch {decode_unchecked(m.watch_port)}"
    elif kind == "watch":
        out += f" watch {m.watch}"
    return out


def format_entity(info: p4i.P4Info, entity: p4r.Entity) -> tuple[str, str, str]:
    """(object, key, action) of one entity, with the P4Info's aliases."""
    return EntityFormatter(info)(entity)
