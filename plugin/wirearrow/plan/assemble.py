"""Decoded buffers -> Arrow columns.

Leaves become arrays over their group's elements without copying the decoder's buffers
(strings too: the decoder writes Arrow's offsets; only a fanned-out string column is
copied, by the take it needs); the fan-out tree becomes one row -> element
index per selection, computed with vectorised integer operations; a column is then its
leaf array taken at those indices (no take at all for a plan without fan-out).
"""

from __future__ import annotations

import functools
import weakref
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from wirearrow import accelerator
from wirearrow._core.buffers import (
    ArrowTree,
    OwnedBuffer,
    copy_entries,
    epoch_outside,
    epoch_values,
    gather_strings,
    pack_bits,
)
from wirearrow._core.decoder import Result
from wirearrow._core.rows import (
    expand,
    gather_rows,
    group_offsets,
    keys_unique,
    list_offsets,
    numbering,
    select_slice,
    take_indices,
)
from wirearrow.errors import quoted
from wirearrow.plan import jsontext
from wirearrow.plan.compiler import CompiledPlan, OutputColumn
from wirearrow.plan.evaluate import Records, evaluate
from wirearrow.plan.leaves import (
    CutLeaf,
    EnumLeaf,
    JsonLeaf,
    JsonRestLeaf,
    Leaf,
    ListLeaf,
    MapLeaf,
    OneofLeaf,
    ScalarLeaf,
    StructLeaf,
    TemporalLeaf,
)
from wirearrow.plan.selections import Operand, PredicateSpec, Selection

__all__ = ["Assembler", "BadRecords"]


class BadRecords(Exception):
    """Records whose bytes decode but that the plan rejects: [(position, reason, path)]."""

    def __init__(self, problems: list[tuple[int, str, str]]) -> None:
        super().__init__(f"{len(problems)} bad records")
        self.problems = problems


_NO_BYTES = memoryview(b"")
_PER_SECOND = {"s": 1, "ms": 1_000, "us": 1_000_000, "ns": 1_000_000_000}


