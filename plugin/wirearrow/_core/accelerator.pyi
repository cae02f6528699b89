"""The optional C++ accelerator (accelerator.pyx): built only against a pyarrow's C++ headers;
use it through wirearrow.accelerator, which checks the pyarrow release it was built for."""

from collections.abc import Iterable

import pyarrow as pa
from typing_extensions import disjoint_base

PYARROW_VERSION: str

@disjoint_base
class Nodes:
    def add_batch(self, batch: pa.RecordBatch, node_ids: Iterable[int]) -> None: ...
    def add(self, node: int, arr: pa.Array) -> None: ...
    def put_together(
        self,
        node: int,
        type: pa.DataType,
        length: int,
        validity: pa.Buffer | None,
        offsets: pa.Buffer | None,
        null_count: int,
        children: Iterable[int],
    ) -> None: ...
    def array(self, node: int) -> pa.Array: ...

def record_batch(columns: list[pa.Array], schema: pa.Schema) -> pa.RecordBatch: ...
def export_for_encode(batch: pa.RecordBatch, address: int) -> None: ...
