"""ToJson: a map_batches step from whole-message rows to protojson text."""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from wirearrow.ray.runtime import is_object_ref, ray_module
from wirearrow.ray.transcode import _load


class ToJson:
    """``ds.map_batches(ToJson(plan), batch_format="pyarrow")``: rows -> one text column.

    The rows are a whole-message plan's (``wirearrow.ray.transcode`` of a plan without
    columns; other columns, e.g. ``keep=`` ones, are ignored); each becomes the text
    ``json_format.MessageToJson`` prints for its message with the same options, in the
    string column ``column``. Picklable: the plan travels as its compiled spec.
    """

    def __init__(self, plan: Any, column: str = "json", **options: Any) -> None:
        if is_object_ref(plan):
            plan = ray_module().get(plan)
        self._tc = _load(plan)
        self._column = column
        self._options = options
        self._names = self._tc.arrow_schema.names

    def __call__(self, batch: pa.Table) -> pa.Table:
        if isinstance(batch, pa.RecordBatch):
            batch = pa.Table.from_batches([batch])
        texts = self._tc.to_json(batch.select(self._names), **self._options)
        return pa.table({self._column: texts})