class Assembler:
    """Builds the output columns of one decoded batch."""

    def __init__(self, plan: CompiledPlan, result: Result, data: object) -> None:
        self.plan = plan
        self.facts = _facts(plan)  # (looked up once a batch: its methods all read it)
        self.r = result
        self.data = data
        self.counts: list[int] = list(result.group_counts)
        self.sizes: np.ndarray = result.group_sizes  # the same, as an int64 array
        # Element parents per group, read on first use (a wide plan has thousands of
        # groups, most of them empty in a small batch).
        self._parents: list[np.ndarray | None] = [None] * len(self.counts)
        self._offsets: dict[int, np.ndarray] = {}
        self._list_offsets: dict[int, pa.Buffer] = {}
        self._keep: dict[int, np.ndarray | None] = {}
        self._arrays: dict[int, pa.Array] = {}
        self._bitmaps: dict[int, tuple[pa.Buffer | None, int]] = {}  # by validity source
        self._json_texts: dict[int, pa.Array] = {}  # rendered by problems(), by leaf id
        # Timestamp / Duration values whose nanos the column's unit cannot hold (truncated).
        self.precision_lost = 0
        # The buffer pool's name for this batch's row tables (rows.pyx adds which table):
        # the plan's, so that batch after batch, on its thread, a table gets its block back.
        self.rows_name = id(plan) << 16
        _share_validity(self.facts, result)

    # -- groups -------------------------------------------------------------------------

    def parents(self, group: int) -> np.ndarray:
        """element -> element of the parent group (the root group: record index)."""
        p = self._parents[group]
        if p is None:
            p = self._parents[group] = np.frombuffer(self.r.group_parents[group], dtype=np.int64)
        return p

    def offsets(self, group: int) -> np.ndarray:
        """offsets[p]:offsets[p + 1] are the elements of `group` under parent element p."""
        off = self._offsets.get(group)
        if off is None:
            n_parent = self.counts[self.plan.group_parents[group]]
            off = self._offsets[group] = group_offsets(
                self.parents(group), n_parent, self.rows_name, group
            )
        return off

    def list_offsets(self, group: int) -> pa.Buffer:
        """offsets(group) as the int32 offsets buffer of an Arrow list over the group."""
        buf = self._list_offsets.get(group)
        if buf is None:
            off = self._offsets.get(group)
            if off is not None:  # already built for a selection or a key check
                if off[-1] > np.iinfo(np.int32).max:
                    raise OverflowError("a list column exceeds 2**31 elements in one batch")
                buf = pa.py_buffer(off.astype(np.int32))
            elif self.counts[group] == 0:  # no elements: every list empty
                buf = _zero_offsets(self.counts[self.plan.group_parents[group]] + 1)
            else:
                n_parent = self.counts[self.plan.group_parents[group]]
                buf = pa.py_buffer(list_offsets(self.parents(group), n_parent))
            self._list_offsets[group] = buf
        return buf

    # -- leaves -------------------------------------------------------------------------

    def leaf(self, leaf: Leaf) -> pa.Array:
        arr = self._arrays.get(id(leaf))
        if arr is None:
            arr = self._arrays[id(leaf)] = self._build(leaf)
        return arr

    def _validity(self, column: int, n: int) -> tuple[pa.Buffer | None, int]:
        if column < 0:
            return None, 0
        # Columns sharing one validity (a message's implicit fields) pack it once.
        key = self.plan.validity_from.get(column, column)
        if key < 0:
            return None, 0  # valid in every slot
        packed = self._bitmaps.get(key)
        if packed is None:
            bitmap, nulls = pack_bits(self.r.col_valid[column], n)
            packed = self._bitmaps[key] = (pa.py_buffer(bitmap) if nulls else None), nulls
        return packed

    def _valid_bytes(self, column: int) -> OwnedBuffer | np.ndarray | None:
        """A column's validity bytes as the decoder left them; None: valid in every slot."""
        return None if self.plan.validity_from.get(column, column) < 0 else self.r.col_valid[column]

    def _build(self, leaf: Leaf) -> pa.Array:
        n = self.counts[leaf.group]
        if isinstance(leaf, EnumLeaf):
            return _enum_names(self._scalar(leaf.column, pa.int32(), n), leaf.names)
        if isinstance(leaf, ScalarLeaf):
            return self._scalar(leaf.column, leaf.type, n)
        if isinstance(leaf, StructLeaf):
            children = [self.leaf(child) for _, child in leaf.children]
            validity, nulls = self._validity(leaf.presence, n)
            return pa.Array.from_buffers(leaf.type, n, [validity], nulls, children=children)
        if isinstance(leaf, ListLeaf | MapLeaf):
            validity, nulls = self._validity(leaf.presence, n)
            keep = None
            if isinstance(leaf, ListLeaf):
                child = self.leaf(leaf.element)
            else:
                map_type = leaf.type
                child = pa.StructArray.from_arrays(
                    [self.leaf(leaf.key), self.leaf(leaf.value)],
                    fields=[map_type.key_field, map_type.item_field],
                )
                keep = self._keep.get(leaf.child_group)
            offsets = self.list_offsets(leaf.child_group)
            if keep is not None:
                off = _kept_offsets(keep, np.frombuffer(offsets, dtype=np.int32))
                child = child.filter(pa.array(keep))
                offsets = pa.py_buffer(off.astype(np.int32))
            return pa.Array.from_buffers(leaf.type, n, [validity, offsets], nulls, children=[child])
        if isinstance(leaf, TemporalLeaf):
            return self._temporal(leaf, n)
        if isinstance(leaf, JsonLeaf):
            return self._json(leaf, n)
        if isinstance(leaf, OneofLeaf):
            return self._oneof_case(leaf, n)
        if isinstance(leaf, JsonRestLeaf):
            return self._json_rest(leaf, n)
        raise AssertionError(f"unknown leaf {leaf!r}")

    def _json_rest(self, leaf: JsonRestLeaf, n: int) -> pa.Array:
        """The bytes of each Struct / Value / ListValue whose JSON text cannot say all the
        runtime holds (re-serialized as the runtime does), null where it can: one parse
        and one JSON round trip per value (keep_unknown only)."""
        from google.protobuf.message import DecodeError as ProtobufDecodeError

        cls = jsontext.CLASSES[leaf.message]
        raw = self._scalar(leaf.column, pa.binary(), n)
        if raw.null_count == len(raw):
            return raw
        out: list[bytes | None] = []
        for value in raw.to_pylist():
            if value is None:
                out.append(None)
                continue
            try:
                msg = cls.FromString(value)
                text = jsontext.render(msg)
            except (ProtobufDecodeError, RecursionError, ValueError):
                out.append(None)  # a bad record (the JSON leaf says why)
                continue
            kept = not jsontext.lossless(msg, text)
            out.append(msg.SerializeToString(deterministic=True) if kept else None)
        return pa.array(out, pa.binary())

    def _oneof_case(self, leaf: OneofLeaf, n: int) -> pa.Array:
        """The member set in each element, as an index into the member names; the decoder
        unsets the other members' columns when one comes, so at most one is valid."""
        case = np.full(n, -1, dtype=np.int32)
        for k, column in enumerate(leaf.columns):
            valid = self._valid_bytes(column)
            if valid is None:  # (never: a member has presence) valid everywhere
                case[:] = k
                continue
            case[np.frombuffer(cast(bytes, valid), dtype=np.uint8, count=n) != 0] = k
        none = case < 0
        indices = pa.array(case, type=pa.int32(), mask=none if none.any() else None)
        return pa.DictionaryArray.from_arrays(indices, pa.array(leaf.names, pa.utf8()))

    def _scalar(self, column: int, t: pa.DataType, n: int) -> pa.Array:
        if pa.types.is_string(t) or pa.types.is_binary(t):
            return self._strings(column, t, n, None)
        values = self.r.col_values[column]
        validity, nulls = self._validity(column, n)
        if pa.types.is_boolean(t):
            bits, _ = pack_bits(values, n)
            buffers = [validity, pa.py_buffer(bits)]
        else:
            buffers = [validity, pa.py_buffer(values)]
        return pa.Array.from_buffers(t, n, buffers, nulls)

    def _strings(self, column: int, t: pa.DataType, n: int, indices: np.ndarray | None) -> pa.Array:
        values = self.r.col_values[column]
        valid = self.r.col_valid[column]
        arena = self.r.col_arena[column]
        source = arena if arena is not None else _NO_BYTES
        validity, nulls, offsets, data = gather_strings(source, values, valid, n, indices)
        rows = n if indices is None else len(indices)
        buffers = [  # None: the decoder's offsets and arena as they are
            pa.py_buffer(validity) if validity is not None else None,
            pa.py_buffer(offsets if offsets is not None else values),
            pa.py_buffer(data if data is not None else source),
        ]
        return pa.Array.from_buffers(t, rows, buffers, nulls)

    def _temporal(self, leaf: TemporalLeaf, n: int) -> pa.Array:
        if leaf.kind in ("timestamp", "duration"):
            # problems() has made every record whose rows read an out-of-range value a bad
            # record; values no row reads (times[1] under times[0]) are nulled here.
            seconds, nanos = leaf.columns
            values, bitmap, nulls, lost = epoch_values(
                self.r.col_values[seconds],
                self.r.col_values[nanos],
                self._valid_bytes(seconds),
                self._valid_bytes(nanos),
                n,
                _PER_SECOND[leaf.type.unit],
            )
            self.precision_lost += lost
            validity = pa.py_buffer(bitmap) if bitmap is not None else None
            return pa.Array.from_buffers(leaf.type, n, [validity, pa.py_buffer(values)], nulls)
        parts = [
            self._scalar(c, t, n)
            for c, t in zip(leaf.columns, _component_types(leaf.kind), strict=True)
        ]
        if leaf.kind == "date":
            y, m, d = (p.to_numpy(zero_copy_only=False) for p in parts)
            mask = np.asarray(parts[0].is_null())
            days = _days_from_civil(
                np.nan_to_num(y).astype(np.int64),
                np.nan_to_num(m).astype(np.int64),
                np.nan_to_num(d).astype(np.int64),
            )
            return pa.array(days.astype(np.int32), type=pa.date32(), mask=mask)
        h, mi, s, ns = (p.cast(pa.int64()) for p in parts)
        seconds = pc.add(pc.multiply(pc.add(pc.multiply(h, 60), mi), 60), s)
        if leaf.type.unit == "ns":
            return pc.add(pc.multiply(seconds, 1_000_000_000), ns).cast(leaf.type)
        # Microseconds: the nanoseconds below are truncated, and counted as Timestamps' are.
        micros = pc.divide(ns, 1000)  # (integer division; nanos are 0.. here)
        self.precision_lost += pc.sum(pc.not_equal(pc.multiply(micros, 1000), ns)).as_py() or 0
        return pc.add(pc.multiply(seconds, 1_000_000), micros).cast(leaf.type)

    def _json(self, leaf: JsonLeaf, n: int) -> pa.Array:
        texts = self._json_texts.pop(id(leaf), None)
        if texts is None:  # a leaf problems() did not see (a filter's operand)
            texts, bad = self._render_json(leaf, n)
            if bad:
                raise BadRecords([(r, reason, "") for r, reason in bad])
        return texts

    def _cut_problems(self, leaf: CutLeaf) -> list[tuple[int, str]]:
        """Records whose bytes below the max_depth cut do not parse as the message."""
        from google.protobuf import message_factory
        from google.protobuf.message import DecodeError as ProtobufDecodeError

        pool = self.plan.nodes[0].message.file.pool
        cls = message_factory.GetMessageClass(pool.FindMessageTypeByName(leaf.message))
        bad = []
        raw = self._scalar(leaf.column, pa.binary(), self.counts[leaf.group])
        for element, value in enumerate(raw.to_pylist()):
            if value is not None:
                try:
                    cls.FromString(value)
                except (ProtobufDecodeError, RecursionError):
                    bad.append(element)
        reason = f"malformed {leaf.message} below the max_depth cut"
        return [(r, reason) for r in self.records_of(leaf.group, np.array(bad)).tolist()]

    def _render_json(self, leaf: JsonLeaf, n: int) -> tuple[pa.Array, list[tuple[int, str]]]:
        """The JSON texts of a Struct / Value / ListValue leaf, and the records whose
        bytes do not parse as that message: [(position, reason)]."""
        from google.protobuf.message import DecodeError as ProtobufDecodeError

        cls = jsontext.CLASSES[leaf.message]
        raw = self._scalar(leaf.column, pa.binary(), n)
        out: list[str | None] = []
        bad: list[tuple[int, str]] = []  # (element, reason)
        for element, value in enumerate(raw.to_pylist()):
            if value is None:
                out.append(None)
                continue
            try:
                msg = cls.FromString(value)
            except (ProtobufDecodeError, RecursionError):
                out.append(None)
                bad.append((element, f"malformed {leaf.message}"))
                continue
            try:
                out.append(jsontext.render(msg))  # None: a Value with no kind
            except jsontext.OutsideJson as err:
                out.append(None)
                bad.append((element, str(err)))
        elements = np.array([e for e, _ in bad], dtype=np.int64)
        records = self.records_of(leaf.group, elements).tolist()
        problems = [(r, why) for r, (_, why) in zip(records, bad, strict=True)]
        return pa.array(out, type=pa.utf8()), problems

    # -- filters ------------------------------------------------------------------------

    def _mask(self, p: PredicateSpec, n: int) -> pa.Array:
        if p.op in ("and", "or"):
            a, b = (self._mask(q, n) for q in p.args)  # type: ignore[arg-type]
            return pc.and_kleene(a, b) if p.op == "and" else pc.or_kleene(a, b)
        if p.op == "not":
            return pc.invert(self._mask(p.args[0], n))  # type: ignore[arg-type]
        if p.op == "truthy":
            return _truthy(self._operand(p.args[0], n))  # type: ignore[arg-type]
        fn = {
            "==": pc.equal,
            "!=": pc.not_equal,
            "<": pc.less,
            "<=": pc.less_equal,
            ">": pc.greater,
            ">=": pc.greater_equal,
        }[p.op]
        left, right = p.args
        return fn(*self._comparable(left, right, n))  # type: ignore[arg-type]

    def _comparable(self, left: Operand, right: Operand, n: int) -> tuple:
        """Both operands as Arrow values of one type; literals take the field's type."""
        if left.leaf is None and right.leaf is None:
            return self._operand(left, n), pa.scalar(right.value)
        if left.leaf is not None and right.leaf is not None:
            return self.leaf(left.leaf), self.leaf(right.leaf)
        field_side, literal = (left, right) if right.leaf is None else (right, left)
        arr = self.leaf(field_side.leaf)  # type: ignore[arg-type]
        try:
            scalar = pa.scalar(literal.value, type=arr.type)
        except (pa.ArrowInvalid, OverflowError):
            # The literal lies outside the field's type (-1 vs uint32, 2**64 vs int64):
            # compare as Python numbers would, in a type that holds both.
            wide = pa.float64() if isinstance(literal.value, float) else pa.decimal128(38, 0)
            arr = arr.cast(wide)
            scalar = pa.scalar(literal.value).cast(wide)
        return (arr, scalar) if field_side is left else (scalar, arr)

    def _operand(self, o: Operand, n: int) -> pa.Array:
        if o.leaf is not None:
            return self.leaf(o.leaf)
        return pa.array([o.value] * n) if n else pa.array([], type=pa.array([o.value]).type)

    def mask(self, p: PredicateSpec, n: int) -> np.ndarray:
        m = self._mask(p, n)
        return np.asarray(m.fill_null(False).to_numpy(zero_copy_only=False), dtype=bool)

    # -- selections ---------------------------------------------------------------------

    def _fanout(self, s: Selection) -> tuple[np.ndarray, np.ndarray]:
        """(selected elements, offsets per parent element) of a fan-out selection."""
        off = self.offsets(s.group)
        if s.kind == "all":
            keep = self.map_keep(s.group, s.dedupe) if s.dedupe is not None else None
            if keep is None:
                return numbering(self.counts[s.group], True, self.rows_name, s.index), off
            return np.flatnonzero(keep).astype(np.int64), _kept_offsets(keep, off)
        if s.kind == "filter":
            keep = self.mask(s.predicate, self.counts[s.group])  # type: ignore[arg-type]
            return np.flatnonzero(keep).astype(np.int64), _kept_offsets(keep, off)
        start, stop, step = cast("tuple[int | None, int | None, int | None]", s.arg)
        return select_slice(off, np.arange(len(off) - 1, dtype=np.int64), start, stop, step)

    def _pick(self, s: Selection) -> np.ndarray:
        """Element picked under each parent element (-1: none) of index/key/cond selections."""
        if s.kind == "cond":
            n = self.counts[s.group]
            keep = self.mask(s.predicate, n)  # type: ignore[arg-type]
            return np.where(keep, np.arange(n, dtype=np.int64), -1)
        off = self.offsets(s.group)
        if s.kind == "index":
            lengths = np.diff(off)
            arg = cast(int, s.arg)
            k = arg if arg >= 0 else lengths + arg
            ok = (k >= 0) & (k < lengths)
            return np.where(ok, off[:-1] + np.where(ok, k, 0), -1)
        keep = self.mask(s.predicate, self.counts[s.group])  # type: ignore[arg-type]
        sel = np.flatnonzero(keep)
        per = _kept_offsets(keep, off)
        # key: the last entry with the key wins, as when the runtime parses a map;
        # match: the N-th element the predicate keeps ([0] first, [-1] last)
        arg = -1 if s.kind == "key" else cast(int, s.arg)
        matches = np.diff(per)
        k = arg if arg >= 0 else matches + arg
        ok = (k >= 0) & (k < matches)
        if not len(sel):
            return np.full(len(matches), -1, dtype=np.int64)
        return np.where(ok, sel[np.where(ok, per[:-1] + k, 0)], -1)

    def rows(self, selections: Sequence[Selection]) -> tuple[dict[int, np.ndarray], bool]:
        """Row -> element index of every selection of one fan-out tree (root first); and
        whether any fan-out added rows."""
        root_n = self.counts[0]
        name = self.rows_name
        root: np.ndarray = numbering(root_n, root_n >= _INT32_ROWS, name)
        table: dict[int, np.ndarray] = {selections[0].index: root}
        expanded = False
        for s in selections[1:]:
            e = table[s.parent.index]  # type: ignore[union-attr]
            if not s.fans_out:
                safe = np.maximum(e, 0)
                picked = self._pick(s)
                table[s.index] = np.where(e >= 0, picked[safe] if len(picked) else -1, -1)
                continue
            sel, sel_off = self._fanout(s)
            owner, element = expand(e, sel, sel_off, name, s.index)
            if len(owner) != len(e):
                expanded = True
                for k in table:
                    # The root's table is 0..n-1 until a fan-out: its rows are the owners.
                    same = table[k] is root and owner.dtype == root.dtype
                    table[k] = owner if same else gather_rows(table[k], owner, name, s.index, k)
            table[s.index] = element
        return table, expanded

    # -- record-level checks ------------------------------------------------------------

    def records_of(self, group: int, elements: np.ndarray) -> np.ndarray:
        """Batch positions of the records holding the given elements of `group`."""
        e = np.asarray(elements, dtype=np.int64)
        while group != 0:
            e = self.parents(group)[e]
            group = self.plan.group_parents[group]
        return self.parents(0)[e]

    def problems(
        self, tables: dict[int, tuple[dict[int, np.ndarray], bool]]
    ) -> list[tuple[int, str, str]]:
        """Records the plan rejects though their bytes are valid: (position, reason, path).

        Strict columns whose index or slice falls outside a list, and timestamps or
        durations that do not fit the chosen unit. Each becomes a bad record under the
        transcoder's error policy, like a wire error.
        """
        out: list[tuple[int, str, str]] = []
        facts = self.facts
        for column in facts.strict:
            out.extend(self._strict_problems(column, tables[column.tree][0]))
        checked = facts.checked
        if len(checked) > _SPARSE_GROUPS:
            # A Timestamp / Duration of an empty group has nothing to check: a wide plan's
            # hundreds of them are passed over with numpy.
            groups = facts.checked_groups
            at = np.flatnonzero((groups < 0) | (self.sizes[np.maximum(groups, 0)] > 0)).tolist()
            checked = tuple(checked[k] for k in at)
        for column, leaf in checked:
            if isinstance(leaf, TemporalLeaf):
                # A column's own value: only the elements its rows read (times[0] must
                # not fail on times[1]); inside a struct or list, every element.
                table = tables[column.tree][0]
                rows = table[column.selection.index] if leaf is column.leaf else None
                out.extend(self._range_problems(leaf, column.name, rows))
            elif isinstance(leaf, JsonLeaf):
                texts, bad = self._render_json(leaf, self.counts[leaf.group])
                self._json_texts[id(leaf)] = texts
                out.extend((r, reason, column.name) for r, reason in bad)
            elif isinstance(leaf, CutLeaf):
                out.extend((r, reason, column.name) for r, reason in self._cut_problems(leaf))
        return out

    def _strict_problems(
        self, column: OutputColumn, table: dict[int, np.ndarray]
    ) -> list[tuple[int, str, str]]:
        out = []
        for s in column.selection.ancestors():
            if s.kind not in ("index", "slice"):
                continue
            parents = table[s.parent.index]  # type: ignore[union-attr]
            parents = np.unique(parents[parents >= 0])
            lengths = np.diff(self.offsets(s.group))[parents]
            if s.kind == "index":
                arg = cast(int, s.arg)
                k = arg if arg >= 0 else lengths + arg
                bad = (k < 0) | (k >= lengths)
            else:
                start, stop, _ = cast("tuple[int | None, int | None, int | None]", s.arg)
                bad = np.zeros(len(parents), dtype=bool)
                for bound in (start, stop):
                    if bound is not None:
                        b = bound + lengths if bound < 0 else np.full(len(parents), bound)
                        bad |= (b < 0) | (b > lengths)
            where = np.flatnonzero(bad)
            records = self.records_of(self.plan.group_parents[s.group], parents[where])
            for record, length in zip(records.tolist(), lengths[where].tolist(), strict=True):
                reason = f"strict column {column.name!r}: {s.text} is out of range (list length {length})"
                out.append((record, reason, s.text))
        return out

    def _range_problems(
        self, leaf: TemporalLeaf, name: str, rows: np.ndarray | None
    ) -> list[tuple[int, str, str]]:
        n = self.counts[leaf.group]
        out: list[tuple[int, str, str]] = []
        if n == 0 or (leaf.presence >= 0 and _unwritten(self.r.col_valid[leaf.presence])):
            return out  # no such message in the batch (most of a wide plan's, in a small one)
        if leaf.kind in ("timestamp", "duration"):
            # One pass in Cython without the GIL (numpy's dozen passes held it); the same
            # reasons, in the same order, as _outside_the_type.
            seconds, nanos = leaf.columns
            found = epoch_outside(
                self.r.col_values[seconds],
                self.r.col_values[nanos],
                self._valid_bytes(seconds),
                self._valid_bytes(nanos),
                self.r.col_valid[leaf.presence] if leaf.presence >= 0 else None,
                n,
                _PER_SECOND[leaf.type.unit],
                leaf.kind == "duration",
            )
            for reason, bad in zip(_epoch_reasons(leaf), found, strict=True):
                if rows is not None and len(bad):
                    bad = np.intersect1d(bad, rows[rows >= 0])
                if len(bad):
                    out.extend((r, reason, name) for r in self.records_of(leaf.group, bad).tolist())
            return out
        parts = [
            self._component(c, t, n) for c, t in zip(leaf.columns, _component_types(leaf.kind), strict=True)
        ]
        present = (
            np.frombuffer(self.r.col_valid[leaf.presence], dtype=np.uint8, count=n) != 0
            if leaf.presence >= 0
            else np.ones(n, dtype=bool)
        )
        for reason, outside in _outside_the_type(leaf, parts):
            bad = np.flatnonzero(present & outside)
            if rows is not None and len(bad):
                bad = np.intersect1d(bad, rows[rows >= 0])
            out.extend((r, reason, name) for r in self.records_of(leaf.group, bad).tolist())
        return out

    def _component(self, column: int, t: pa.DataType, n: int) -> np.ndarray:
        """One component of a well-known type, its default (0) where it did not come."""
        values = np.frombuffer(self.r.col_values[column], dtype=t.to_pandas_dtype(), count=n)
        valid = np.frombuffer(self.r.col_valid[column], dtype=np.uint8, count=n)
        return np.where(valid != 0, values, 0).astype(np.int64)

    # -- maps -------------------------------------------------------------------------

    def map_keep(self, group: int, key: Leaf) -> np.ndarray | None:
        """Entries to keep so that a key seen again replaces the earlier entry; None = all."""
        if group in self._keep:
            return self._keep[group]
        n = self.counts[group]
        keep = None
        if n > 1 and not self._keys_unique(group, key):
            t = pa.table({"p": self.parents(group), "k": self.leaf(key), "i": np.arange(n)})
            last = t.group_by(["p", "k"], use_threads=False).aggregate([("i", "max")])
            if last.num_rows != n:
                keep = np.zeros(n, dtype=bool)
                keep[last.column("i_max").to_numpy()] = True
        self._keep[group] = keep
        return keep

    def _keys_unique(self, group: int, key: Leaf) -> bool:
        """Quick check that no map repeats a key (the usual case); False = not known."""
        if type(key) is not ScalarLeaf or self.r.col_values[key.column] is None:
            return False
        n = self.counts[group]
        values = self.r.col_values[key.column]
        strings = pa.types.is_string(key.type) or pa.types.is_binary(key.type)
        arena = self.r.col_arena[key.column] if strings else None
        # The map's list offsets are built anyway; int64 ones only if a selection has them.
        off = self._offsets.get(group)
        if off is None:
            off = np.frombuffer(self.list_offsets(group), dtype=np.int32)
        return keys_unique(
            off,
            values,
            0 if strings else len(values) // n,
            arena if arena is not None else _NO_BYTES,
            strings,
        )

    # -- columns ------------------------------------------------------------------------

    def columns(self, *, row_records: bool = False) -> tuple[list[pa.Array], int, np.ndarray | None]:
        """The output columns, the row count and, with ``row_records``, each row's record
        (its position in the batch's records); raises BadRecords before building anything."""
        # Every tree, also an aggregate's whose argument reads no path (sum(1)): its rows are
        # then the records themselves.
        tables = {tree: self.rows(selections) for tree, selections in self.plan.trees.items()}
        table, expanded = tables[0]
        problems = self.problems(tables)
        if problems:
            raise BadRecords(problems)
        n_rows = len(table[0])
        facts = self.facts
        # The root group's elements are the decoded records; parents are dropped below.
        positions = self.parents(0)[table[0]] if row_records else None
        # a record's place in the batch, for the errors of expressions
        batch_positions = self.parents(0) if facts.outputs is None else None
        # Peak memory: drop each decoder buffer and row table as soon as the last column that
        # reads it is built (an output that is the buffer itself keeps it alive): which
        # those are after each column is a fact of the plan (facts.drops, facts.pops).
        self._drop_parents()
        out: list[pa.Array | None] = [None] * len(self.plan.columns)
        # Whole columns of the records (no fan-out to take rows from) in one call each tree.
        whole: dict[int, pa.Array] = {}
        for tree, program in facts.trees.items():
            if not tables[tree][1]:
                whole.update(self._whole_columns(program))
        # A fan-out's scalar columns: gathered at their row tables in one call a tree (when
        # it adds no rows, those of its columns that pick an element: imp[0].id).
        for tree, gather in facts.gathers.items():
            rows, fanned = tables[tree]
            if fanned:
                whole.update(self._gathered(gather, rows))
            elif tree in facts.picks:
                whole.update(self._gathered(facts.picks[tree], rows))
        if len(whole) == len(out):
            # Every column built already (whole records): nothing left to free memory for.
            for i in facts.order:
                out[i] = whole[i]
        else:
            values, valid, arena = self.r.col_values, self.r.col_valid, self.r.col_arena
            for i, drops, pop in zip(facts.order, facts.drops, facts.pops, strict=True):
                column = self.plan.columns[i]
                rows, fanned = tables[column.tree]
                done = whole.pop(i, None)
                out[i] = done if done is not None else self._column(column, rows, fanned)
                if pop:
                    rows.pop(column.selection.index, None)  # (or gone with a gather)
                for c in drops:
                    values[c] = None
                    valid[c] = None
                    arena[c] = None
                self._arrays.clear()
        built: list[pa.Array] = out
        if facts.outputs is not None:  # no expression: the output columns as built
            return [built[i] for i in facts.outputs], n_rows, positions
        assert batch_positions is not None
        records = Records(
            table[0], expanded, {t: tab[t] for t, (tab, _) in tables.items()}, self.counts[0]
        )
        result = []
        failed: list[tuple[int, str, str]] = []
        for name, ref in self.plan.outputs:
            if isinstance(ref, int):
                result.append(built[ref])
                continue
            values, failures = evaluate(ref, built, n_rows, records)
            result.append(values)
            for elements, reason in failures:  # a value not computed fails its record
                why = f"column {quoted(name)}: {reason}"
                failed.extend((p, why, name) for p in batch_positions[elements].tolist())
        if failed:
            raise BadRecords(failed)
        return result, n_rows, positions

    def _drop_parents(self) -> None:
        """Element parents are only needed for offsets (and error messages) from here on.
        An empty group needs none: its lists' offsets are zeros (ArrowTree.build's own)."""
        facts = self.facts
        counts = self.counts
        map_keys = facts.map_keys
        if len(map_keys) > _SPARSE_GROUPS:  # (the maps of more than one entry, with numpy)
            map_keys = tuple(map_keys[k] for k in np.flatnonzero(self.sizes[facts.map_groups] > 1))
        for group, key in map_keys:
            if counts[group] > 1:
                self.map_keep(group, key)
        if len(facts.child_groups) <= _SPARSE_GROUPS:
            held = [g for g in facts.child_groups if counts[g]]
        else:
            picked = np.flatnonzero(self.sizes[facts.child_groups_array])
            held = facts.child_groups_array[picked].tolist()
        for g in held:
            self.list_offsets(g)
        # The selections' offsets too (read by rows() and problems() only, both done): an
        # int64 a parent element, held to the end of the call they lifted its peak (flat-4:
        # the record group's 400 KB beside its largest column's gather; benchmarks/README.md,
        # "Threads"); back in the pool, that gather's buffers take their block.
        self._offsets.clear()
        self._parents = []
        self.r.group_parents[:] = [None] * len(self.r.group_parents)  # the decoder's buffers:
        # freed here, not at the end

    def _given(
        self, program: _TreeProgram, state: np.ndarray | None = None
    ) -> dict[int, pa.Array] | None:
        """The nodes of `program` built in Python (node -> array: enums, temporal, JSON ...,
        a map whose batch repeats a key); None when one is not of the type the tree
        declares, for its columns to be built apart. `state` (ArrowTree.absent's): only the
        nodes a batch builds (none inside an absent subtree)."""
        if state is None:
            given = {node: self.leaf(leaf) for node, leaf in program.given}
        else:  # (only those the batch builds: a wide plan's given nodes are mostly absent)
            leaves = program.given_leaves
            picked = program.given_nodes[state[program.given_nodes] == 1].tolist()
            given = {node: self.leaf(leaves[node]) for node in picked}
        for node, leaf in self._deduplicated(program):
            if state is None or state[node]:
                given[node] = self.leaf(leaf)  # repeated keys: deduplicated
        for node, arr in given.items():
            if arr.type != program.types[node]:
                return None
        return given

    def _deduplicated(self, program: _TreeProgram) -> list[tuple[int, MapLeaf]]:
        """The map nodes of `program` whose batch repeats a key (map_keep found some)."""
        maps = program.maps_by_group
        return [
            found
            for group, keep in self._keep.items()
            if keep is not None
            for found in maps.get(group, ())
        ]

    def _whole_columns(self, program: _TreeProgram) -> dict[int, pa.Array]:
        """The columns of `program` (column index -> array), their arrays over the
        decoder's buffers built in one call (buffers.ArrowTree) instead of one Python call
        per array: that Python runs with the GIL held, while other threads' batches wait."""
        if len(program.rows) >= _SPARSE_PLAN:
            deduplicated = [node for node, _ in self._deduplicated(program)]
            leaves = program.given_list + deduplicated if deduplicated else program.given_list
            if program.take is not None and accelerator.module is not None:
                state = program.tree.absent(
                    self.sizes, self.r.col_valid, leaves, _ABSENT_NODES_ACCELERATED, state_only=True
                )
                if state is not None:
                    return self._taken_columns(program, state)
            else:
                parts = program.tree.absent(self.sizes, self.r.col_valid, leaves, _ABSENT_NODES)
                if parts is not None:
                    return self._sparse_columns(program, *parts)
        given = self._given(program)
        if given is None:
            return {}
        arrays = program.tree.build(
            self.r.col_values, self.r.col_valid, self.r.col_arena, self.counts,
            self._list_offsets, given,
        )
        return dict(zip(program.columns, arrays, strict=True))

    def _sparse_columns(
        self, program: _TreeProgram, mixed: np.ndarray, full: np.ndarray, absent: np.ndarray,
        state: np.ndarray,
    ) -> dict[int, pa.Array]:
        """_whole_columns of a batch in which some large subtrees are absent (no elements,
        or null in every slot: most of a wide recursive plan in a small batch). Those are
        arrays made once per plan; the subtrees with none absent are built by the tree as
        columns of their own, one call per length; the nodes above an absent one are put
        together from their children's arrays, one pyarrow call each. The cost follows the
        nodes the batch holds, not the plan's (with the accelerator: _taken_columns)."""
        given = self._given(program, state)
        if given is None:
            return {}
        counts = self.counts
        rows = program.rows
        arrays: dict[int, pa.Array] = {}
        by_length: dict[int, list[int]] = {}
        for node in full.tolist():
            by_length.setdefault(counts[rows[node][4]], []).append(node)
        for nodes in by_length.values():
            built = program.tree.build(
                self.r.col_values, self.r.col_valid, self.r.col_arena, counts,
                self._list_offsets, given, roots=np.array(nodes, dtype=np.int64),
                schema=pa.schema([program.fields[n] for n in nodes]),
            )  # fmt: skip
            arrays.update(zip(nodes, built, strict=True))
        cache = program.absent
        for node in absent.tolist():
            n = counts[rows[node][4]]
            arr = cache.get((node, n))
            if arr is None:
                arr = pa.nulls(n, program.types[node])
                if n <= _CACHED_NULLS:  # (an empty or short all-null array, kept)
                    cache[(node, n)] = arr
            arrays[node] = arr
        for node in mixed.tolist():
            kind, _, valid, _, group, offsets_group = rows[node][:6]
            n = counts[group]
            validity, nulls = self._validity(valid, n)
            offsets = self.list_offsets(offsets_group) if kind == _T_LIST else None
            children = [arrays[k] for k in program.children[node]]
            buffers = [validity] if offsets is None else [validity, offsets]
            arrays[node] = pa.Array.from_buffers(
                program.types[node], n, buffers, nulls, children=children
            )
        return {i: arrays[node] for i, node in zip(program.columns, program.roots, strict=True)}

    def _taken_columns(self, program: _TreeProgram, state: np.ndarray) -> dict[int, pa.Array]:
        """_sparse_columns with the accelerator: the whole tree in one build, its absent
        nodes (every node null in every slot) left empty for the accelerator to put its
        cached arrays of nulls in, the rest taken as Arrow ArrayData (TreeArrays): no
        import through the C data interface, no node put together in Python, no Python
        array but the columns'."""
        given = self._given(program, state)
        if given is None:
            return {}
        taken = program.tree.build(
            self.r.col_values, self.r.col_valid, self.r.col_arena, self.counts,
            self._list_offsets, given, absent=state, into=program.take,
        )  # fmt: skip
        return dict(zip(program.columns, taken, strict=True))

    def _gathered(self, gather: _GatherProgram, table: dict[int, np.ndarray]) -> dict[int, pa.Array]:
        """The scalar columns of an expanded fan-out tree (column index -> array), each its
        leaf taken at its row table, all in one call (buffers.ArrowTree with rows=) instead
        of a Python take per column, which held the GIL while other threads' batches wait."""
        program = gather.program
        given = self._given(program)  # Timestamps and durations, gathered by build
        if given is None:
            return {}
        rows = [
            np.ascontiguousarray(table[self.plan.columns[i].selection.index])
            for i in program.columns
        ]
        for selection in gather.tables:  # read by these columns only: build lets them go
            table.pop(selection)
        arrays = program.tree.build(
            self.r.col_values, self.r.col_valid, self.r.col_arena, self.counts,
            self._list_offsets, given, rows=rows, drops=gather.drops,
        )
        return dict(zip(program.columns, arrays, strict=True))

    def _column(
        self, column: OutputColumn, table: dict[int, np.ndarray], expanded: bool
    ) -> pa.Array:
        s = column.selection
        leaf = column.leaf
        if s.parent is None and not expanded:
            return self.leaf(leaf)
        idx = np.ascontiguousarray(table[s.index])
        n = self.counts[leaf.group]
        how = take_indices(idx, n)
        if how is None:
            return self.leaf(leaf)  # one row per element, in order: no take needed
        if isinstance(leaf, ScalarLeaf) and (
            pa.types.is_string(leaf.type) or pa.types.is_binary(leaf.type)
        ):
            return self._strings(leaf.column, leaf.type, n, idx)
        bitmap, nulls = how
        # The row table itself as the take's indices (rows without an element are null).
        indices = pa.Array.from_buffers(
            pa.int32() if idx.dtype == np.int32 else pa.int64(),
            len(idx),
            [pa.py_buffer(bitmap) if bitmap is not None else None, pa.py_buffer(idx)],
            nulls,
        )
        return self.leaf(leaf).take(indices)


