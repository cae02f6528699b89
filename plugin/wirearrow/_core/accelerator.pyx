# distutils: language = c++
"""The optional accelerator: Arrow arrays and record batches put together in C++ (Arrow's
ArrayData over children already built), without pyarrow's Python constructors.

Those constructors (`pa.Array.from_buffers`, `StructArray.from_arrays`,
`RecordBatch.from_arrays`) validate the whole subtree under the node they make, and the
Python arrays of a C-interface import cost ~10k instructions a column to wrap: on a wide
recursive plan (18,560 Arrow nodes at max_depth=3) that made a one-record call cost
milliseconds whatever the batch held. Here (TreeArrays) the C structs ArrowTree.build fills
over the decoder's buffers become `ArrayData` directly (no import through the C data
interface, no validation: wirearrow made every part, and its tests validate them fully), each
subtree absent from the batch an array of nulls kept per type and length, and only the
columns become Python objects. For the encoder, a batch is exported without the subtrees it
never reads (export_for_encode).

Built against the Arrow C++ headers and libraries of the pyarrow installed at build time, and
used only with that very pyarrow (wirearrow.accelerator checks PYARROW_VERSION at import):
Arrow's C++ ABI is not stable across releases. Everything here has a pure-pyarrow fallback
that gives equal arrays (tests/test_accelerator.py).
"""

from libc.stdint cimport int64_t, uintptr_t
from libcpp.string cimport string
from libcpp.memory cimport shared_ptr
from libcpp.vector cimport vector

