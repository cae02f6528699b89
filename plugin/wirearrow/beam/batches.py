"""Arrow batches as Beam batches: ToArrow's output straight into batched DoFns.

ToArrow's elements are Arrow record batches (or tables). A downstream DoFn whose
``process_batch`` takes a ``pa.Table`` (or a ``pa.RecordBatch``) gets them through the
converter registered here: Beam gathers some elements and hands them over as one table
(``pa.concat_tables``, no copy of the columns) instead of calling ``process`` per
element. Beam's own pyarrow converter cannot be used: it wants schema'd rows as elements
and builds its tables from them one value at a time.
"""

from collections.abc import Iterator
from typing import Any

import pyarrow as pa
from apache_beam.typehints.batch import BATCH_CONVERTER_REGISTRY, BatchConverter

_ARROW_BATCHES = (pa.RecordBatch, pa.Table)


def _as_table(element: pa.RecordBatch | pa.Table) -> pa.Table:
    return element if isinstance(element, pa.Table) else pa.Table.from_batches([element])


class _ArrowBatchConverter(BatchConverter):
    """Elements: pa.RecordBatch / pa.Table; Beam batches: one pa.Table or pa.RecordBatch of
    the rows of several elements (all of one schema, as ToArrow's are). A batch's length is
    its number of rows, which is what Beam's batch sizing counts."""

    def __init__(self, element_type: Any, batch_type: Any) -> None:
        super().__init__(batch_type, element_type)
        self._element_type = element_type

    def produce_batch(self, elements: Any) -> pa.Table | pa.RecordBatch:
        table = pa.concat_tables([_as_table(e) for e in elements])
        if self.batch_type is pa.Table:
            return table
        return table.combine_chunks().to_batches()[0] if table.num_rows else _empty(table)

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

    def estimate_byte_size(self, batch: pa.Table | pa.RecordBatch) -> int:
        return batch.nbytes


def _empty(table: pa.Table) -> pa.RecordBatch:
    return pa.RecordBatch.from_pylist([], schema=table.schema)


def _arrow_batch_converter(element_type: Any, batch_type: Any) -> BatchConverter:
    if element_type not in _ARROW_BATCHES or batch_type not in _ARROW_BATCHES:
        raise TypeError("Arrow batches of Arrow batch elements (pa.RecordBatch / pa.Table)")
    return _ArrowBatchConverter(element_type, batch_type)


if "wirearrow.ArrowBatches" not in BATCH_CONVERTER_REGISTRY:  # a module reload registers once
    BatchConverter.register(name="wirearrow.ArrowBatches")(_arrow_batch_converter)