@dataclass(frozen=True)
class _Facts:
    """What assembly needs to know of a plan's columns, found once per plan rather than
    walked again for every batch (Python run per batch holds the GIL: other threads'
    batches wait for it)."""

    # Deepest fan-outs first: their buffers are freed before the broadcast columns (one
    # value per record copied onto every row, the largest outputs) are materialised.
    order: tuple[int, ...]
    # By position in `order`: the decoder columns that column is the last reader of, and
    # whether it is the last reader of its (non-root) row table.
    drops: tuple[tuple[int, ...], ...]
    pops: tuple[bool, ...]
    map_keys: tuple[tuple[int, Leaf], ...]  # (entry group, key leaf) of every map read
    map_groups: np.ndarray  # their entry groups (int64)
    child_groups: tuple[int, ...]  # groups under a list or map read
    child_groups_array: np.ndarray  # the same, as an int64 array (to pick the non-empty)
    # (column, source) of plan.validity_from with a source, and the columns valid always
    shared_validity: tuple[tuple[int, int], ...]
    always_valid: tuple[int, ...]
    shared_groups: np.ndarray  # the group of each shared_validity column (int64)
    shared_columns: np.ndarray  # shared_validity's (column, source) as two int64 arrays
    shared_sources: np.ndarray
    always_groups: np.ndarray  # the group of each always_valid column
    strict: tuple[OutputColumn, ...]
    # (column, leaf) whose values can reject a record: well-known temporal types (range,
    # values outside the type), Struct / Value JSON, validated max_depth cuts.
    checked: tuple[tuple[OutputColumn, Leaf], ...]
    checked_groups: np.ndarray  # by checked: a TemporalLeaf's group, -1 for the others
    # tree -> its columns that read whole records (no fan-out), built as one tree of arrays
    trees: dict[int, _TreeProgram]
    # tree -> its scalar columns, gathered at their row tables when the tree fans out
    gathers: dict[int, _GatherProgram]
    # tree -> its scalar columns under a selection, gathered when it adds no rows (imp[0])
    picks: dict[int, _GatherProgram]
    # the plan's outputs as built columns' indexes; None: an expression computes one
    outputs: tuple[int, ...] | None

    @staticmethod
    def of(plan: CompiledPlan) -> _Facts:
        columns = plan.columns
        shared = tuple((c, s) for c, s in plan.validity_from.items() if s >= 0)
        leaves = [x for col in columns for x in _walk(col.leaf)]
        map_keys = tuple((x.child_group, x.key) for x in leaves if isinstance(x, MapLeaf))
        checked = tuple(
            (col, x)
            for col in columns
            for x in _walk(col.leaf)
            if isinstance(x, TemporalLeaf | JsonLeaf) or (isinstance(x, CutLeaf) and x.validate)
        )
        always = tuple(c for c, s in plan.validity_from.items() if s < 0)
        order = tuple(
            sorted(range(len(columns)), key=lambda i: -len(columns[i].selection.ancestors()))
        )
        storage_uses = Counter(c for col in columns for c in _storage(col.leaf))
        table_uses = Counter((col.tree, col.selection.index) for col in columns)
        drops: list[tuple[int, ...]] = []
        pops: list[bool] = []
        for i in order:
            col = columns[i]
            use = (col.tree, col.selection.index)
            table_uses[use] -= 1
            pops.append(table_uses[use] == 0 and col.selection.parent is not None)
            last = []
            for c in _storage(col.leaf):
                storage_uses[c] -= 1
                if storage_uses[c] == 0:
                    last.append(c)
            drops.append(tuple(last))
        return _Facts(
            order=order,
            drops=tuple(drops),
            pops=tuple(pops),
            map_keys=map_keys,
            map_groups=np.array([g for g, _ in map_keys], dtype=np.int64),
            child_groups=tuple(g for col in columns for g in _child_groups(col.leaf)),
            child_groups_array=np.array(
                [g for col in columns for g in _child_groups(col.leaf)], dtype=np.int64
            ),
            shared_validity=shared,
            always_valid=always,
            shared_groups=np.array(
                [plan.column_groups[c] for c, _ in shared], dtype=np.int64
            ),
            shared_columns=np.array([c for c, _ in shared], dtype=np.int64),
            shared_sources=np.array([s for _, s in shared], dtype=np.int64),
            always_groups=np.array([plan.column_groups[c] for c in always], dtype=np.int64),
            strict=tuple(col for col in columns if col.strict),
            checked=checked,
            checked_groups=np.array(
                [x.group if isinstance(x, TemporalLeaf) else -1 for _, x in checked], dtype=np.int64
            ),
            trees=_tree_programs(plan),
            gathers=_gather_programs(plan, order),
            picks=_gather_programs(plan, order, picked=True),
            outputs=(
                tuple(ref for _, ref in plan.outputs)  # type: ignore[misc]
                if all(isinstance(ref, int) for _, ref in plan.outputs)
                else None
            ),
        )