from pyarrow.includes.libarrow cimport (
    CArray,
    CArrayData,
    CDataType,
    CRecordBatch,
    CSchema,
    MakeArray,
)
from pyarrow.lib cimport (
    pyarrow_unwrap_array,
    pyarrow_unwrap_batch,
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
    bint wa_same_type(const shared_ptr[CDataType]& a, const shared_ptr[CDataType]& b)
    shared_ptr[CDataType] wa_field_type(const shared_ptr[CSchema]& schema, int i)
    int wa_num_fields(const shared_ptr[CSchema]& schema)


cdef extern from *:
    """
    #include <arrow/api.h>
    #include <arrow/c/bridge.h>
    #include <cstdint>
    #include <string>
    #include <unordered_map>
    #include <utility>
    #include <vector>

    // The tree ArrowTree.build filled (C data interface structs over the decoder's buffers
    // and the tree's own blocks), taken as Arrow ArrayData without its import: no schema
    // parsed, no per-node import state, no Python array a column. One owner for the whole
    // tree, which every buffer made here holds: when the last goes, the root is released
    // and with it the tree's block and the Python objects it points into.
    struct WaTreeOwner {
        struct ArrowArray root;
        explicit WaTreeOwner(struct ArrowArray* r) : root(*r) { r->release = nullptr; }
        ~WaTreeOwner() {
            if (root.release != nullptr) {
                root.release(&root);
            }
        }
    };

    class WaTreeBuffer : public arrow::Buffer {
      public:
        WaTreeBuffer(const void* data, int64_t size, std::shared_ptr<WaTreeOwner> owner)
            : arrow::Buffer(static_cast<const uint8_t*>(data), size), owner_(std::move(owner)) {}

      private:
        std::shared_ptr<WaTreeOwner> owner_;
    };

    // Arrays null in every slot, made once a plan: by type object and length (a wide
    // recursive plan's absent subtrees repeat the same few lengths).
    struct WaNullKey {
        const arrow::DataType* type;
        int64_t length;
        bool operator==(const WaNullKey& o) const { return type == o.type && length == o.length; }
    };
    struct WaNullKeyHash {
        size_t operator()(const WaNullKey& k) const {
            return std::hash<const void*>()(k.type) * 31 + std::hash<int64_t>()(k.length);
        }
    };
    struct WaNulls {
        std::unordered_map<WaNullKey, std::shared_ptr<arrow::ArrayData>, WaNullKeyHash> cache;
        int64_t cache_max = 16;
    };

    struct WaTake {
        std::shared_ptr<WaTreeOwner> owner;
        const void* tree;   // the private_data of the nodes ArrowTree made
        WaNulls* nulls;
    };

    static inline std::shared_ptr<arrow::Buffer> wa_tree_buffer(WaTake& t, const void* p,
                                                                int64_t size) {
        if (p == nullptr) {
            return nullptr;
        }
        return std::make_shared<WaTreeBuffer>(p, size, t.owner);
    }

    static arrow::Result<std::shared_ptr<arrow::ArrayData>> wa_nulls_of(
            WaNulls* nulls, const std::shared_ptr<arrow::DataType>& type, int64_t n) {
        WaNullKey key{type.get(), n};
        if (n <= nulls->cache_max) {
            auto found = nulls->cache.find(key);
            if (found != nulls->cache.end()) {
                return found->second;
            }
        }
        ARROW_ASSIGN_OR_RAISE(auto arr, arrow::MakeArrayOfNull(type, n));
        if (n <= nulls->cache_max) {
            nulls->cache.emplace(key, arr->data());
        }
        return arr->data();
    }

    static arrow::Status wa_expect(const struct ArrowArray* a, int64_t buffers, int64_t children,
                                   const arrow::DataType& type) {
        if (a->n_buffers != buffers || a->n_children != children) {
            return arrow::Status::Invalid("tree node of type ", type.ToString(), ": ",
                                          a->n_buffers, " buffers, ", a->n_children,
                                          " children");
        }
        return arrow::Status::OK();
    }

    static arrow::Result<std::shared_ptr<arrow::ArrayData>> wa_take_node(
            WaTake& t, struct ArrowArray* a, const std::shared_ptr<arrow::DataType>& type) {
        if (a->release == nullptr) {
            return arrow::Status::Invalid("tree node released");
        }
        if (a->private_data != t.tree) {
            // A given array (built in Python) exported into its slot by pyarrow: imported.
            ARROW_ASSIGN_OR_RAISE(auto arr, arrow::ImportArray(a, type));
            return arr->data();
        }
        const int64_t n = a->length, off = a->offset, end = off + n;
        if (a->n_buffers == 0 && a->n_children == 0) {
            // Absent (ArrowTree.build's absent=): null in every slot, or no slot.
            return wa_nulls_of(t.nulls, type, n);
        }
        const int64_t bitmap = (end + 7) / 8;
        std::vector<std::shared_ptr<arrow::Buffer>> bufs;
        std::vector<std::shared_ptr<arrow::ArrayData>> kids;
        switch (type->id()) {
            case arrow::Type::BOOL:
                ARROW_RETURN_NOT_OK(wa_expect(a, 2, 0, *type));
                bufs = {wa_tree_buffer(t, a->buffers[0], bitmap),
                        wa_tree_buffer(t, a->buffers[1], bitmap)};
                break;
            case arrow::Type::STRING:
            case arrow::Type::BINARY: {
                ARROW_RETURN_NOT_OK(wa_expect(a, 3, 0, *type));
                const int32_t* offsets = static_cast<const int32_t*>(a->buffers[1]);
                bufs = {wa_tree_buffer(t, a->buffers[0], bitmap),
                        wa_tree_buffer(t, offsets, (end + 1) * 4),
                        wa_tree_buffer(t, a->buffers[2], offsets[end])};
                break;
            }
            case arrow::Type::STRUCT:
                ARROW_RETURN_NOT_OK(wa_expect(a, 1, type->num_fields(), *type));
                bufs = {wa_tree_buffer(t, a->buffers[0], bitmap)};
                break;
            case arrow::Type::LIST:
            case arrow::Type::MAP:
                ARROW_RETURN_NOT_OK(wa_expect(a, 2, 1, *type));
                bufs = {wa_tree_buffer(t, a->buffers[0], bitmap),
                        wa_tree_buffer(t, a->buffers[1], (end + 1) * 4)};
                break;
            default: {
                if (!arrow::is_primitive(type->id())
                        || type->id() == arrow::Type::BOOL
                        || type->byte_width() <= 0) {
                    return arrow::Status::NotImplemented("tree node of type ", type->ToString());
                }
                ARROW_RETURN_NOT_OK(wa_expect(a, 2, 0, *type));
                bufs = {wa_tree_buffer(t, a->buffers[0], bitmap),
                        wa_tree_buffer(t, a->buffers[1], end * type->byte_width())};
            }
        }
        kids.reserve(a->n_children);
        for (int64_t i = 0; i < a->n_children; ++i) {
            ARROW_ASSIGN_OR_RAISE(auto kid, wa_take_node(t, a->children[i], type->field(i)->type()));
            kids.push_back(std::move(kid));
        }
        return arrow::ArrayData::Make(type, n, std::move(bufs), std::move(kids), a->null_count,
                                      off);
    }

    // The root (a struct of one node a field of `schema`) at `address`, taken: its columns
    // into `out`; "" or the error. The root is released when nothing made here holds it,
    // also on an error.
    static std::string wa_take_tree(uintptr_t address,
                                    const std::shared_ptr<arrow::Schema>& schema,
                                    WaNulls* nulls,
                                    std::vector<std::shared_ptr<arrow::ArrayData>>& out) {
        WaTake t{std::make_shared<WaTreeOwner>(reinterpret_cast<struct ArrowArray*>(address)),
                 nullptr, nulls};
        struct ArrowArray* root = &t.owner->root;
        t.tree = root->private_data;
        if (!schema || root->release == nullptr || root->n_children != schema->num_fields()) {
            return "ArrowTree: the root is not a struct of the schema's fields";
        }
        out.reserve(root->n_children);
        for (int64_t i = 0; i < root->n_children; ++i) {
            auto got = wa_take_node(t, root->children[i], schema->field(i)->type());
            if (!got.ok()) {
                out.clear();
                return got.status().ToString();
            }
            out.push_back(std::move(got).ValueUnsafe());
        }
        return std::string();
    }
    """
    cppclass WaNulls:
        int64_t cache_max
    string wa_take_tree(uintptr_t address, const shared_ptr[CSchema]& schema, WaNulls* nulls,
                        vector[shared_ptr[CArrayData]]& out) except +


PYARROW_VERSION = wa_pyarrow_version.decode()
"""The pyarrow release this module was compiled against (its C++ ABI)."""


cdef class TreeArrays:
    """A plan's whole-record columns taken from ArrowTree.build (its into=) as Arrow
    ArrayData, without the C data interface's import: made once per plan (the schema of
    its roots; arrays null in every slot kept by type and length, up to `cache_max` slots)."""

    cdef shared_ptr[CSchema] schema
    cdef WaNulls* nulls

    def __cinit__(self):
        self.nulls = new WaNulls()

    def __init__(self, schema, int64_t cache_max=16):
        self.schema = pyarrow_unwrap_schema(schema)
        if self.schema.get() == NULL:
            raise TypeError(f"expected a pyarrow.Schema, got {type(schema).__name__}")
        self.nulls.cache_max = cache_max

    def __dealloc__(self):
        del self.nulls

    def take(self, uintptr_t address):
        """The columns (pa.Arrays) of the tree whose root ArrowTree.build exported at
        `address`: taken over (released when the arrays are gone, or here on an error)."""
        cdef vector[shared_ptr[CArrayData]] out
        cdef string error = wa_take_tree(address, self.schema, self.nulls, out)
        if error.size():
            raise ValueError(f"TreeArrays.take: {error.decode(errors='replace')}")
        return [pyarrow_wrap_array(MakeArray(d)) for d in out]


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
