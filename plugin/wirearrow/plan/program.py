"""Builds the decoder's flat tables (a trie of message nodes) from the fields a plan reads.

A node is one message at one position of the plan trie: the record, or a sub-message reached
through a field. Columns hold one slot per element of a group; a group is opened by each
occurrence of a repeated field (each entry of a map), the root group by each record.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from google.protobuf import __version__ as PROTOBUF_VERSION
from google.protobuf.descriptor import Descriptor, FieldDescriptor

from wirearrow._core.decoder import FLAG, FORM, KIND, Program, set_packed_enum_sign_extends
from wirearrow._core.layout import (
    DecodeAnySpec,
    DecodeColumn,
    DecodeDefault,
    DecodeEntry,
    DecodeEnumSet,
    DecodeMapSpec,
    DecodeNode,
)
from wirearrow.plan.types import (
    default_bytes,
    fields_of,
    has_presence,
    is_closed_enum,
    is_map,
    is_message,
    is_repeated,
    needs_utf8_check,
    scalar_kind,
)

__all__ = ["NodeSpec", "ProgramBuilder"]

# Above this many, field numbers are found by binary search instead of a direct table.
_DENSE_LIMIT = 1024

_T = FieldDescriptor
# How a map entry's key or value is written back when upb keeps the entry as an unknown
# field (decoder.FORM, by field type).
_FORMS = {
    _T.TYPE_INT32: "int32", _T.TYPE_ENUM: "int32", _T.TYPE_UINT32: "uint32",
    _T.TYPE_SINT32: "uint32", _T.TYPE_INT64: "int64", _T.TYPE_UINT64: "int64",
    _T.TYPE_SINT64: "int64", _T.TYPE_BOOL: "bool", _T.TYPE_FIXED32: "fixed32",
    _T.TYPE_SFIXED32: "fixed32", _T.TYPE_FLOAT: "fixed32", _T.TYPE_FIXED64: "fixed64",
    _T.TYPE_SFIXED64: "fixed64", _T.TYPE_DOUBLE: "fixed64", _T.TYPE_STRING: "bytes",
    _T.TYPE_BYTES: "bytes", _T.TYPE_MESSAGE: "message",
}  # fmt: skip

# upb's re-encoding of a packed closed enum's undeclared values changed in protobuf 7
# (decoder.pyx, packed_enum_sign_extends): decode as the installed runtime does.
set_packed_enum_sign_extends(int(PROTOBUF_VERSION.split(".")[0]) >= 7)


@dataclass(eq=False)
class NodeSpec:
    index: int
    message: Descriptor
    group: int
    presence: int  # column, -1 for the root
    implicit: bool = False  # a map value: present whenever its entry is
    unknown: int = -1  # column of the raw unknown fields (the `_unknown` pseudo-field)
    map_entry: bool = False  # an unknown field rejects the entry (see _reject_entries)
    fields: dict[int, _EntrySpec] = field(default_factory=dict)
    defaults: list[DecodeDefault] = field(default_factory=list)
    # google.protobuf.Any read with any_types: per declared type (full name), the node its
    # value is decoded by when the type URL names it (a struct beside type_url and value)
    any_types: dict[str, NodeSpec] = field(default_factory=dict)


@dataclass(eq=False)
class _EntrySpec:
    field: FieldDescriptor
    column: int = -1
    child: NodeSpec | None = None
    group: int = -1
    lenient: bool = False  # only checked (validate="full", oneof siblings), never stored
    raw: bool = False  # a sub-message read as its serialized bytes


class ProgramBuilder:
    def __init__(self, root: Descriptor, *, max_nesting: int) -> None:
        self.max_nesting = max_nesting
        self.columns: list[DecodeColumn] = []
        self.groups: list[int] = [-1]
        self.group_of_column: list[int] = []
        self.nodes: list[NodeSpec] = []
        self._validators: dict[str, NodeSpec] = {}
        # Column -> the column whose validity it shares (-1: always valid), filled by build().
        self.validity_from: dict[int, int] = {}
        # String columns read as binary (unvalidated_strings="binary") need no UTF-8 check,
        # unless a leaf also reads them as text.
        self.binary_columns: set[int] = set()
        self.text_columns: set[int] = set()
        # Bytes fields read as text (bytes_as_string): a value that is not UTF-8 is a bad
        # record (the runtime accepts any bytes there; the utf8 column cannot hold them).
        self.string_bytes: set[int] = set()
        # unvalidated_strings="reject": a string the schema does not validate, read into a
        # utf8 column and not UTF-8, fails its record instead of becoming an unknown field.
        self.reject_unvalidated = False
        # extensions=True: the extensions the pool declares are fields of every message
        # (known, validated, not unknown fields); otherwise they are unknown fields.
        self.extensions = False
        self.root = self._node(root, group=0, presence=-1)
        # Closed enums' declared values and maps' entry rules, one row per distinct type.
        self.enum_sets: list[DecodeEnumSet] = []
        self._enum_set_of: dict[str, int] = {}
        self.map_specs: list[DecodeMapSpec] = []
        self._map_spec_of: dict[str, int] = {}
        self.any_specs: list[DecodeAnySpec] = []

    # -- allocation -------------------------------------------------------------------

    def _column(self, width: int, group: int) -> int:
        self.columns.append(DecodeColumn(width=width, group=group))
        return len(self.columns) - 1

    def _node(self, message: Descriptor, *, group: int, presence: int) -> NodeSpec:
        node = NodeSpec(len(self.nodes), message, group, presence)
        self.nodes.append(node)
        return node

    def _entry(self, node: NodeSpec, fd: FieldDescriptor) -> _EntrySpec:
        entry = node.fields.get(fd.number)
        if entry is None:
            entry = node.fields[fd.number] = _EntrySpec(fd)
        return entry

    def group_parent(self, group: int) -> int:
        return self.groups[group]

    def column_group(self, column: int) -> int:
        return self.columns[column].group

    # -- what a plan asks for ---------------------------------------------------------

    def scalar(self, node: NodeSpec, fd: FieldDescriptor) -> int:
        """The column holding singular scalar `fd` of `node` (one slot per element)."""
        entry = self._entry(node, fd)
        if entry.column < 0:
            entry.column = self._column(scalar_kind(fd).width, node.group)
            if not has_presence(fd, node.message):
                node.defaults.append(DecodeDefault(column=entry.column, value=default_bytes(fd)))
        return entry.column

    def message(self, node: NodeSpec, fd: FieldDescriptor) -> NodeSpec:
        """The node of singular sub-message `fd` of `node`; its presence column is set."""
        entry = self._entry(node, fd)
        if entry.raw:
            raise ValueError(f"{fd.full_name} cannot be read both as JSON and field by field")
        if entry.child is None:
            presence = self._column(0, node.group)
            entry.child = self._node(fd.message_type, group=node.group, presence=presence)
            entry.child.implicit = node.message.GetOptions().map_entry
        return entry.child

    def any_type(self, node: NodeSpec, message: Descriptor) -> NodeSpec:
        """The node decoding the value of Any `node` as `message` (a declared type), with
        its own presence column: valid where the type URL names it."""
        child = node.any_types.get(message.full_name)
        if child is None:
            presence = self._column(0, node.group)
            child = node.any_types[message.full_name] = self._node(
                message, group=node.group, presence=presence
            )
        return child

    def repeated(self, node: NodeSpec, fd: FieldDescriptor) -> tuple[int, NodeSpec | int]:
        """Group of repeated `fd` and, per element, its node (messages) or column (scalars)."""
        entry = self._entry(node, fd)
        if entry.group < 0:
            self.groups.append(node.group)
            entry.group = len(self.groups) - 1
            if is_message(fd):
                entry.child = self._node(fd.message_type, group=entry.group, presence=-1)
            else:
                entry.column = self._column(scalar_kind(fd).width, entry.group)
        return entry.group, (entry.child if entry.child is not None else entry.column)

    def raw(self, node: NodeSpec, fd: FieldDescriptor) -> tuple[int, int]:
        """(group, column of views over the serialized bytes) of sub-message field `fd`.

        The group is the node's own for a singular field, a new one for a repeated field.
        """
        entry = self._entry(node, fd)
        if entry.child is not None:
            raise ValueError(f"{fd.full_name} cannot be read both as JSON and field by field")
        entry.raw = True
        if is_repeated(fd) and entry.group < 0:
            self.groups.append(node.group)
            entry.group = len(self.groups) - 1
        if entry.column < 0:
            entry.column = self._column(8, entry.group if entry.group >= 0 else node.group)
        return (entry.group if entry.group >= 0 else node.group), entry.column

    def unknown(self, node: NodeSpec) -> int:
        """The column of views over `node`'s unknown fields, raw and in wire order."""
        if node.unknown < 0:
            node.unknown = self._column(8, node.group)
        return node.unknown

    def _know_every_field(self, node: NodeSpec) -> None:
        # Fields the plan does not read must still be told apart from unknown ones.
        for fd in fields_of(node.message, self.extensions):
            if fd.number not in node.fields:
                self._check_only(node, fd)

    def _check_only(self, node: NodeSpec, fd: FieldDescriptor) -> None:
        """An entry that reads `fd` and drops it (a sub-message by its length, unopened)."""
        entry = self._entry(node, fd)
        entry.lenient = True
        # A group has no length: walked to its end-group tag. A map's entries are looked
        # into when the unknown fields are kept: upb keeps some of them there.
        if fd.type == FieldDescriptor.TYPE_GROUP:
            entry.child = self._validator(fd.message_type)
        elif is_map(fd) and node.unknown >= 0:
            entry.child = self._node(fd.message_type, group=-1, presence=-1)

    # -- validate="full" --------------------------------------------------------------

    def validate_everything(self) -> None:
        """Give every node entries that check the fields the plan does not read."""
        for node in list(self.nodes):
            self._add_validators(node)

    def _validator(self, message: Descriptor) -> NodeSpec:
        node = self._validators.get(message.full_name)
        if node is None:
            node = self._validators[message.full_name] = self._node(message, group=-1, presence=-1)
            self._add_validators(node)
        return node

    def _add_validators(self, node: NodeSpec) -> None:
        for fd in fields_of(node.message, self.extensions):
            if fd.number in node.fields:
                continue
            if is_message(fd):
                entry = self._entry(node, fd)
                entry.child = self._validator(fd.message_type)
                entry.lenient = True
            elif needs_utf8_check(fd):
                self._entry(node, fd).lenient = True
            elif is_repeated(fd) and scalar_kind(fd).wire_type != 2:
                # A packed payload is parsed by the runtime too (a cut varint in it is an
                # error); skipped by its length, it would not be looked at.
                self._entry(node, fd).lenient = True

    # -- tables -----------------------------------------------------------------------

    def _complete_oneofs(self, node: NodeSpec) -> None:
        """Read every member of a oneof the plan touches: any of them unsets the others."""
        oneofs = {
            e.field.containing_oneof.full_name: e.field.containing_oneof
            for e in node.fields.values()
            if e.field.containing_oneof is not None and e.group < 0
        }
        for oneof in oneofs.values():
            for fd in oneof.fields:
                if fd.number not in node.fields:
                    self._check_only(node, fd)

    def _reject_entries(self, node: NodeSpec) -> None:
        """A map's entries the plan reads (or whose parent keeps unknown fields): one that
        holds an unknown field (or an undeclared closed-enum value) is not inserted; upb keeps
        it whole as an unknown field of the parent. Its node tells the decoder so (unknown
        -2), and knows the key and value even where the plan reads neither."""
        for entry in node.fields.values():
            fd = entry.field
            if not (is_map(fd) and entry.child is not None):
                continue
            if entry.group < 0 and node.unknown < 0:
                continue
            child = entry.child
            if self._validators.get(fd.message_type.full_name) is child:  # shared: copy
                child = entry.child = self._node(fd.message_type, group=-1, presence=-1)
                self._add_validators(child)
            child.map_entry = True
            self._know_every_field(child)

    def build(self) -> Program:
        for node in list(self.nodes):
            self._complete_oneofs(node)
            if node.unknown >= 0:
                self._know_every_field(node)
        for node in list(self.nodes):
            self._reject_entries(node)
        entries: list[DecodeEntry] = []
        nodes: list[DecodeNode] = []
        dense: list[int] = []
        defaults: list[DecodeDefault] = []
        clear_cols: list[int] = []
        for node in self.nodes:
            first = len(entries)
            numbers = sorted(node.fields)
            clear_of = self._oneof_clear_lists(node)
            for number in numbers:
                entry = node.fields[number]
                clear = clear_of.get(number, [])
                clear_at = len(clear_cols) if clear else -1
                clear_cols.extend(clear)
                entries.append(self._entry_row(node, entry, clear_at, len(clear)))
            # Cover every field number the message declares, read or not, so that skipping a
            # known field costs one table load instead of a search.
            declared = [
                f.number for f in fields_of(node.message, self.extensions) if f.number < _DENSE_LIMIT
            ]
            small = [n for n in numbers if n < _DENSE_LIMIT] + declared
            dense_len = (max(small) + 1) if small else 0
            dense_at = len(dense)
            table = [-1] * dense_len
            for i, number in enumerate(numbers):
                if number < dense_len:
                    table[number] = first + i
            dense.extend(table)
            node_defaults = self._defaults_on_entry(node)
            node_defaults = self._derive_zero_defaults(node, node_defaults)
            nodes.append(
                DecodeNode(
                    entries=first,
                    n_entries=len(numbers),
                    dense=dense_at,
                    dense_len=dense_len,
                    group=node.group,
                    presence=node.presence,
                    defaults=len(defaults),
                    n_defaults=len(node_defaults),
                    unknown=-2 if node.map_entry else node.unknown,
                )
            )
            defaults.extend(node_defaults)
        return Program(
            entries,
            nodes,
            dense,
            defaults,
            clear_cols,
            self.columns,
            self.groups,
            self.max_nesting,
            self.enum_sets,
            self.map_specs,
            self.any_specs,
        )

    def _enum_set(self, fd: FieldDescriptor) -> int:
        enum = fd.enum_type
        at = self._enum_set_of.get(enum.full_name)
        if at is None:
            values = tuple(sorted({v.number for v in enum.values}))
            self.enum_sets.append(DecodeEnumSet(values=values))
            at = self._enum_set_of[enum.full_name] = len(self.enum_sets) - 1
        return at

    def _map_spec(self, fd: FieldDescriptor) -> int:
        entry = fd.message_type
        at = self._map_spec_of.get(entry.full_name)
        if at is None:
            key, value = entry.fields_by_number[1], entry.fields_by_number[2]
            self.map_specs.append(
                DecodeMapSpec(
                    key_wire_type=scalar_kind(key).wire_type,
                    value_wire_type=2 if is_message(value) else scalar_kind(value).wire_type,
                    key_form=FORM[_FORMS[key.type]],
                    value_form=FORM[_FORMS[value.type]],
                    # (as upb writes an entry message back: the runtime's presence of its fields)
                    key_implicit=int(not key.has_presence),
                    value_implicit=int(not value.has_presence),
                    value_enum=self._enum_set(value) if is_closed_enum(value) else -1,
                )
            )
            at = self._map_spec_of[entry.full_name] = len(self.map_specs) - 1
        return at

    def _entry_row(
        self, node: NodeSpec, entry: _EntrySpec, clear_at: int, n_clear: int
    ) -> DecodeEntry:
        fd = entry.field
        flags = FLAG["lenient"] if entry.lenient else 0
        aux = -1
        if entry.group >= 0:
            flags |= FLAG["repeated"]
        if is_map(fd) and entry.child is not None and (entry.group >= 0 or node.unknown >= 0):
            # An entry upb does not insert must not be a row, and is an unknown field.
            flags |= FLAG["map"]
            aux = self._map_spec(fd)
        elif is_closed_enum(fd) and (
            entry.column >= 0
            or node.unknown >= 0
            or node.map_entry
            or fd.containing_oneof is not None
        ):
            # Only where it shows: a value, the unknown fields, a oneof case it would set.
            flags |= FLAG["closed"]
            aux = self._enum_set(fd)
        if is_message(fd) and (entry.child is not None):
            kind = KIND["group"] if fd.type == FieldDescriptor.TYPE_GROUP else KIND["message"]
            wire_type = 3 if fd.type == FieldDescriptor.TYPE_GROUP else 2
            child = entry.child.index
            if entry.child.any_types and fd.type == FieldDescriptor.TYPE_MESSAGE:
                kind, aux = KIND["any"], self._any_spec(entry.child)
        elif is_message(fd):  # raw bytes of a sub-message
            kind, wire_type, child = KIND["bytes"], 2, -1
            if entry.group < 0:  # singular: sent twice, it is merged, not replaced
                flags |= FLAG["merge"]
        else:
            sk = scalar_kind(fd)
            kind, wire_type, child = sk.kind, sk.wire_type, -1
            if is_repeated(fd) and sk.wire_type != 2:
                flags |= FLAG["packable"]
            # proto3 requires valid UTF-8 in strings: a value that is not is a bad record, as
            # upb rejects it. proto2 does not, but a string the plan outputs goes into an Arrow
            # utf8 column, which must be valid: checked too, and a value that is not UTF-8
            # is moved to the message's unknown fields (upb accepts it; docs/types.md).
            as_bytes = entry.column in self.binary_columns - self.text_columns
            if needs_utf8_check(fd) or entry.column in self.string_bytes:
                flags |= FLAG["utf8"]
            elif fd.type == FieldDescriptor.TYPE_STRING and entry.column >= 0 and not as_bytes:
                flags |= FLAG["utf8"]
                # (in a map entry: the whole entry becomes an unknown field of the parent)
                if not self.reject_unvalidated:
                    flags |= FLAG["utf8_or_unknown"]
        return DecodeEntry(
            number=fd.number,
            wire_type=wire_type,
            kind=kind,
            flags=flags,
            column=entry.column,
            child=child,
            group=entry.group,
            clear=clear_at,
            n_clear=n_clear,
            aux=aux,
        )

    def _any_spec(self, node: NodeSpec) -> int:
        names = tuple(node.any_types)
        self.any_specs.append(
            DecodeAnySpec(names=names, nodes=tuple(node.any_types[n].index for n in names))
        )
        return len(self.any_specs) - 1

    def _defaults_on_entry(self, node: NodeSpec) -> list[DecodeDefault]:
        out = list(node.defaults)
        for entry in node.fields.values():
            child = entry.child
            if child is not None and child.implicit and entry.group < 0:
                out.append(DecodeDefault(column=child.presence, value=bytes(16)))
                out.extend(self._defaults_on_entry(child))
        return out

    def _derive_zero_defaults(
        self, node: NodeSpec, defaults: list[DecodeDefault]
    ) -> list[DecodeDefault]:
        """Drop the all-zero defaults from what the decoder fills on entry to `node`.

        Slots start zeroed, so such a column holds its default wherever nothing was read;
        its validity is that of the node's presence (every proto3 implicit-presence field,
        every map value). Saves a store per field per message entered on the hot path; the
        assembler shares the presence bytes instead (validity_from).
        """
        kept = []
        source = self.validity_from.get(node.presence, node.presence)
        for default in defaults:
            if any(default.value):
                kept.append(default)
            else:
                self.validity_from[default.column] = source
        return kept

    def _oneof_clear_lists(self, node: NodeSpec) -> dict[int, list[int]]:
        """For each read oneof member: the columns of the other members, unset when it is read."""
        members: dict[str, list[int]] = {}
        for number, entry in node.fields.items():
            oneof = entry.field.containing_oneof
            if oneof is not None and entry.group < 0:
                members.setdefault(oneof.full_name, []).append(number)
        out: dict[int, list[int]] = {}
        for numbers in members.values():
            if len(numbers) < 2:
                continue
            owned = {n: self._columns_under(node.fields[n]) for n in numbers}
            for n in numbers:
                out[n] = [c for m in numbers if m != n for c in owned[m]]
        return out

    def _columns_under(self, entry: _EntrySpec) -> list[int]:
        cols = [entry.column] if entry.column >= 0 else []
        child = entry.child
        if child is not None and child.presence >= 0:
            cols.append(child.presence)
            if child.unknown >= 0:  # a member that is unset takes its unknown fields along
                cols.append(child.unknown)
            for sub in child.fields.values():
                if sub.group < 0:
                    cols.extend(self._columns_under(sub))
            for declared in child.any_types.values():  # an Any's unpacked value
                cols.append(declared.presence)
                if declared.unknown >= 0:
                    cols.append(declared.unknown)
                for sub in declared.fields.values():
                    if sub.group < 0:
                        cols.extend(self._columns_under(sub))
        return cols