_FACTS: weakref.WeakKeyDictionary[CompiledPlan, _Facts] = weakref.WeakKeyDictionary()

# Node kinds of buffers.ArrowTree (its T_* enum) and the fields of a node's row (P_*).
_T_FIXED, _T_BOOL, _T_BINARY, _T_STRUCT, _T_LIST, _T_ENTRIES, _T_GIVEN = range(7)
_NODE_FIELDS = 9
# A subtree of at least this many nodes absent from a batch is one array made once per plan
# (a pyarrow call costs about what importing ~10 nodes does); one at most this long is kept.
_ABSENT_NODES = 16
# With the accelerator an absent node costs a lookup in its cache of arrays of nulls, less
# than building any node: every node null in every slot is absent, scalars included.
_ABSENT_NODES_ACCELERATED = 1
_CACHED_NULLS = 16
# Plans of fewer nodes are built whole (looking for absent subtrees would cost more than it
# saves: an OpenRTB message has ~80 nodes, the wide recursive shape 18,560).
_SPARSE_PLAN = 1024
_SPARSE_GROUPS = 64  # (list groups: beyond, the non-empty ones are found with numpy)


@dataclass(frozen=True)
class _TreeProgram:
    """The whole-record columns of one fan-out tree as an ArrowTree program."""

    tree: ArrowTree
    columns: tuple[int, ...]  # output column of each root
    types: tuple[pa.DataType, ...]  # by node
    given: tuple[tuple[int, Leaf], ...]  # nodes built in Python (enums, temporal, JSON ...)
    maps: tuple[tuple[int, MapLeaf], ...]  # built in Python when a batch repeats a key
    maps_by_group: dict[int, tuple[tuple[int, MapLeaf], ...]]  # the same by entry group
    given_nodes: np.ndarray  # the nodes of `given` (int64), given_list as a list
    given_list: list[int]
    given_leaves: dict[int, Leaf]  # node -> leaf of `given`
    roots: tuple[int, ...]  # the node of each column
    # By node, for a batch in which some of them are absent (see _sparse_columns):
    rows: tuple[tuple[int, ...], ...]  # its ArrowTree row (_T_* kind, column, valid, ...)
    children: tuple[tuple[int, ...], ...]
    fields: tuple[pa.Field, ...]  # a node built as a column of its own: its field
    # Arrays made once per plan: an absent node's, empty (node) or all null (node, length)
    absent: dict[tuple[int, int], pa.Array]
    # With the accelerator: the tree's columns taken as Arrow ArrayData (ArrowTree.build's
    # into=), absent nodes' arrays of nulls kept in C++ per type and length; None without.
    take: object = None


