# distutils: language = c++
"""The optional accelerator: Arrow arrays and record batches put together in C++ (Arrow's
ArrayData over children already built), without pyarrow's Python constructors.

Those constructors (`pa.Array.from_buffers`, `StructArray.from_arrays`,
`RecordBatch.from_arrays`) validate the whole subtree under the node they make, and the
Python arrays of a C-interface import cost ~10k instructions a column to wrap: on a wide
recursive plan (18,560 Arrow nodes at max_depth=3) that made a one-record call cost
milliseconds whatever the batch held. Here a node is `ArrayData::Make` over its children's
ArrayData (no validation: wirearrow made every part, and its tests validate them fully), and
only the columns a caller asks for become Python objects. For the encoder, a batch is exported
without the subtrees it never reads (export_for_encode).

Built against the Arrow C++ headers and libraries of the pyarrow installed at build time, and
used only with that very pyarrow (wirearrow.accelerator checks PYARROW_VERSION at import):
Arrow's C++ ABI is not stable across releases. Everything here has a pure-pyarrow fallback
that gives equal arrays (tests/test_accelerator.py).
"""

from cython.operator cimport dereference as deref
from libc.stdint cimport int64_t, uintptr_t
from libcpp.string cimport string
from libcpp.memory cimport shared_ptr
from libcpp.unordered_map cimport unordered_map
from libcpp.vector cimport vector

from pyarrow.includes.libarrow cimport (
    CArray,
    CArrayData,
    CBuffer,
    CDataType,
    CRecordBatch,
    CSchema,
    MakeArray,
)
from pyarrow.lib cimport (
    pyarrow_unwrap_array,
    pyarrow_unwrap_batch,
    pyarrow_unwrap_buffer,
    pyarrow_unwrap_data_type,
    pyarrow_unwrap_schema,
    pyarrow_wrap_array,
    pyarrow_wrap_batch,
)

cdef extern from *:
    """
    #ifndef WIREARROW_PYARROW_VERSION
    #define WIREARROW_PYARROW_VERSION "unknown"
    #endif
    static const char* wa_pyarrow_version = WIREARROW_PYARROW_VERSION;
    """
    const char* wa_pyarrow_version

cdef extern from *:
    """
    #include <arrow/api.h>
    #include <arrow/c/bridge.h>
    #include <cstdint>
    #include <string>

    // The array as the encoder reads it (encoder.pyx, bind): a struct, list or map with no
    // value in any slot keeps its own buffers but not its children, which the encoder never
    // reads; elsewhere the children are pruned in turn. Shared, not copied, where nothing
    // under a node is pruned.
    // A list's element array (`elements`) is pruned only when it has no slot: a map's
    // entries all null are bound with their keys (the encoder sorts them before it fails).
    static std::shared_ptr<arrow::ArrayData> wa_prune(const std::shared_ptr<arrow::ArrayData>& d,
                                                      bool elements) {
        arrow::Type::type id = d->type->id();
        if (d->child_data.empty() || (id != arrow::Type::STRUCT && id != arrow::Type::LIST
                                      && id != arrow::Type::LARGE_LIST
                                      && id != arrow::Type::MAP)) {
            return d;
        }
        int64_t nulls = d->GetNullCount();
        if (d->length == 0 || (nulls == d->length && !elements)) {
            return arrow::ArrayData::Make(d->type, d->length, d->buffers,
                                          std::vector<std::shared_ptr<arrow::ArrayData>>(),
                                          nulls, d->offset);
        }
        std::vector<std::shared_ptr<arrow::ArrayData>> kids;
        kids.reserve(d->child_data.size());
        bool changed = false;
        for (const auto& c : d->child_data) {
            kids.push_back(wa_prune(c, id != arrow::Type::STRUCT));
            changed = changed || kids.back().get() != c.get();
        }
        if (!changed) {
            return d;
        }
        return arrow::ArrayData::Make(d->type, d->length, d->buffers, std::move(kids), nulls,
                                      d->offset);
    }

    // The batch as RecordBatch._export_to_c exports it (a struct array of its columns, offset
    // 0), each column pruned: "" or the error.
    static std::string wa_export_for_encode(const std::shared_ptr<arrow::RecordBatch>& b,
                                            uintptr_t address) {
        std::vector<std::shared_ptr<arrow::ArrayData>> kids;
        kids.reserve(b->num_columns());
        for (int i = 0; i < b->num_columns(); ++i) {
            kids.push_back(wa_prune(b->column_data(i), false));
        }
        auto root = arrow::ArrayData::Make(arrow::struct_(b->schema()->fields()), b->num_rows(),
                                           {nullptr}, std::move(kids), 0, 0);
        arrow::Status st = arrow::ExportArray(*arrow::MakeArray(root),
                                              reinterpret_cast<struct ArrowArray*>(address));
        return st.ok() ? std::string() : st.ToString();
    }
    """
    string wa_export_for_encode(const shared_ptr[CRecordBatch]& batch, uintptr_t address)


