"""Beam batches of Arrow data, for batched DoFns (``process_batch``): two batch converters,
registered on import, for records as :class:`RecordArray` (ReadFromDelimited's, ToArrow's
input: no Python object per record) and for ToArrow's batches or tables as one
``pa.Table`` / ``pa.RecordBatch`` of several (no copy of the columns). Beam's own pyarrow
converters ask arrays for ``num_rows`` and want schema'd rows as elements (Beam 2.77)."""

from collections.abc import Iterator
from typing import Any

import pyarrow as pa
from apache_beam.typehints.batch import BATCH_CONVERTER_REGISTRY, BatchConverter

_ARROW_BATCHES = (pa.RecordBatch, pa.Table)


class RecordArray:
    """A batch of records as one Arrow ``BinaryArray``: ReadFromDelimited's batch type.

    Beam hands batches between fused DoFns that both take them, so records go from the
    file buffer to the transcoder with no Python object per record; a DoFn that takes
    single elements gets each record as ``bytes`` instead (Beam explodes the batch).
    """

    __slots__ = ("array",)

    def __init__(self, array: pa.Array) -> None:
        self.array = array

    def __len__(self) -> int:
        return len(self.array)

    @property
    def nbytes(self) -> int:
        return self.array.nbytes

    def __repr__(self) -> str:
        return f"RecordArray({len(self.array)} records, {self.nbytes} bytes)"


def concat_records(arrays: list[pa.Array]) -> pa.Array:
    """One array of the records of ``arrays`` (large_binary when their types differ)."""
    if len({a.type for a in arrays}) > 1:
        arrays = [a.cast(pa.large_binary()) for a in arrays]
    return arrays[0] if len(arrays) == 1 else pa.concat_arrays(arrays)


def _as_table(element: pa.RecordBatch | pa.Table) -> pa.Table:
    return element if isinstance(element, pa.Table) else pa.Table.from_batches([element])


class _Converter(BatchConverter):
    def get_length(self, batch: Any) -> int:
        return len(batch)

    def estimate_byte_size(self, batch: Any) -> int:
        return batch.nbytes


class _RecordArrayConverter(_Converter):
    def __init__(self) -> None:
        super().__init__(RecordArray, bytes)

    def produce_batch(self, elements: Any) -> RecordArray:
        return RecordArray(pa.array(list(elements), pa.binary()))

    def explode_batch(self, batch: RecordArray) -> Iterator[bytes]:
        return iter(batch.array.to_pylist())

    def combine_batches(self, batches: Any) -> RecordArray:
        return RecordArray(concat_records([b.array for b in batches]))


class _ArrowBatchConverter(_Converter):
    """Elements: pa.RecordBatch / pa.Table; batches: one pa.Table or pa.RecordBatch of the
    rows of several elements (all of one schema, as ToArrow's are). A batch's length is its
    number of rows, which is what Beam's batch sizing counts."""

    def __init__(self, element_type: Any, batch_type: Any) -> None:
        super().__init__(batch_type, element_type)
        self._element_type = element_type

    def produce_batch(self, elements: Any) -> pa.Table | pa.RecordBatch:
        table = pa.concat_tables([_as_table(e) for e in elements])
        if self.batch_type is pa.Table:
            return table
        if not table.num_rows:
            return pa.RecordBatch.from_pylist([], schema=table.schema)
        return table.combine_chunks().to_batches()[0]

    def explode_batch(self, batch: pa.Table | pa.RecordBatch) -> Iterator[Any]:
        if self._element_type is pa.Table:
            yield _as_table(batch)
        elif isinstance(batch, pa.RecordBatch):
            yield batch
        else:
            yield from batch.to_batches()

    def combine_batches(self, batches: Any) -> pa.Table | pa.RecordBatch:
        return self.produce_batch(batches)

    def get_length(self, batch: pa.Table | pa.RecordBatch) -> int:
        return batch.num_rows


def _record_arrays(element_type: Any, batch_type: Any) -> BatchConverter:
    if batch_type is not RecordArray:
        raise TypeError("batch type must be wirearrow.beam.RecordArray")
    if element_type is not bytes:
        raise TypeError(f"RecordArray batches hold bytes, not {element_type}")
    return _RecordArrayConverter()


def _arrow_batches(element_type: Any, batch_type: Any) -> BatchConverter:
    if element_type not in _ARROW_BATCHES or batch_type not in _ARROW_BATCHES:
        raise TypeError("Arrow batches of Arrow batch elements (pa.RecordBatch / pa.Table)")
    return _ArrowBatchConverter(element_type, batch_type)


for _name, _factory in (("RecordArray", _record_arrays), ("ArrowBatches", _arrow_batches)):
    if f"wirearrow.{_name}" not in BATCH_CONVERTER_REGISTRY:  # a module reload registers once
        BatchConverter.register(name=f"wirearrow.{_name}")(_factory)