def _tree_programs(plan: CompiledPlan) -> dict[int, _TreeProgram]:
    by_tree: dict[int, list[int]] = {}
    for i, col in enumerate(plan.columns):
        if col.selection.parent is None and col.leaf.group == 0:
            by_tree.setdefault(col.tree, []).append(i)
    return {tree: _tree_program(plan, columns) for tree, columns in by_tree.items()}


@dataclass(frozen=True)
class _GatherProgram:
    """The scalar columns of one fan-out tree, as an ArrowTree program of scalar roots
    each built at its row table (ArrowTree.build's rows=), in the order of _Facts.order."""

    program: _TreeProgram
    drops: tuple[tuple[int, ...], ...]  # by root: decoder columns it is the last reader of
    # Row tables (selection index) only these columns read: freed by build as it goes
    # (a fan-out's table is gone before the broadcast columns are built).
    tables: tuple[int, ...]


def _gathers_scalar(leaf: Leaf) -> bool:
    """A leaf ArrowTree can gather at a row table: a plain fixed, bool or binary value, or
    a Timestamp / Duration (its epoch values, built in Python, gathered as a fixed one)."""
    t = leaf.type
    if isinstance(leaf, TemporalLeaf):
        return leaf.kind in ("timestamp", "duration")
    return type(leaf) in (ScalarLeaf, CutLeaf) and (
        pa.types.is_string(t) or pa.types.is_binary(t) or pa.types.is_boolean(t)
        or pa.types.is_integer(t) or pa.types.is_floating(t)
    )


