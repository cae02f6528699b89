"""The optional C++ accelerator (accelerator.pyx): built only against a pyarrow's C++ headers;
use it through wirearrow.accelerator, which checks the pyarrow release it was built for."""

import pyarrow as pa
from typing_extensions import disjoint_base

PYARROW_VERSION: str

@disjoint_base
class TreeArrays:
    def __init__(self, schema: pa.Schema, cache_max: int = 16) -> None: ...
    def take(self, address: int) -> list[pa.Array]: ...

def record_batch(columns: list[pa.Array], schema: pa.Schema) -> pa.RecordBatch: ...
def export_for_encode(batch: pa.RecordBatch, address: int) -> None: ...
