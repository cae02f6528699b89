"""ToJson: Arrow record batches (whole messages) -> protojson text, one str per row."""

from __future__ import annotations

import pickle
from collections.abc import Iterator
from typing import Any, Optional

import apache_beam as beam
import pyarrow as pa

from wirearrow.beam.transcode import _resolve_transcoder


class _ToJsonFn(beam.DoFn):
    def __init__(self, spec: bytes, options: dict) -> None:
        super().__init__()
        self._spec = spec  # the Transcoder, pickled: compiled once per worker in setup()
        self._options = options

    def setup(self) -> None:
        self._tc = pickle.loads(self._spec)

    def process(self, batch: pa.RecordBatch | pa.Table) -> Iterator[str]:
        yield from self._tc.to_json(batch, **self._options).to_pylist()


class ToJson(beam.PTransform):
    """Whole-message RecordBatches (ToArrow of a plan without columns) -> protojson lines.

    Each row becomes the text ``json_format.MessageToJson`` prints for its message, with
    the same options (``indent=None``: one line, for text / NDJSON sinks). ``plan`` is a
    whole-message plan or Transcoder, as for ToArrow. See docs/json.md.
    """

    def __init__(
        self,
        plan: Any,
        preserving_proto_field_name: bool = False,
        always_print_fields_with_no_presence: bool = False,
        use_integers_for_enums: bool = False,
        indent: Optional[int] = None,  # noqa: UP045 (Beam YAML reads these annotations)
    ) -> None:
        super().__init__()
        transcoder = _resolve_transcoder(plan, None)
        self._spec = pickle.dumps(transcoder, protocol=pickle.HIGHEST_PROTOCOL)
        self._options = {
            "preserving_proto_field_name": preserving_proto_field_name,
            "always_print_fields_with_no_presence": always_print_fields_with_no_presence,
            "use_integers_for_enums": use_integers_for_enums,
            "indent": indent,
        }

    def expand(self, pcoll: beam.PCollection) -> beam.PCollection:
        fn = _ToJsonFn(self._spec, self._options)
        return pcoll | "ToJson" >> beam.ParDo(fn).with_output_types(str)