def _gather_programs(
    plan: CompiledPlan, order: tuple[int, ...], *, picked: bool = False
) -> dict[int, _GatherProgram]:
    """Per tree, its scalar columns as one gather; `picked`: only those under a selection
    (imp[0].id, a tree that adds no rows: its record-level columns are whole columns)."""
    by_tree: dict[int, list[int]] = {}
    for i in order:
        column = plan.columns[i]
        if _gathers_scalar(column.leaf) and (not picked or column.selection.parent is not None):
            by_tree.setdefault(column.tree, []).append(i)
    # A decoder column is dropped after the root that reads it last, when no column built
    # elsewhere (another tree, a struct, an expression's input ...) reads it too.
    readers = Counter(c for col in plan.columns for c in _storage(col.leaf))
    out = {}
    for tree, columns in by_tree.items():
        seen: Counter[int] = Counter()
        drops = []
        for i in columns:
            last = []
            for c in _storage(plan.columns[i].leaf):
                seen[c] += 1
                if seen[c] == readers[c]:
                    last.append(c)
            drops.append(tuple(last))
        mine = Counter(plan.columns[i].selection.index for i in columns)
        every = Counter(col.selection.index for col in plan.columns if col.tree == tree)
        parents = {s.index: s.parent for s in plan.trees[tree]}
        tables = tuple(s for s, n in mine.items() if n == every[s] and parents[s] is not None)
        out[tree] = _GatherProgram(_tree_program(plan, columns), tuple(drops), tables)
    return out