cdef extern from *:
    """
    #include <arrow/api.h>
    static inline std::shared_ptr<arrow::ArrayData> wa_column_data(
            const std::shared_ptr<arrow::RecordBatch>& batch, int i) {
        return batch->column_data(i);
    }
    static inline int64_t wa_num_columns(const std::shared_ptr<arrow::RecordBatch>& batch) {
        return batch->num_columns();
    }
    static inline bool wa_same_type(const std::shared_ptr<arrow::DataType>& a,
                                    const std::shared_ptr<arrow::DataType>& b) {
        // The same object (the schema's own type, as the tree and the plan share it) or an
        // equal one (Arrow compares cached fingerprints: not a walk per call).
        return a.get() == b.get() || a->Equals(*b);
    }
    static inline std::shared_ptr<arrow::DataType> wa_field_type(
            const std::shared_ptr<arrow::Schema>& schema, int i) {
        return schema->field(i)->type();
    }
    static inline int wa_num_fields(const std::shared_ptr<arrow::Schema>& schema) {
        return schema->num_fields();
    }
    """
    shared_ptr[CArrayData] wa_column_data(const shared_ptr[CRecordBatch]& batch, int i)
    int64_t wa_num_columns(const shared_ptr[CRecordBatch]& batch)
    bint wa_same_type(const shared_ptr[CDataType]& a, const shared_ptr[CDataType]& b)
    shared_ptr[CDataType] wa_field_type(const shared_ptr[CSchema]& schema, int i)
    int wa_num_fields(const shared_ptr[CSchema]& schema)


PYARROW_VERSION = wa_pyarrow_version.decode()
"""The pyarrow release this module was compiled against (its C++ ABI)."""


cdef shared_ptr[CArrayData] data_of(object arr) except *:
    cdef shared_ptr[CArray] a = pyarrow_unwrap_array(arr)
    if a.get() == NULL:
        raise TypeError(f"expected a pyarrow.Array, got {type(arr).__name__}")
    return a.get().data()