def _tree_program(plan: CompiledPlan, columns: list[int]) -> _TreeProgram:
    rows: list[list[int]] = []
    kids: list[int] = []
    types: list[pa.DataType] = []
    given: list[tuple[int, Leaf]] = []
    maps: list[tuple[int, MapLeaf]] = []

    def validity(column: int) -> tuple[int, int]:
        """(column whose validity bytes to pack, what it is shared under), as _validity."""
        key = plan.validity_from.get(column, column) if column >= 0 else -1
        return (column, key) if key >= 0 else (-1, -1)

    def node(kind: int, t: pa.DataType, group: int, column: int = -1, valid: int = -1,
             offsets: int = -1, children: Sequence[int] = (), width: int = 0) -> int:
        v, k = validity(valid)
        rows.append([kind, column, v, k, group, offsets, len(kids), len(children), width])
        kids.extend(children)
        types.append(t)
        return len(rows) - 1

    def add(leaf: Leaf) -> int:
        t = leaf.type
        if type(leaf) in (ScalarLeaf, CutLeaf):
            c = cast(ScalarLeaf, leaf).column
            if pa.types.is_string(t) or pa.types.is_binary(t):
                return node(_T_BINARY, t, leaf.group, c, c)
            if pa.types.is_boolean(t):
                return node(_T_BOOL, t, leaf.group, c, c)
            if pa.types.is_integer(t) or pa.types.is_floating(t):
                return node(_T_FIXED, t, leaf.group, c, c, width=t.bit_width // 8)
        elif isinstance(leaf, StructLeaf) and pa.types.is_struct(t):
            children = [add(child) for _, child in leaf.children]
            return node(_T_STRUCT, t, leaf.group, valid=leaf.presence, children=children)
        elif isinstance(leaf, ListLeaf) and pa.types.is_list(t):
            child = add(leaf.element)
            return node(_T_LIST, t, leaf.group, valid=leaf.presence,
                        offsets=leaf.child_group, children=[child])
        elif isinstance(leaf, MapLeaf) and pa.types.is_map(t):
            key, value = add(leaf.key), add(leaf.value)
            entries = node(_T_ENTRIES, pa.struct([t.key_field, t.item_field]),
                           leaf.child_group, children=[key, value])
            at = node(_T_LIST, t, leaf.group, valid=leaf.presence,
                      offsets=leaf.child_group, children=[entries])
            maps.append((at, leaf))
            return at
        given.append((len(rows), leaf))
        return node(_T_GIVEN, t, leaf.group)

    roots = [add(plan.columns[i].leaf) for i in columns]
    schema = pa.schema([pa.field(str(i), plan.columns[i].leaf.type) for i in columns])
    tree = ArrowTree(
        np.array(rows, dtype=np.int64).reshape(-1, _NODE_FIELDS),
        np.array(kids, dtype=np.int64),
        np.array(roots, dtype=np.int64),
        schema,
        pa.RecordBatch._import_from_c,
    )
    children = tuple(tuple(kids[r[6] : r[6] + r[7]]) for r in rows)
    fields = tuple(pa.field(f"n{i}", t) for i, t in enumerate(types))
    by_group: dict[int, list[tuple[int, MapLeaf]]] = {}
    for at, leaf in maps:
        by_group.setdefault(leaf.child_group, []).append((at, leaf))
    given_list = [node for node, _ in given]
    return _TreeProgram(
        tree, tuple(columns), tuple(types), tuple(given), tuple(maps),
        {g: tuple(found) for g, found in by_group.items()},
        np.array(given_list, dtype=np.int64), given_list, dict(given), tuple(roots),
        tuple(map(tuple, rows)), children, fields, {},
        accelerator.module.TreeArrays(schema, _CACHED_NULLS) if accelerator.module is not None else None,
    )  # fmt: skip


def _facts(plan: CompiledPlan) -> _Facts:
    facts = _FACTS.get(plan)
    if facts is None:
        facts = _FACTS[plan] = _Facts.of(plan)  # two threads may both build it: same value
    return facts


def _share_validity(facts: _Facts, result: Result) -> None:
    """Give every derived column the validity bytes of its source (plan.validity_from):
    the decoder does not mark an implicit-presence field whose value is absent (its slot
    already holds the zero default), so it is valid wherever its message is. A column of
    an empty group has no slot to mark: a wide plan's thousands of those are left alone
    (found with numpy), so that the Python run follows the groups the batch holds."""
    valid = result.col_valid
    counts = result.col_counts
    shared, always = facts.shared_validity, facts.always_valid
    if len(shared) + len(always) > _SPARSE_GROUPS:
        held = result.group_sizes
        shared_at = np.flatnonzero(held[facts.shared_groups])
        always_at = np.flatnonzero(held[facts.always_groups]).tolist()
        # (in C: a wide plan's one record shares ~2,700 columns' validity)
        copy_entries(valid, facts.shared_columns[shared_at], facts.shared_sources[shared_at])
        for k in always_at:
            column = always[k]
            valid[column] = _all_valid(counts[column])
        return
    for column, source in shared:
        valid[column] = valid[source]
    for column in always:
        valid[column] = _all_valid(counts[column])


_ALL_VALID = np.ones(0, dtype=np.uint8)


def _all_valid(n: int) -> np.ndarray:
    """n validity bytes of 1, read-only: views of one array, grown when a batch needs more
    (filled once instead of per batch and column, which held the GIL in every batch)."""
    global _ALL_VALID
    ones = _ALL_VALID
    if len(ones) < n:
        ones = np.ones(max(n, 2 * len(ones)), dtype=np.uint8)
        ones.flags.writeable = False
        _ALL_VALID = ones  # a racing thread's array is as good: both hold only ones
    return ones[:n]


def _unwritten(buffer: object) -> bool:
    """A decoder column no record of the batch wrote to: zeros (OwnedBuffer.unwritten)."""
    return type(buffer) is OwnedBuffer and buffer.unwritten


_ZERO_OFFSETS = pa.py_buffer(np.zeros(0, dtype=np.int32))


def _zero_offsets(n: int) -> pa.Buffer:
    """n int32 zeros (the offsets of lists that are all empty), slices of one buffer."""
    global _ZERO_OFFSETS
    zeros = _ZERO_OFFSETS
    if zeros.size < 4 * n:
        zeros = _ZERO_OFFSETS = pa.py_buffer(np.zeros(max(n, 2 * zeros.size // 4), np.int32))
    return zeros.slice(0, 4 * n)


def _enum_names(numbers: pa.Array, names: tuple[tuple[int, str], ...]) -> pa.DictionaryArray:
    """Enum numbers as a dictionary of value names; an undeclared number keeps its digits."""
    declared: dict[int, str] = {}
    for number, name in names:
        declared.setdefault(number, name)  # aliases: the first name wins
    values = numbers.to_numpy(zero_copy_only=False)
    valid = ~np.asarray(numbers.is_null()) if numbers.null_count else None
    seen = np.unique(values if valid is None else values[valid]).astype(np.int64)
    extra = [int(v) for v in seen if int(v) not in declared]
    known = np.array([*declared, *extra], dtype=np.int64)
    words = [*declared.values(), *(str(v) for v in extra)]
    order = np.argsort(known, kind="stable")
    filled = np.where(valid, values, known[0] if len(known) else 0) if valid is not None else values
    index = (
        order[np.searchsorted(known[order], filled)]
        if len(known)
        else np.zeros(len(values), np.int64)
    )
    indices = pa.array(index.astype(np.int32), mask=None if valid is None else ~valid)
    return pa.DictionaryArray.from_arrays(indices, pa.array(words, pa.utf8()))


def _kept_offsets(keep: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Per-parent offsets into the kept elements, from per-parent offsets into all of them."""
    kept_before = np.zeros(len(keep) + 1, dtype=np.int64)
    np.cumsum(keep, out=kept_before[1:])
    return kept_before[offsets]


# From this many rows on, a row table is int64 (below, int32: half the memory).
_INT32_ROWS = 2**31 - 1


# Leaves are immutable and compared by identity: what these find is kept (a whole-message
# plan has ~170 leaves, walked for every batch otherwise).
_LEAF_FACTS = 16384


def _walk(leaf: Leaf) -> tuple[Leaf, ...]:
    if isinstance(leaf, StructLeaf):
        return (leaf, *(x for _, child in leaf.children for x in _walk(child)))
    if isinstance(leaf, ListLeaf):
        return (leaf, *_walk(leaf.element))
    if isinstance(leaf, MapLeaf):
        return (leaf, *_walk(leaf.key), *_walk(leaf.value))
    return (leaf,)


@functools.lru_cache(maxsize=_LEAF_FACTS)
def _child_groups(leaf: Leaf) -> tuple[int, ...]:
    return tuple(x.child_group for x in _walk(leaf) if isinstance(x, ListLeaf | MapLeaf))


@functools.lru_cache(maxsize=_LEAF_FACTS)
def _storage(leaf: Leaf) -> tuple[int, ...]:
    """Decoder columns a leaf reads."""
    if isinstance(leaf, ScalarLeaf | JsonLeaf | JsonRestLeaf):
        return (leaf.column,)
    if isinstance(leaf, TemporalLeaf):
        return (*leaf.columns, *((leaf.presence,) if leaf.presence >= 0 else ()))
    if isinstance(leaf, OneofLeaf):
        return leaf.columns
    presence = getattr(leaf, "presence", -1)
    own = (presence,) if presence >= 0 else ()
    if isinstance(leaf, StructLeaf):
        return own + tuple(c for _, child in leaf.children for c in _storage(child))
    if isinstance(leaf, ListLeaf):
        return own + _storage(leaf.element)
    if isinstance(leaf, MapLeaf):
        return own + _storage(leaf.key) + _storage(leaf.value)
    return own


def _epoch_reasons(leaf: TemporalLeaf) -> tuple[str, str]:
    """Why a Timestamp / Duration is a bad record: (seconds out of the unit's range, nanos)."""
    if leaf.kind == "timestamp":
        nanos = "google.protobuf.Timestamp nanos outside 0..999,999,999"
    else:
        nanos = (
            "google.protobuf.Duration nanos outside -999,999,999..999,999,999 or of another "
            "sign than seconds"
        )
    return f"{leaf.kind} out of range for unit {leaf.type.unit!r}", nanos


def _outside_the_type(
    leaf: TemporalLeaf, parts: list[np.ndarray]
) -> list[tuple[str, np.ndarray]]:
    """(reason, mask) for each way a value cannot be its Arrow type without changing it.

    A Date or a TimeOfDay that is not a whole calendar date or a time of day has no
    date32 / time64 value that encode could write back as it came (docs/types.md); a
    Timestamp or Duration the protobuf runtime's JSON mapping refuses is found by
    buffers.epoch_outside (reasons: _epoch_reasons). Each is a bad record.
    """
    kind = leaf.kind
    if kind == "date":
        y, m, d = parts
        month_ok = (m >= 1) & (m <= 12)
        mm = np.where(month_ok, m, 1)
        leap = ((y % 4 == 0) & (y % 100 != 0)) | (y % 400 == 0)
        days = np.array([31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31])[mm - 1] + (leap & (mm == 2))
        bad = (y < 1) | (y > 9999) | ~month_ok | (d < 1) | (d > days)
        return [("google.type.Date is not a whole calendar date (year 1..9999, month, day)", bad)]
    h, mi, s, ns = parts
    bad = (h < 0) | (h > 23) | (mi < 0) | (mi > 59) | (s < 0) | (s > 59) | (ns < 0) | (ns > 999_999_999)
    return [("google.type.TimeOfDay outside 00:00:00..23:59:59.999999999", bad)]


def _component_types(kind: str) -> tuple[pa.DataType, ...]:
    if kind in ("timestamp", "duration"):
        return (pa.int64(), pa.int32())
    if kind == "date":
        return (pa.int32(), pa.int32(), pa.int32())
    return (pa.int32(), pa.int32(), pa.int32(), pa.int32())


def _truthy(arr: pa.Array) -> pa.Array:
    t = arr.type
    if pa.types.is_boolean(t):
        return arr
    if pa.types.is_string(t) or pa.types.is_binary(t):
        return pc.greater(pc.binary_length(arr), 0)
    if pa.types.is_integer(t) or pa.types.is_floating(t):
        # zero of the column's own type: a bare 0 is int64, and Arrow casts a uint64
        # column to it for the comparison (values >= 2**63 raised instead of being true)
        return pc.not_equal(arr, pa.scalar(0, t))
    return pc.not_equal(arr, 0)


def _days_from_civil(y: np.ndarray, m: np.ndarray, d: np.ndarray) -> np.ndarray:
    # Howard Hinnant's days_from_civil: proleptic Gregorian calendar, vectorised.
    y = y - (m <= 2)
    era = np.floor_divide(y, 400)
    yoe = y - era * 400
    doy = (153 * (m + np.where(m > 2, -3, 9)) + 2) // 5 + d - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146097 + doe - 719468