cdef class Nodes:
    """The arrays of one batch's tree nodes, by node id, as C++ ArrayData: imported columns
    and cached arrays go in, nodes above them are put together over them, and only the
    arrays asked for with array() are made Python objects."""

    cdef unordered_map[int64_t, shared_ptr[CArrayData]] data

    def add_batch(self, batch, node_ids):
        """The columns of `batch` (a pa.RecordBatch) as the nodes `node_ids`, in order."""
        cdef shared_ptr[CRecordBatch] b = pyarrow_unwrap_batch(batch)
        if b.get() == NULL:
            raise TypeError(f"expected a pyarrow.RecordBatch, got {type(batch).__name__}")
        cdef int i = 0
        if len(node_ids) != wa_num_columns(b):
            raise ValueError("Nodes.add_batch: one node id a column")
        for node in node_ids:
            self.data[<int64_t>node] = wa_column_data(b, i)
            i += 1

    def add(self, int64_t node, arr):
        """A pa.Array (e.g. one cached per plan) as node `node`."""
        self.data[node] = data_of(arr)

    def put_together(self, int64_t node, type, int64_t length, validity, offsets,
                     int64_t null_count, children):
        """Node `node`: a struct (offsets None) or list / map over the nodes `children`,
        already here, with this validity bitmap (a pa.Buffer or None) and, for a list, its
        int32 offsets buffer. As pa.Array.from_buffers makes it, without its validation."""
        cdef shared_ptr[CDataType] t = pyarrow_unwrap_data_type(type)
        if t.get() == NULL:
            raise TypeError(f"expected a pyarrow.DataType, got {type!r}")
        cdef vector[shared_ptr[CBuffer]] buffers
        buffers.push_back(pyarrow_unwrap_buffer(validity) if validity is not None
                          else shared_ptr[CBuffer]())
        if offsets is not None:
            buffers.push_back(pyarrow_unwrap_buffer(offsets))
        cdef vector[shared_ptr[CArrayData]] kids
        cdef unordered_map[int64_t, shared_ptr[CArrayData]].iterator found
        for k in children:
            found = self.data.find(<int64_t>k)
            if found == self.data.end():
                raise KeyError(f"Nodes.put_together: node {k} is not built")
            kids.push_back(deref(found).second)
        self.data[node] = CArrayData.MakeWithChildren(t, length, buffers, kids, null_count, 0)

    def array(self, int64_t node):
        """Node `node` as a pa.Array."""
        cdef unordered_map[int64_t, shared_ptr[CArrayData]].iterator found = self.data.find(node)
        if found == self.data.end():
            raise KeyError(f"Nodes.array: node {node} is not built")
        return pyarrow_wrap_array(MakeArray(deref(found).second))


def record_batch(list columns, schema):
    """pa.RecordBatch.from_arrays(columns, schema=schema) without its validation of every
    node under every column (RecordBatch::Make): the lengths and types are checked, the
    columns' contents are not (wirearrow built them)."""
    cdef shared_ptr[CSchema] s = pyarrow_unwrap_schema(schema)
    if s.get() == NULL:
        raise TypeError(f"expected a pyarrow.Schema, got {type(schema).__name__}")
    cdef int n_fields = wa_num_fields(s)
    if len(columns) != n_fields:
        raise ValueError(f"record_batch: {len(columns)} columns for a schema of {n_fields} fields")
    cdef vector[shared_ptr[CArray]] arrays
    cdef shared_ptr[CArray] a
    cdef int64_t rows = -1
    cdef int i
    for i in range(n_fields):
        a = pyarrow_unwrap_array(columns[i])
        if a.get() == NULL:
            raise TypeError(f"record_batch: column {i} is a {type(columns[i]).__name__}")
        if rows < 0:
            rows = a.get().length()
        elif a.get().length() != rows:
            raise ValueError(f"record_batch: column {i} has {a.get().length()} rows, not {rows}")
        if not wa_same_type(a.get().type(), wa_field_type(s, i)):
            raise TypeError(f"record_batch: column {i}'s type is not the schema's")
        arrays.push_back(a)
    return pyarrow_wrap_batch(CRecordBatch.Make(s, max(rows, 0), arrays))


def export_for_encode(batch, uintptr_t address):
    """batch._export_to_c(address) as the encoder reads it: every struct, list or map whose
    slots are all null (or that has none) without its children, which the encoder never
    reads (encoder.pyx, bind). On a wide plan most of the output type's nodes sit in such
    subtrees, and exporting and releasing a node costs ~1.1k instructions."""
    cdef shared_ptr[CRecordBatch] b = pyarrow_unwrap_batch(batch)
    if b.get() == NULL:
        raise TypeError(f"expected a pyarrow.RecordBatch, got {type(batch).__name__}")
    cdef string error = wa_export_for_encode(b, address)
    if error.size():
        raise ValueError(f"export_for_encode: {error.decode(errors='replace')}")
