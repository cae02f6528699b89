# cython: freethreading_compatible = True
"""The table-driven protobuf wire encoder: Arrow buffers -> serialized messages.

One call encodes a whole batch with the GIL released into one buffer, as upb does: the
buffer is written **backwards**, from its end towards its start, so that when a
sub-message's bytes are complete its length is known and is written just before them; no
size pass, no backpatching. Rows, fields (by descending field number), repeated elements and
map entries are therefore visited in reverse, and land in forward order.

Tables (built once per Arrow schema by wirearrow.plan.encoding, handed to `Plan` as int64
matrices whose columns are the fields of layout.EncodeSpec, EncodeEntry and EncodeNode, in
that order; loaded into the structs of tables.pxd, which `Plan.tables` hands back):
- specs: one row per Arrow array the encoder reads: how it is reached from the batch (a
  column, a struct's child, a list's values, or given per call by Python) and its buffers.
- entries: one row per field of a message node, ascending field number.
- nodes: one per message shape. Node 0 is the root; its columns are the batch's.

Per call, the batch is exported through the Arrow C data interface (one pyarrow call for the
whole tree, or the accelerator's export of what is read: see bind) and every spec's buffers
are looked up in it without the GIL: a call's fixed cost is that walk, not Python per array. Element `k` of an array (its *logical* index, what
parents' offsets hold) lives at physical slot `k + offset`, a struct's offset composed into
its children's. What Python derives per call (enum names, JSON texts, serialized messages
below a max_depth cut) arrives as given columns.

Invariants: the batch's schema is the one the tables were compiled from (checked by the
caller; the walk checks every array's children and buffers against its spec); offsets of a
list column index into its element column. Space is reserved before every write
(`reserve`), so writes below `ptr` never cross `buf`. The host is little-endian, as Arrow's
buffers and protobuf's fixed-width values are.
"""
from cpython.mem cimport PyMem_RawCalloc, PyMem_RawFree, PyMem_RawMalloc, PyMem_RawRealloc
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t, uintptr_t
from libc.string cimport memcmp, memcpy

from wirearrow._core.arrow cimport ArrowArray
from wirearrow._core.buffers cimport (
    MAX_LINES, Lines, OwnedBuffer, add_lines, pool_alloc, pool_free, wa_hugepages,
)
from wirearrow._core.tables cimport (
    A_COLUMN, A_FIELD, A_GIVEN, A_VALUES, C_DURATION, C_ENUM, C_NONE, C_TIMESTAMP, C_UTF8,
    L_BINARY, L_BOOL, L_DICTIONARY, L_FIXED, L_LIST, L_STRUCT, M_BOOL, M_NONE, M_STRING, M_U32,
    M_U64, P_ALWAYS, P_EXPLICIT, P_IMPLICIT, S_PACKED, S_REPEATED, S_SINGULAR, T_DAY,
    T_DUR_NANOS, T_DUR_SECONDS, T_HOURS, T_MINUTES, T_MONTH, T_NANOS, T_SECONDS, T_TOD_NANOS,
    T_TOD_SECONDS, T_YEAR, V_BOOL, V_BYTES, V_FIXED32, V_FIXED64, V_GROUP, V_INT32, V_INT64,
    V_MESSAGE, V_RAW_GROUP, V_SINT32, V_SINT64, V_TIME, V_UINT32, V_UNKNOWN, ArrowColumn,
    EncodeEntry, EncodeNode, EncodeSpec, EnumSet,
)
from wirearrow._core.wire cimport (
    copy_short, utf8_valid, utf8_valid_full, varint_size, zigzag32_of, zigzag64_of,
)

from wirearrow._core import layout


cdef extern from *:
    void __builtin_prefetch(const void* addr) nogil


cdef extern from *:
    """
    #define wa_unreachable() __builtin_unreachable()
    """
    void wa_unreachable() nogil   # a switch's default that cannot happen: no range test


KIND = {
    "int32": V_INT32, "uint32": V_UINT32, "int64": V_INT64, "sint32": V_SINT32,
    "sint64": V_SINT64, "fixed32": V_FIXED32, "fixed64": V_FIXED64, "bool": V_BOOL,
    "bytes": V_BYTES, "message": V_MESSAGE, "group": V_GROUP, "raw_group": V_RAW_GROUP,
    "unknown": V_UNKNOWN, "time": V_TIME,
}

SHAPE = {"singular": S_SINGULAR, "repeated": S_REPEATED, "packed": S_PACKED}

PRESENCE = {"explicit": P_EXPLICIT, "implicit": P_IMPLICIT, "always": P_ALWAYS}

CHECK = {
    "none": C_NONE, "utf8": C_UTF8, "enum": C_ENUM, "timestamp": C_TIMESTAMP,
    "duration": C_DURATION,
}

TIME_PART = {
    "seconds": T_SECONDS, "nanos": T_NANOS, "duration_seconds": T_DUR_SECONDS,
    "duration_nanos": T_DUR_NANOS, "year": T_YEAR, "month": T_MONTH, "day": T_DAY,
    "hours": T_HOURS, "minutes": T_MINUTES, "time_seconds": T_TOD_SECONDS,
    "time_nanos": T_TOD_NANOS,
}

MAP_KEYS = {"none": M_NONE, "bool": M_BOOL, "uint32": M_U32, "uint64": M_U64, "string": M_STRING}

ACCESS = {"column": A_COLUMN, "field": A_FIELD, "values": A_VALUES, "given": A_GIVEN}

LAYOUT = {
    "struct": L_STRUCT, "fixed": L_FIXED, "bool": L_BOOL, "binary": L_BINARY, "list": L_LIST,
    "dictionary": L_DICTIONARY,
}

cdef enum Status:
    OK = 0
    E_NULL_ELEMENT = 1
    E_NULL_ENTRY = 2
    E_BAD_VALUE = 3
    E_ONEOF = 4
    E_NO_MEMORY = 5
    E_TOO_LARGE = 6

STATUS_TEXT = {
    E_NULL_ELEMENT: "null element in a repeated field (protobuf lists cannot hold nulls)",
    E_NULL_ENTRY: "null map key or value (protobuf map entries cannot hold nulls)",
    E_BAD_VALUE: "value cannot be encoded",
    E_ONEOF: "more than one member of a oneof is set",
    E_NO_MEMORY: "out of memory",
    E_TOO_LARGE: "a serialized message would exceed 2 GiB",
}

SPEC_WIDTH = len(layout.EncodeSpec._fields)
COL_WIDTH = len(layout.EncodeColumn._fields)
ENTRY_WIDTH = len(layout.EncodeEntry._fields)
NODE_WIDTH = len(layout.EncodeNode._fields)

# Where each field sits in a row of the matrices: taken from the layout by name, once.
cdef Py_ssize_t S_PARENT = layout.position(layout.EncodeSpec, "parent")
cdef Py_ssize_t S_ACCESS = layout.position(layout.EncodeSpec, "access")
cdef Py_ssize_t S_CHILD = layout.position(layout.EncodeSpec, "child")
cdef Py_ssize_t S_LAYOUT = layout.position(layout.EncodeSpec, "layout")
cdef Py_ssize_t S_WIDE = layout.position(layout.EncodeSpec, "wide")
cdef Py_ssize_t C_VALIDITY = layout.position(layout.EncodeColumn, "validity")
cdef Py_ssize_t C_OFFSET = layout.position(layout.EncodeColumn, "offset")
cdef Py_ssize_t C_VALUES = layout.position(layout.EncodeColumn, "values")
cdef Py_ssize_t C_OFFSETS = layout.position(layout.EncodeColumn, "offsets")
cdef Py_ssize_t C_WIDE = layout.position(layout.EncodeColumn, "wide")
cdef Py_ssize_t C_BAD = layout.position(layout.EncodeColumn, "bad")
cdef Py_ssize_t EN_TAG = layout.position(layout.EncodeEntry, "tag")
cdef Py_ssize_t EN_END_TAG = layout.position(layout.EncodeEntry, "end_tag")
cdef Py_ssize_t EN_KIND = layout.position(layout.EncodeEntry, "kind")
cdef Py_ssize_t EN_SHAPE = layout.position(layout.EncodeEntry, "shape")
cdef Py_ssize_t EN_PRESENCE = layout.position(layout.EncodeEntry, "presence")
cdef Py_ssize_t EN_COL = layout.position(layout.EncodeEntry, "col")
cdef Py_ssize_t EN_ELEM = layout.position(layout.EncodeEntry, "elem")
cdef Py_ssize_t EN_CHILD = layout.position(layout.EncodeEntry, "child")
cdef Py_ssize_t EN_ONEOF = layout.position(layout.EncodeEntry, "oneof")
cdef Py_ssize_t EN_CHECK = layout.position(layout.EncodeEntry, "check")
cdef Py_ssize_t EN_AUX = layout.position(layout.EncodeEntry, "aux")
cdef Py_ssize_t EN_SCALE = layout.position(layout.EncodeEntry, "scale")
cdef Py_ssize_t N_FIRST = layout.position(layout.EncodeNode, "first")
cdef Py_ssize_t N_ENTRIES = layout.position(layout.EncodeNode, "n_entries")

# Timestamp / Duration bounds in seconds (google/protobuf/timestamp.proto, duration.proto).
cdef int64_t TS_MIN = -62135596800     # 0001-01-01T00:00:00Z
cdef int64_t TS_MAX = 253402300799     # 9999-12-31T23:59:59Z
cdef int64_t DUR_MAX = 315576000000    # +-10,000 years


ctypedef struct Enc:
    uint8_t* buf
    uint8_t* ptr               # next byte is written at ptr - 1
    uint8_t* limit             # end of the buffer: the output is [ptr, limit)
    uint8_t* low               # buf + SMALL: room for a small write while ptr >= low
    int64_t allocated          # bytes behind buf (given back to the pool with it)
    const ArrowColumn* cols
    const EncodeEntry* entries
    const EncodeNode* nodes
    const EnumSet* enum_sets
    const int32_t* enum_values
    int64_t* scratch           # map entry orders, a stack (maps nest in map values)
    int64_t scratch_cap
    int64_t scratch_top
    int32_t err_col
    int64_t err_index
    const uint8_t* absent      # per spec: 1 where its array is never read this call (bind;
                               # last: the record loop's fields keep their offsets)


cdef enum:
    SMALL = 32      # bytes reserve_small makes room for: a varint field (20), a length
                    # prefix and tag (20), a fixed-width field and its tag store (16)


cdef int grow(Enc* e, size_t n) noexcept nogil:
    """Move the written bytes to the end of a buffer with room for n more below them."""
    cdef size_t used = e.limit - e.ptr
    cdef size_t cap = e.limit - e.buf
    cdef size_t new_cap = cap * 2 if cap > 0 else 4096
    while new_cap < used + n:
        new_cap *= 2
    cdef int64_t allocated
    # The pool's blocks were written before (no page faults); a fresh one is written back
    # to front, every page, so it asks for huge pages (see buffers.pxd).
    cdef uint8_t* grown = pool_alloc(new_cap, False, &allocated)
    if grown == NULL:
        return E_NO_MEMORY
    if new_cap >= (<size_t>4 << 20):
        wa_hugepages(grown, new_cap)
    new_cap = <size_t>allocated
    if used:
        memcpy(grown + new_cap - used, e.ptr, used)
    pool_free(e.buf, e.allocated)
    e.buf = grown
    e.allocated = allocated
    e.limit = grown + new_cap
    e.ptr = e.limit - used
    e.low = grown + SMALL
    return OK


cdef inline int reserve(Enc* e, size_t n) noexcept nogil:
    if <size_t>(e.ptr - e.buf) >= n:
        return OK
    return grow(e, n)


cdef inline int reserve_small(Enc* e) noexcept nogil:
    """reserve(e, SMALL), as one comparison of the write position with e.low (the
    record loop's scalar fields and sub-message lengths: most writes of a record)."""
    if e.ptr >= e.low:
        return OK
    return grow(e, SMALL)


cdef inline uint8_t* varint_at(uint8_t* end, uint64_t v) noexcept nogil:
    """Base-128 varint, low group first, continuation bit on all but the last byte,
    written to end just below `end`: its start.

    (A field's writes go through a local pointer stored to e.ptr once at the end: a store
    through a uint8_t* may alias e.ptr, so writing through e.ptr itself made the compiler
    store it and load it again between the value and the tag.)"""
    cdef uint8_t* p
    if v < 0x80:
        (end - 1)[0] = <uint8_t>v
        return end - 1
    if v < 0x4000:
        # two bytes: sub-message lengths, strings of 128 bytes and more, sizes in pixels
        (end - 2)[0] = <uint8_t>(v | 0x80)
        (end - 1)[0] = <uint8_t>(v >> 7)
        return end - 2
    end -= varint_size(v)
    p = end
    while v >= 0x80:
        p[0] = <uint8_t>(v | 0x80)
        p += 1
        v >>= 7
    p[0] = <uint8_t>v
    return end


cdef inline void put_varint(Enc* e, uint64_t v) noexcept nogil:
    e.ptr = varint_at(e.ptr, v)


cdef inline void copy_bytes(uint8_t* dst, const uint8_t* src, size_t n) noexcept nogil:
    # Most strings of a message are short (ids, codes, names): fixed-size copies compile to
    # a load and a store each, where a memcpy call costs more than the bytes it moves.
    if n > 16:
        memcpy(dst, src, n)
    elif n >= 8:
        memcpy(dst, src, 8)
        memcpy(dst + n - 8, src + n - 8, 8)
    elif n >= 4:
        memcpy(dst, src, 4)
        memcpy(dst + n - 4, src + n - 4, 4)
    else:
        while n:
            n -= 1
            dst[n] = src[n]


cdef inline uint8_t* tag_at(uint8_t* end, const EncodeEntry* en) noexcept nogil:
    """The entry's tag, pre-encoded, just below `end`: one 8-byte store whose top tag_len
    bytes are the tag (the bytes below it are free room: the caller reserved 8 more than
    it wrote). Returns its start."""
    memcpy(end - 8, &en.tag_bytes, 8)
    return end - en.tag_len


cdef enum:
    COPY_WORDS = 256    # strings up to this long are copied by copy_words, longer by memcpy


cdef inline uint64_t copy_words(uint8_t* dst, const uint8_t* src, size_t n) noexcept nogil:
    """Copies n > 16 bytes 16 at a time (the last 16 overlapping the ones before) and
    returns the OR of what it moved, as copy_short does: one pass where a separate ASCII
    pass and a memcpy call cost about twice as much on the 17-256 byte strings of a record
    (URLs, user agents, JSON texts: ~10 of OpenRTB's ~45 strings a record)."""
    cdef uint64_t a, b, acc_a = 0, acc_b = 0
    cdef size_t j = 0
    # (two accumulators, one a word of the pair: the compiler keeps the pair as one
    # 16-byte register, loaded, stored and OR'd whole)
    while j + 16 < n:
        memcpy(&a, src + j, 8)
        memcpy(&b, src + j + 8, 8)
        memcpy(dst + j, &a, 8)
        memcpy(dst + j + 8, &b, 8)
        acc_a |= a
        acc_b |= b
        j += 16
    memcpy(&a, src + n - 16, 8)
    memcpy(&b, src + n - 8, 8)
    memcpy(dst + n - 16, &a, 8)
    memcpy(dst + n - 8, &b, 8)
    return acc_a | a | acc_b | b


cdef inline int put_string_field(Enc* e, const EncodeEntry* en, const uint8_t* src, size_t n,
                                 bint utf8) noexcept nogil:
    """Bytes, their length prefix and the entry's tag: OK, E_BAD_VALUE when `utf8` and
    they are not valid UTF-8, or E_NO_MEMORY."""
    if reserve(e, n + 20):
        return E_NO_MEMORY
    cdef uint8_t* p = e.ptr - n
    if n <= 16:
        if (copy_short(p, src, n) & 0x8080808080808080ULL) and utf8 and not utf8_valid_full(src, n):
            return E_BAD_VALUE
    elif n <= COPY_WORDS:
        if (copy_words(p, src, n) & 0x8080808080808080ULL) and utf8 and not utf8_valid_full(src, n):
            return E_BAD_VALUE
    else:
        if utf8 and not utf8_valid(src, n):
            return E_BAD_VALUE
        memcpy(p, src, n)
    e.ptr = tag_at(varint_at(p, n), en)
    return OK


cdef inline bint is_set(const uint8_t* bitmap, int64_t i) noexcept nogil:
    return (bitmap[i >> 3] >> (i & 7)) & 1


cdef inline bint is_null(const ArrowColumn* c, int64_t p) noexcept nogil:
    return c.validity != NULL and not is_set(c.validity, p)


cdef inline int64_t offset_in(const uint8_t* offsets, bint wide, int64_t p) noexcept nogil:
    """Entry p of an Arrow offsets buffer (int64 when wide, else int32)."""
    if wide:
        return (<const int64_t*>offsets)[p]
    return (<const int32_t*>offsets)[p]


cdef inline int64_t offset_at(const ArrowColumn* c, int64_t p) noexcept nogil:
    return offset_in(c.offsets, c.wide, p)


cdef inline void span(const ArrowColumn* c, int64_t p, int64_t* lo, int64_t* hi) noexcept nogil:
    lo[0] = offset_at(c, p)
    hi[0] = offset_at(c, p + 1)


# ---- temporal values ------------------------------------------------------------------
#
# Arrow holds a temporal value as one number (units since the epoch, days, units since
# midnight); protobuf's Timestamp, Duration, google.type.Date and TimeOfDay hold its parts.
# The parts are computed as numpy computed them before (floor division; int32 parts
# truncated to 32 bits), so the output did not change when this moved into the core.


cdef inline int64_t floor_div(int64_t a, int64_t b) noexcept nogil:
    cdef int64_t q = a // b      # (cdivision: truncates towards zero)
    if (a % b != 0) and ((a < 0) != (b < 0)):
        q -= 1
    return q


cdef inline int64_t temporal_slot(const ArrowColumn* c, int32_t width, int64_t p) noexcept nogil:
    if width == 4:
        return (<const int32_t*>c.values)[p]
    return (<const int64_t*>c.values)[p]


cdef int64_t time_part(const ArrowColumn* c, int32_t aux, int64_t scale, int64_t p) noexcept nogil:
    """One part of temporal slot p (`aux`: the part | the slot's width << 8)."""
    cdef int64_t v = temporal_slot(c, aux >> 8, p)
    cdef int32_t part = aux & 0xFF
    cdef int64_t s, rest, z, era, doe, yoe, doy, mp, h, mi
    if part <= T_DUR_NANOS:
        s = floor_div(v, scale)
        rest = v - s * scale
        if part >= T_DUR_SECONDS and rest != 0 and v < 0:
            s += 1      # a Duration's seconds and nanos carry the same sign
            rest -= scale
        if part == T_SECONDS or part == T_DUR_SECONDS:
            return s
        return <int32_t>(rest * (1000000000 // scale))
    if part <= T_DAY:
        # days since 1970-01-01 -> proleptic Gregorian (H. Hinnant's civil_from_days)
        z = v + 719468
        era = floor_div(z, 146097)
        doe = z - era * 146097
        yoe = (doe - doe // 1460 + doe // 36524 - doe // 146096) // 365
        doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
        mp = (5 * doy + 2) // 153
        if part == T_DAY:
            return <int32_t>(doy - (153 * mp + 2) // 5 + 1)
        if part == T_MONTH:
            return <int32_t>(mp + 3 if mp < 10 else mp - 9)
        return <int32_t>(yoe + era * 400 + (1 if mp >= 10 else 0))
    s = floor_div(v, scale)
    rest = v - s * scale
    if part == T_TOD_NANOS:
        return <int32_t>(rest * (1000000000 // scale))
    h = floor_div(s, 3600)
    if part == T_HOURS:
        return <int32_t>h
    s -= h * 3600
    mi = floor_div(s, 60)
    if part == T_MINUTES:
        return <int32_t>mi
    return <int32_t>(s - mi * 60)


# ---- checks ---------------------------------------------------------------------------


cdef inline bint enum_declared(const Enc* e, int32_t set_index, int32_t v) noexcept nogil:
    cdef const EnumSet* es = &e.enum_sets[set_index]
    if 0 <= v < 64:
        return (es.small >> v) & 1
    cdef int32_t lo = es.first, hi = es.first + es.count - 1, mid
    while lo <= hi:
        mid = (lo + hi) >> 1
        if e.enum_values[mid] == v:
            return True
        if e.enum_values[mid] < v:
            lo = mid + 1
        else:
            hi = mid - 1
    return False


cdef bint is_bad(const Enc* e, const EncodeEntry* en, const ArrowColumn* c, int64_t k) noexcept nogil:
    """Whether logical slot k of c cannot be encoded as `en` says (the slot is not null)."""
    cdef int64_t p = k + c.offset, lo, hi, s
    if c.bad != NULL and c.bad[k]:
        return True
    if en.check == C_UTF8:
        span(c, p, &lo, &hi)
        return not utf8_valid(c.values + lo, hi - lo)
    if en.check == C_ENUM:
        return not enum_declared(e, en.aux, (<const int32_t*>c.values)[p])
    if en.check == C_TIMESTAMP:
        s = floor_div(temporal_slot(c, en.aux, p), en.scale)
        return s < TS_MIN or s > TS_MAX
    if en.check == C_DURATION:
        s = floor_div(temporal_slot(c, en.aux, p), en.scale)
        return s < -DUR_MAX - 1 or s > DUR_MAX
    return False


# ---- writing --------------------------------------------------------------------------


cdef inline bint is_zero(const ArrowColumn* c, const EncodeEntry* en, int64_t p) noexcept nogil:
    """Whether slot p holds the default of an implicit-presence field (bits, not value)."""
    cdef int64_t lo, hi
    cdef int32_t kind = en.kind
    if kind == V_INT32 or kind == V_UINT32 or kind == V_SINT32 or kind == V_FIXED32:
        return (<const uint32_t*>c.values)[p] == 0
    if kind == V_INT64 or kind == V_SINT64 or kind == V_FIXED64:
        return (<const uint64_t*>c.values)[p] == 0
    if kind == V_BOOL:
        return not is_set(c.values, p)
    if kind == V_TIME:
        return time_part(c, en.aux, en.scale, p) == 0
    span(c, p, &lo, &hi)
    return hi == lo


cdef int put_value(Enc* e, const ArrowColumn* c, const EncodeEntry* en, int64_t p) noexcept nogil:
    """Write the value of slot p without its tag."""
    cdef int64_t lo, hi, v
    cdef size_t n
    cdef int32_t kind = en.kind
    if reserve(e, 10):
        return E_NO_MEMORY
    if kind == V_INT32:
        put_varint(e, <uint64_t><int64_t>(<const int32_t*>c.values)[p])
    elif kind == V_UINT32:
        put_varint(e, (<const uint32_t*>c.values)[p])
    elif kind == V_INT64:
        put_varint(e, (<const uint64_t*>c.values)[p])
    elif kind == V_SINT32:
        put_varint(e, zigzag32_of((<const int32_t*>c.values)[p]))
    elif kind == V_SINT64:
        put_varint(e, zigzag64_of((<const int64_t*>c.values)[p]))
    elif kind == V_FIXED32:
        e.ptr -= 4
        memcpy(e.ptr, c.values + 4 * p, 4)
    elif kind == V_FIXED64:
        e.ptr -= 8
        memcpy(e.ptr, c.values + 8 * p, 8)
    elif kind == V_BOOL:
        put_varint(e, is_set(c.values, p))
    elif kind == V_TIME:
        # seconds are int64 fields, every other part an int32 one (sign-extended)
        put_varint(e, <uint64_t>time_part(c, en.aux, en.scale, p))
    else:  # V_BYTES, V_UNKNOWN, V_RAW_GROUP: a binary slot
        span(c, p, &lo, &hi)
        n = <size_t>(hi - lo)
        if reserve(e, n + 10):
            return E_NO_MEMORY
        e.ptr -= n
        copy_bytes(e.ptr, c.values + lo, n)
        if kind == V_BYTES:
            put_varint(e, n)
    return OK


cdef inline int put_tag(Enc* e, uint64_t tag) noexcept nogil:
    if reserve(e, 10):
        return E_NO_MEMORY
    put_varint(e, tag)
    return OK


cdef int put_delimited(Enc* e, size_t used_before, uint64_t tag) noexcept nogil:
    """Length prefix and tag of the bytes written since `used_before`."""
    cdef size_t n = <size_t>(e.limit - e.ptr) - used_before
    if n > 0x7FFFFFFF:
        return E_TOO_LARGE
    if reserve(e, 20):
        return E_NO_MEMORY
    put_varint(e, n)
    put_varint(e, tag)
    return OK


cdef int fail(Enc* e, int status, int32_t col, int64_t index) noexcept nogil:
    e.err_col = col
    e.err_index = index
    return status


cdef int put_record(Enc* e, const EncodeEntry* en, const ArrowColumn* c, int64_t k) noexcept nogil:
    """One tagged value of field `en`: element k (logical) of array c."""
    cdef int status
    cdef size_t before
    cdef int32_t kind = en.kind
    if kind == V_MESSAGE:
        before = e.limit - e.ptr
        status = encode_child(e, en, k)
        if status:
            return status
        return put_delimited(e, before, en.tag)
    if kind == V_GROUP or kind == V_RAW_GROUP:
        status = put_tag(e, en.end_tag)
        if status:
            return status
        if kind == V_GROUP:
            status = encode_child(e, en, k)
        else:
            status = put_value(e, c, en, k + c.offset)
        if status:
            return status
        return put_tag(e, en.tag)
    status = put_value(e, c, en, k + c.offset)
    if status or kind == V_UNKNOWN:
        return status
    return put_tag(e, en.tag)


cdef inline void put_tag_of(Enc* e, const EncodeEntry* en) noexcept nogil:
    e.ptr = tag_at(e.ptr, en)


cdef inline int put_length_tag(Enc* e, size_t used_before, const EncodeEntry* en) noexcept nogil:
    """Length prefix and tag of the bytes written since `used_before`."""
    cdef size_t n = <size_t>(e.limit - e.ptr) - used_before
    if n > 0x7FFFFFFF:
        return E_TOO_LARGE
    if reserve_small(e):
        return E_NO_MEMORY
    e.ptr = tag_at(varint_at(e.ptr, n), en)
    return OK


cdef inline int put_varint_field(Enc* e, const EncodeEntry* en, uint64_t v) noexcept nogil:
    """A singular varint field's value and pre-encoded tag: OK or E_NO_MEMORY."""
    if reserve_small(e):
        return E_NO_MEMORY
    e.ptr = tag_at(varint_at(e.ptr, v), en)
    return OK


# ---- map entry order ------------------------------------------------------------------
#
# upb writes map entries sorted by key (its deterministic serialization): each map's
# entries are ordered here, as they are written, into a stack of scratch indices.

cdef inline bint before(int32_t keys, const ArrowColumn* kc, int64_t a, int64_t b) noexcept nogil:
    """Whether the entry with key slot a goes on the wire before the one with key slot b
    (physical slots), upb's order: integer keys descend as unsigned numbers of their width
    (-1 first, 0 last), bools descend, strings ascend bytewise except that a string comes
    after every longer string it is a prefix of ("ab", "a", "b", "")."""
    cdef int64_t alo, ahi, blo, bhi, n, i
    cdef int cmp
    cdef const int32_t* offs
    if keys == M_STRING and not kc.wide:
        # Map keys are short (names, ids): a byte loop to the first difference costs less
        # than a memcmp call and the general offset reads.
        offs = <const int32_t*>kc.offsets
        alo = offs[a]
        blo = offs[b]
        ahi = offs[a + 1] - alo
        bhi = offs[b + 1] - blo
        n = min(ahi, bhi)
        i = 0
        while i < n and kc.values[alo + i] == kc.values[blo + i]:
            i += 1
        if i < n:
            return kc.values[alo + i] < kc.values[blo + i]
        return ahi > bhi
    if keys == M_BOOL:
        return is_set(kc.values, a) > is_set(kc.values, b)
    if keys == M_U32:
        return (<const uint32_t*>kc.values)[a] > (<const uint32_t*>kc.values)[b]
    if keys == M_U64:
        return (<const uint64_t*>kc.values)[a] > (<const uint64_t*>kc.values)[b]
    span(kc, a, &alo, &ahi)
    span(kc, b, &blo, &bhi)
    n = min(ahi - alo, bhi - blo)
    cmp = memcmp(kc.values + alo, kc.values + blo, <size_t>n) if n > 0 else 0
    if cmp != 0:
        return cmp < 0
    return ahi - alo > bhi - blo


cdef void sort_entries(int32_t keys, const ArrowColumn* kc, int64_t* idx, int64_t* tmp,
                       int64_t n) noexcept nogil:
    """Logical entry indices idx[0:n] in wire order, stably (insertion sort for short maps,
    merge sort through tmp for long ones)."""
    cdef int64_t i, j, x, width, lo, mid, hi, a, b, o
    cdef int64_t off = kc.offset
    if n <= 16:
        for i in range(1, n):
            x = idx[i]
            j = i
            while j > 0 and before(keys, kc, x + off, idx[j - 1] + off):
                idx[j] = idx[j - 1]
                j -= 1
            idx[j] = x
        return
    width = 1
    while width < n:
        lo = 0
        while lo < n:
            mid = min(lo + width, n)
            hi = min(lo + 2 * width, n)
            a = lo
            b = mid
            o = lo
            while a < mid and b < hi:
                if before(keys, kc, idx[b] + off, idx[a] + off):
                    tmp[o] = idx[b]
                    b += 1
                else:
                    tmp[o] = idx[a]
                    a += 1
                o += 1
            while a < mid:
                tmp[o] = idx[a]
                a += 1
                o += 1
            while b < hi:
                tmp[o] = idx[b]
                b += 1
                o += 1
            lo = hi
        memcpy(idx, tmp, n * sizeof(int64_t))
        width *= 2


cdef int64_t scratch_push(Enc* e, int64_t n) noexcept nogil:
    """Room for n indices on the scratch stack: their position, or -1 (out of memory)."""
    cdef int64_t at = e.scratch_top
    cdef int64_t cap
    cdef int64_t* grown
    if at + n > e.scratch_cap:
        cap = max(e.scratch_cap * 2, at + n, 256)
        grown = <int64_t*>PyMem_RawRealloc(e.scratch, cap * sizeof(int64_t))
        if grown == NULL:
            return -1
        e.scratch = grown
        e.scratch_cap = cap
    e.scratch_top = at + n
    return at


cdef int put_map(Enc* e, const EncodeEntry* en, const ArrowColumn* ec, int64_t lo,
                 int64_t hi) noexcept nogil:
    """The entries [lo, hi) of one map, in key order (written last to first)."""
    cdef const EncodeNode* nd = &e.nodes[en.child]
    cdef const ArrowColumn* kc = &e.cols[e.entries[nd.first].col]
    cdef int64_t n = hi - lo, i, k, at
    cdef int status = OK
    cdef size_t before
    at = scratch_push(e, 2 * n)
    if at < 0:
        return E_NO_MEMORY
    for i in range(n):
        e.scratch[at + i] = lo + i
    sort_entries(en.aux, kc, e.scratch + at, e.scratch + at + n, n)
    i = n
    while i > 0:
        i -= 1
        k = e.scratch[at + i]    # (re-read: the stack moves when an inner map grows it)
        if is_null(ec, k + ec.offset):
            status = fail(e, E_NULL_ELEMENT, en.elem, k)
            break
        if ec.bad != NULL and ec.bad[k]:
            status = fail(e, E_BAD_VALUE, en.elem, k)
            break
        before = e.limit - e.ptr
        status = encode_child(e, en, k)
        if status:
            break
        status = put_length_tag(e, before, en)
        if status:
            break
    e.scratch_top = at
    return status


cdef int put_repeated(Enc* e, const EncodeEntry* en, const ArrowColumn* c, int64_t p) noexcept nogil:
    cdef int64_t lo, hi, j
    cdef int status
    cdef size_t before
    cdef const ArrowColumn* ec = &e.cols[en.elem]
    span(c, p, &lo, &hi)
    if lo == hi:
        return OK
    if en.aux != M_NONE and en.check == C_NONE and hi - lo > 1:
        return put_map(e, en, ec, lo, hi)
    if en.shape == S_PACKED:
        before = e.limit - e.ptr
        j = hi
        while j > lo:
            j -= 1
            if is_null(ec, j + ec.offset):
                return fail(e, E_NULL_ELEMENT, en.elem, j)
            if (en.check != C_NONE or ec.bad != NULL) and is_bad(e, en, ec, j):
                return fail(e, E_BAD_VALUE, en.elem, j)
            status = put_value(e, ec, en, j + ec.offset)
            if status:
                return status
        return put_delimited(e, before, en.tag)
    j = hi
    while j > lo:
        j -= 1
        if is_null(ec, j + ec.offset):
            return fail(e, E_NULL_ELEMENT, en.elem, j)
        if (en.check != C_NONE or ec.bad != NULL) and is_bad(e, en, ec, j):
            return fail(e, E_BAD_VALUE, en.elem, j)
        status = put_record(e, en, ec, j)
        if status:
            return status
    return OK


# ---- the record loop ------------------------------------------------------------------
#
# Each entry carries one derived `op` (Plan.__init__, from its kind, shape, presence, oneof
# and check): the common field shapes have a handler inline here, specialised so that a
# field costs one dispatch, one reserve and its stores; everything else (oneofs, checks
# other than UTF-8 and a temporal message's range, groups, packed temporal parts or closed
# enums, columns with a `bad` mask or 64-bit string offsets) takes the general path,
# `encode_field`. Maps have their own op; their entries go through the key sort (put_map)
# unless a map holds one. Packed fixed-width values are one copy of their Arrow slots.

cdef enum EncodeOp:
    O_GENERIC = 0
    O_BYTES = 1        # singular string / bytes (no check or UTF-8)
    O_INT32 = 2        # singular varints: int32 (sign-extended), uint32, 64-bit
    O_UINT32 = 3
    O_INT64 = 4
    O_FIXED32 = 5      # singular fixed-width values
    O_FIXED64 = 6
    O_BOOL = 7
    O_MESSAGE = 8      # singular sub-message
    O_REP_BYTES = 9    # repeated string / bytes (not packed, not a map)
    O_REP_MESSAGE = 10 # repeated sub-message (not a map)
    O_TIME = 11        # singular part of a temporal slot (a Timestamp's seconds, ...)
    O_MAP = 12         # map: entries as sub-messages, a lone entry without the key sort
    O_PACKED = 13      # packed integers, bools, fixed-width values (no check)


cdef int encode_field(Enc* e, const EncodeEntry* en, const ArrowColumn* c, int64_t k,
                      uint64_t* oneofs) noexcept nogil:
    """The general path: field `en` of message k, its slot valid."""
    cdef int64_t p = k + c.offset
    cdef uint64_t bit
    if en.shape != S_SINGULAR:
        return put_repeated(e, en, c, p)
    if (en.check != C_NONE or c.bad != NULL) and is_bad(e, en, c, k):
        return fail(e, E_BAD_VALUE, en.col, k)
    if en.presence == P_IMPLICIT and is_zero(c, en, p):
        return OK
    if en.oneof:
        bit = (<uint64_t>1) << ((en.oneof - 1) & 63)
        if oneofs[0] & bit:
            return fail(e, E_ONEOF, en.col, k)
        oneofs[0] |= bit
    return put_record(e, en, c, k)


cdef int put_packed(Enc* e, const EncodeEntry* en, const ArrowColumn* ec, int64_t lo,
                    int64_t hi) noexcept nogil:
    """A packed field's elements [lo, hi) (logical, none null), their length and tag.
    Fixed-width elements are Arrow's little-endian slots as they are: one copy."""
    cdef int64_t j = hi + ec.offset, end = lo + ec.offset
    cdef int32_t kind = en.kind
    cdef size_t n, width, before = e.limit - e.ptr
    if kind == V_FIXED32 or kind == V_FIXED64:
        width = 4 if kind == V_FIXED32 else 8
        n = <size_t>(hi - lo) * width
        if n > 0x7FFFFFFF:
            return E_TOO_LARGE
        if reserve(e, n + 20):
            return E_NO_MEMORY
        e.ptr -= n
        memcpy(e.ptr, ec.values + end * <int64_t>width, n)
    else:
        while j > end:
            j -= 1
            if reserve(e, 10):
                return E_NO_MEMORY
            if kind == V_INT32:
                put_varint(e, <uint64_t><int64_t>(<const int32_t*>ec.values)[j])
            elif kind == V_UINT32:
                put_varint(e, (<const uint32_t*>ec.values)[j])
            elif kind == V_INT64:
                put_varint(e, (<const uint64_t*>ec.values)[j])
            elif kind == V_SINT32:
                put_varint(e, zigzag32_of((<const int32_t*>ec.values)[j]))
            elif kind == V_SINT64:
                put_varint(e, zigzag64_of((<const int64_t*>ec.values)[j]))
            else:  # V_BOOL
                put_varint(e, is_set(ec.values, j))
        n = <size_t>(e.limit - e.ptr) - before
        if n > 0x7FFFFFFF:
            return E_TOO_LARGE
        if reserve(e, 20):
            return E_NO_MEMORY
    put_varint(e, n)
    put_tag_of(e, en)
    return OK


cdef inline int encode_child(Enc* e, const EncodeEntry* en, int64_t k) noexcept nogil:
    """Message k of the sub-message, group or map entry node of `en`."""
    return encode_message(e, <const EncodeEntry*>(<const uint8_t*>en + en.child_at),
                          <const EncodeEntry*>(<const uint8_t*>en + en.child_end_at), k)


cdef int encode_message(Enc* e, const EncodeEntry* first, const EncodeEntry* en,
                        int64_t k) noexcept nogil:
    """Message k (logical index of the node's arrays): its fields, entries [first, en),
    last to first. (The node's entries are given, not its index: from the parent's entry,
    child_at and child_end_at, without the node's two loads and multiplies a call.)"""
    cdef const uint8_t* cols = <const uint8_t*>e.cols
    cdef const ArrowColumn* c
    cdef const ArrowColumn* ec
    cdef int64_t p, q, lo, hi, j, slo
    cdef uint64_t oneofs = 0, v
    cdef uint32_t v32
    cdef int status
    cdef uint8_t op
    cdef size_t n, before
    cdef const int32_t* offs
    while en > first:
        en -= 1
        c = <const ArrowColumn*>(cols + en.col_at)
        p = k + c.offset
        if is_null(c, p):
            if en.presence == P_ALWAYS:
                return fail(e, E_NULL_ENTRY, en.col, k)
            continue
        op = en.op       # (the call's: O_GENERIC where a column has a bad mask or is wide)
        if op == O_GENERIC:
            status = encode_field(e, en, c, k, &oneofs)
            if status:
                return status
        elif op == O_BYTES:
            lo = (<const int32_t*>c.offsets)[p]
            n = <size_t>((<const int32_t*>c.offsets)[p + 1] - lo)
            if n == 0 and en.presence == P_IMPLICIT:
                continue
            status = put_string_field(e, en, c.values + lo, n, en.check == C_UTF8)
            if status:
                return fail(e, status, en.col, k) if status == E_BAD_VALUE else status
        elif op == O_INT32:
            # (one case per width: a second test of op inside a shared case cost 2-4
            # instructions a field)
            v = <uint64_t><int64_t>(<const int32_t*>c.values)[p]
            if v == 0 and en.presence == P_IMPLICIT:
                continue
            if put_varint_field(e, en, v):
                return E_NO_MEMORY
        elif op == O_UINT32:
            v = (<const uint32_t*>c.values)[p]
            if v == 0 and en.presence == P_IMPLICIT:
                continue
            if put_varint_field(e, en, v):
                return E_NO_MEMORY
        elif op == O_INT64:
            v = (<const uint64_t*>c.values)[p]
            if v == 0 and en.presence == P_IMPLICIT:
                continue
            if put_varint_field(e, en, v):
                return E_NO_MEMORY
        elif op == O_FIXED64:
            memcpy(&v, c.values + 8 * p, 8)
            if v == 0 and en.presence == P_IMPLICIT:
                continue
            if reserve_small(e):
                return E_NO_MEMORY
            memcpy(e.ptr - 8, &v, 8)
            e.ptr = tag_at(e.ptr - 8, en)
        elif op == O_FIXED32:
            memcpy(&v32, c.values + 4 * p, 4)
            if v32 == 0 and en.presence == P_IMPLICIT:
                continue
            if reserve_small(e):
                return E_NO_MEMORY
            memcpy(e.ptr - 4, &v32, 4)
            e.ptr = tag_at(e.ptr - 4, en)
        elif op == O_BOOL:
            v = is_set(c.values, p)
            if v == 0 and en.presence == P_IMPLICIT:
                continue
            if reserve_small(e):
                return E_NO_MEMORY
            (e.ptr - 1)[0] = <uint8_t>v
            e.ptr = tag_at(e.ptr - 1, en)
        elif op == O_TIME:
            v = <uint64_t>time_part(c, en.aux, en.scale, p)
            if v == 0 and en.presence == P_IMPLICIT:
                continue
            if put_varint_field(e, en, v):
                return E_NO_MEMORY
        elif op == O_MESSAGE:
            # (a Timestamp or Duration read from one temporal slot is range-checked first)
            if en.check != C_NONE and is_bad(e, en, c, k):
                return fail(e, E_BAD_VALUE, en.col, k)
            before = e.limit - e.ptr
            status = encode_child(e, en, k)
            if status:
                return status
            status = put_length_tag(e, before, en)
            if status:
                return status
        elif op == O_MAP:
            ec = <const ArrowColumn*>(cols + en.elem_at)
            span(c, p, &lo, &hi)
            if hi - lo == 1:
                if ec.validity != NULL and not is_set(ec.validity, lo + ec.offset):
                    return fail(e, E_NULL_ELEMENT, en.elem, lo)
                before = e.limit - e.ptr
                status = encode_child(e, en, lo)
                if status:
                    return status
                status = put_length_tag(e, before, en)
                if status:
                    return status
            elif hi > lo:
                status = put_map(e, en, ec, lo, hi)
                if status:
                    return status
        elif op == O_PACKED:
            ec = <const ArrowColumn*>(cols + en.elem_at)
            span(c, p, &lo, &hi)
            if hi == lo:
                continue
            if ec.validity != NULL:
                j = hi
                while j > lo:
                    j -= 1
                    if not is_set(ec.validity, j + ec.offset):
                        return fail(e, E_NULL_ELEMENT, en.elem, j)
            status = put_packed(e, en, ec, lo, hi)
            if status:
                return status
        elif op == O_REP_BYTES:
            ec = <const ArrowColumn*>(cols + en.elem_at)
            span(c, p, &lo, &hi)
            j = hi
            offs = <const int32_t*>ec.offsets
            while j > lo:
                j -= 1
                q = j + ec.offset
                if ec.validity != NULL and not is_set(ec.validity, q):
                    return fail(e, E_NULL_ELEMENT, en.elem, j)
                slo = offs[q]
                n = <size_t>(offs[q + 1] - slo)
                status = put_string_field(e, en, ec.values + slo, n, en.check == C_UTF8)
                if status:
                    return fail(e, status, en.elem, j) if status == E_BAD_VALUE else status
        elif op == O_REP_MESSAGE:
            ec = <const ArrowColumn*>(cols + en.elem_at)
            span(c, p, &lo, &hi)
            j = hi
            while j > lo:
                j -= 1
                if ec.validity != NULL and not is_set(ec.validity, j + ec.offset):
                    return fail(e, E_NULL_ELEMENT, en.elem, j)
                before = e.limit - e.ptr
                status = encode_child(e, en, j)
                if status:
                    return status
                status = put_length_tag(e, before, en)
                if status:
                    return status
        else:
            # (ops are O_GENERIC..O_PACKED, set by op_of / call_op: the jump table needs
            # no range test)
            wa_unreachable()
    return OK


cdef uint8_t op_of(const EncodeEntry* en) noexcept:
    """The entry's EncodeOp (O_GENERIC unless a specialised handler encodes it as the
    general path would)."""
    cdef int32_t kind = en.kind
    if en.tag_len == 0 or en.oneof != 0:
        return O_GENERIC
    if en.shape == S_SINGULAR:
        if kind == V_BYTES and (en.check == C_NONE or en.check == C_UTF8):
            return O_BYTES
        if kind == V_MESSAGE:
            return O_MESSAGE
        if en.check != C_NONE:
            return O_GENERIC
        if kind == V_TIME:
            return O_TIME
        if kind == V_INT32:
            return O_INT32
        if kind == V_UINT32:
            return O_UINT32
        if kind == V_INT64:
            return O_INT64
        if kind == V_FIXED32:
            return O_FIXED32
        if kind == V_FIXED64:
            return O_FIXED64
        if kind == V_BOOL:
            return O_BOOL
        return O_GENERIC
    if en.shape == S_PACKED:
        if en.check == C_NONE and (kind == V_INT32 or kind == V_UINT32 or kind == V_INT64
                                   or kind == V_SINT32 or kind == V_SINT64 or kind == V_FIXED32
                                   or kind == V_FIXED64 or kind == V_BOOL):
            return O_PACKED
        return O_GENERIC
    if en.shape != S_REPEATED:
        return O_GENERIC
    if en.aux != M_NONE:
        # (aux is the key order of a map, or a closed enum's set / a temporal width when
        # checked: Plan validates a map's as M_BOOL..M_STRING with kind V_MESSAGE)
        return O_MAP if kind == V_MESSAGE and en.check == C_NONE else O_GENERIC
    if kind == V_BYTES and (en.check == C_NONE or en.check == C_UTF8):
        return O_REP_BYTES
    if kind == V_MESSAGE and en.check == C_NONE:
        return O_REP_MESSAGE
    return O_GENERIC


cdef uint8_t call_op(const EncodeEntry* en, const ArrowColumn* cols) noexcept nogil:
    """The entry's op for one call's columns: O_GENERIC where a column holds a `bad` mask
    or 64-bit string offsets (the specialised handlers read neither), decided once a call
    so that the record loop tests neither per field."""
    cdef uint8_t op = en.op
    cdef const ArrowColumn* c = &cols[en.col]
    cdef const ArrowColumn* ec
    if op == O_GENERIC or c.bad != NULL or (op == O_BYTES and c.wide):
        return O_GENERIC
    if op == O_MAP or op == O_REP_BYTES or op == O_REP_MESSAGE or op == O_PACKED:
        ec = &cols[en.elem]
        if ec.bad != NULL or (op == O_REP_BYTES and ec.wide):
            return O_GENERIC
    return op


cdef void derive_entry(EncodeEntry* en) noexcept:
    """The fields of an entry derived from its row: the pre-encoded tag and the op."""
    cdef uint64_t t = en.tag
    cdef uint64_t packed = 0
    cdef int n = 0
    en.tag_bytes = 0
    en.tag_len = 0
    if varint_size(t) <= 8:
        while True:
            packed |= (<uint64_t>((t & 0x7F) | (0x80 if t >= 0x80 else 0))) << (8 * n)
            n += 1
            t >>= 7
            if t == 0:
                break
        en.tag_bytes = packed << (8 * (8 - n)) if n < 8 else packed
        en.tag_len = <uint8_t>n
    en.op = op_of(en)
    # (Plan bounds the columns: these byte offsets fit in 32 bits)
    en.col_at = <int32_t>(en.col * <int64_t>sizeof(ArrowColumn))
    en.elem_at = <int32_t>(en.elem * <int64_t>sizeof(ArrowColumn)) if en.elem >= 0 else 0


# ---- prefetching ----------------------------------------------------------------------
#
# A row reads one slot of each of its ~100 arrays (values, offsets, string bytes, bits):
# too many streams for the hardware prefetcher, so at 50k rows most new cache lines a row
# touches miss (the loads of values, string offsets and bytes were ~60% of the samples).
# Rows are encoded in blocks; while a block is written, the cache lines the next block
# will read (found through the list offsets, as the encoder will) are requested a few per
# row, so that the fetches overlap the work instead of being issued in one burst that the
# memory system would mostly drop.

cdef enum:
    BLOCK = 256         # rows a block at most: the walk of every array runs once a block
    MIN_BLOCK = 16      # ... and at least, when a block's lines pass MAX_LINES (wide rows)


cdef void list_col(Lines* ls, const ArrowColumn* c, const EncodeEntry* en, int64_t a,
                   int64_t b) noexcept nogil:
    """The lines of slots [a, b) (logical) of one array, as the encoder reads them."""
    cdef int64_t pa = a + c.offset, pb = b + c.offset
    cdef int64_t w = 8 if c.wide else 4
    cdef int32_t kind = en.kind
    if c.validity != NULL:
        add_lines(ls, c.validity, pa >> 3, (pb + 7) >> 3)
    if kind == V_INT32 or kind == V_UINT32 or kind == V_SINT32 or kind == V_FIXED32:
        add_lines(ls, c.values, pa * 4, pb * 4)
    elif kind == V_INT64 or kind == V_SINT64 or kind == V_FIXED64:
        add_lines(ls, c.values, pa * 8, pb * 8)
    elif kind == V_BOOL:
        add_lines(ls, c.values, pa >> 3, (pb + 7) >> 3)
    elif kind == V_TIME:
        w = (en.aux >> 8)
        add_lines(ls, c.values, pa * w, pb * w)
    elif kind == V_BYTES or kind == V_UNKNOWN or kind == V_RAW_GROUP:
        add_lines(ls, c.offsets, pa * w, (pb + 1) * w)
        add_lines(ls, c.values, offset_at(c, pa), offset_at(c, pb))


cdef void list_node(Lines* ls, const Enc* e, int32_t node, int64_t a, int64_t b,
                    int depth) noexcept nogil:
    """The lines every array of `node` is read at for its messages [a, b)."""
    cdef const EncodeNode* nd = &e.nodes[node]
    cdef const EncodeEntry* en
    cdef const ArrowColumn* c
    cdef int32_t i
    cdef int64_t ea, eb, w
    if b <= a or depth > 16:
        return
    for i in range(nd.first, nd.first + nd.n_entries):
        en = &e.entries[i]
        if e.absent[en.col]:
            continue
        c = &e.cols[en.col]
        if en.shape == S_SINGULAR:
            list_col(ls, c, en, a, b)
            if en.kind == V_MESSAGE or en.kind == V_GROUP:
                list_node(ls, e, en.child, a, b, depth + 1)
            continue
        w = 8 if c.wide else 4
        if c.validity != NULL:
            add_lines(ls, c.validity, (a + c.offset) >> 3, (b + c.offset + 7) >> 3)
        add_lines(ls, c.offsets, (a + c.offset) * w, (b + c.offset + 1) * w)
        if e.absent[en.elem]:
            continue
        ea = offset_at(c, a + c.offset)
        eb = offset_at(c, b + c.offset)
        list_col(ls, &e.cols[en.elem], en, ea, eb)
        if en.kind == V_MESSAGE or en.kind == V_GROUP:
            list_node(ls, e, en.child, ea, eb, depth + 1)


# ---- binding a batch ------------------------------------------------------------------


cdef inline bint empty(const ArrowArray* a) noexcept nogil:
    """No slot of `a` holds a value (null_count is over its own slots, which hold all that
    is read of it and of its children: a struct's children at its slots, a list's elements
    within its spans)."""
    return a.length == 0 or a.null_count == a.length


cdef enum:
    IMPLIED_MIN = 32    # valid struct slots at least, for bind's `implied` comparison
cdef bint nulls_within(const uint8_t* child, int64_t co, const uint8_t* parent, int64_t po,
                       int64_t n) noexcept nogil:
    """Whether each of n slots that the parent's bitmap (from bit po) says valid is valid
    in the child's (from bit co): the child has no null of its own there. (A struct's slot
    q is its child's q + the child's offset: the struct's offset applies to both.)"""
    cdef int64_t i, nb
    cdef uint64_t a, b
    cdef uint8_t mask
    if (co & 7) == 0 and (po & 7) == 0:
        child += co >> 3
        parent += po >> 3
        nb = n >> 3
        i = 0
        while i + 8 <= nb:
            memcpy(&a, parent + i, 8)
            memcpy(&b, child + i, 8)
            if a & ~b:
                return False
            i += 8
        while i < nb:
            if parent[i] & ~child[i]:
                return False
            i += 1
        if n & 7:
            mask = <uint8_t>((1 << (n & 7)) - 1)
            if parent[nb] & ~child[nb] & mask:
                return False
        return True
    for i in range(n):
        if is_set(parent, i + po) and not is_set(child, i + co):
            return False
    return True


cdef int64_t bind(const EncodeSpec* specs, int64_t n_specs, const ArrowArray* root,
                  const ArrowArray** arrays, ArrowColumn* cols, uint8_t* absent,
                  bint implied) noexcept nogil:
    """Every spec's array of the exported batch `root` into cols (given specs are left to
    the caller): -1, or the first spec whose array is not shaped as the spec says.

    A spec under an array with no value in any slot (`empty`; for a list's element array,
    with no slot) is marked absent and its array is not looked up: the record loop reads a struct's children only at its valid
    slots (encode_message skips a null entry before its sub-message), a list's elements only
    within the spans of its valid slots, and the prefetch listing skips absent specs. So an
    export may leave such arrays' children out (the accelerator's export does: the
    children of subtrees null in every row are most of a wide plan's nodes).

    `implied`: a struct child whose nulls all lie where its struct is null (the decoder's
    output: a sub-message's fields are null wherever it is) is bound without its validity.
    The record loop reads a struct's children only at the struct's valid slots, where such
    a child is never null, so its bit test per field goes. (Compared with the struct's own
    bitmap, `arrays[parent]`'s: its column may have lost its validity the same way.) Only
    under structs with IMPLIED_MIN valid slots or more: the comparison costs a call and a
    word a 64 slots, a bit test saved costs ~4 instructions a valid slot; a wide plan's
    request-sized batches hold thousands of sparse structs where it would not pay."""
    cdef int64_t i, base
    cdef const EncodeSpec* sp
    cdef const ArrowArray* parent
    cdef const ArrowArray* a
    cdef ArrowColumn* c
    cdef int64_t want
    for i in range(n_specs):
        sp = &specs[i]
        c = &cols[i]
        arrays[i] = NULL
        absent[i] = 0
        # (a list's elements all null but some listed are not `empty` here: put_map reads
        # the keys of a map's entries before it finds them null, so they are bound)
        if sp.access != A_COLUMN and (absent[sp.parent] or (
                arrays[sp.parent] != NULL and (
                    arrays[sp.parent].length == 0
                    or (specs[sp.parent].access != A_VALUES and empty(arrays[sp.parent]))))):
            # (a given spec under an empty array is not absent: it is read at that array's
            # slots, as its null validity, see Plan._bind)
            if sp.access != A_GIVEN or absent[sp.parent]:
                absent[i] = 1
                c.validity = NULL
                c.offset = 0
                c.values = NULL
                c.offsets = NULL
                c.bad = NULL
                c.wide = 0
                continue
        if sp.access == A_GIVEN:
            continue
        if sp.access == A_COLUMN:
            parent = root
            base = root.offset
        else:
            parent = arrays[sp.parent]
            base = cols[sp.parent].offset if sp.access == A_FIELD else 0
        if parent == NULL or sp.child >= parent.n_children:
            return i
        a = parent.children[sp.child]
        want = 1 if sp.layout == L_STRUCT else (3 if sp.layout == L_BINARY else 2)
        if a == NULL or a.n_buffers != want or (sp.layout == L_DICTIONARY and a.dictionary == NULL):
            return i
        arrays[i] = a
        c.offset = base + a.offset
        c.validity = <const uint8_t*>a.buffers[0] if a.null_count != 0 else NULL
        if (implied and sp.access == A_FIELD and c.validity != NULL
                and parent.null_count != 0 and parent.buffers[0] != NULL
                and parent.length - parent.null_count >= IMPLIED_MIN
                and nulls_within(c.validity, parent.offset + a.offset,
                                 <const uint8_t*>parent.buffers[0], parent.offset,
                                 parent.length)):
            c.validity = NULL
        c.values = NULL
        c.offsets = NULL
        c.bad = NULL
        c.wide = sp.wide
        if sp.layout == L_FIXED or sp.layout == L_BOOL:
            c.values = <const uint8_t*>a.buffers[1]
        elif sp.layout == L_BINARY:
            c.offsets = <const uint8_t*>a.buffers[1]
            c.values = <const uint8_t*>a.buffers[2]
        elif sp.layout == L_LIST:
            c.offsets = <const uint8_t*>a.buffers[1]
    return -1


cdef class Plan:
    """The encoder tables of one plan (specs, entries, nodes, closed enums), loaded once."""

    cdef EncodeSpec* specs
    cdef EncodeEntry* entries
    cdef EncodeNode* nodes
    cdef EnumSet* enum_sets
    cdef int32_t* enum_values
    cdef readonly Py_ssize_t n_specs, n_entries, n_nodes, n_enum_sets

    def __cinit__(self):
        self.specs = NULL
        self.entries = NULL
        self.nodes = NULL
        self.enum_sets = NULL
        self.enum_values = NULL

    def __dealloc__(self):
        PyMem_RawFree(self.specs)
        PyMem_RawFree(self.entries)
        PyMem_RawFree(self.nodes)
        PyMem_RawFree(self.enum_sets)
        PyMem_RawFree(self.enum_values)

    def __init__(self, const int64_t[:, ::1] specs, const int64_t[:, ::1] entries,
                 const int64_t[:, ::1] nodes, enum_sets=()):
        """The matrices (layout.EncodeSpec / EncodeEntry / EncodeNode rows), checked, and the
        closed enums' declared numbers (one sorted sequence per set)."""
        if (specs.shape[1] != SPEC_WIDTH or entries.shape[1] != ENTRY_WIDTH
                or nodes.shape[1] != NODE_WIDTH):
            raise ValueError("encode: malformed tables")
        if nodes.shape[0] < 1:
            raise ValueError("encode: no root node")
        cdef Py_ssize_t i, n_cols = specs.shape[0]
        if n_cols > 0x7FFFFFFF // <Py_ssize_t>sizeof(ArrowColumn):
            raise ValueError("encode: too many arrays")
        if entries.shape[0] > 0x7FFFFFFF // <Py_ssize_t>sizeof(EncodeEntry):
            raise ValueError("encode: too many entries")
        cdef EncodeEntry* en
        cdef const EncodeNode* child
        self.n_specs = specs.shape[0]
        self.n_entries = entries.shape[0]
        self.n_nodes = nodes.shape[0]
        self.specs = <EncodeSpec*>PyMem_RawCalloc(max(self.n_specs, 1), sizeof(EncodeSpec))
        self.entries = <EncodeEntry*>PyMem_RawCalloc(max(self.n_entries, 1), sizeof(EncodeEntry))
        self.nodes = <EncodeNode*>PyMem_RawCalloc(self.n_nodes, sizeof(EncodeNode))
        if self.specs == NULL or self.entries == NULL or self.nodes == NULL:
            raise MemoryError()
        for i in range(self.n_specs):
            self.specs[i].parent = <int32_t>specs[i, S_PARENT]
            self.specs[i].access = <int32_t>specs[i, S_ACCESS]
            self.specs[i].child = <int32_t>specs[i, S_CHILD]
            self.specs[i].layout = <int32_t>specs[i, S_LAYOUT]
            self.specs[i].wide = <int32_t>specs[i, S_WIDE]
            if not (A_COLUMN <= self.specs[i].access <= A_GIVEN
                    and L_STRUCT <= self.specs[i].layout <= L_DICTIONARY
                    and self.specs[i].child >= 0) or (
                    self.specs[i].access != A_COLUMN
                    and not (0 <= self.specs[i].parent < i)):
                raise ValueError(f"encode: spec {i} is malformed or before its parent")
        cdef list sets = [tuple(s) for s in enum_sets]
        for i in range(self.n_entries):
            en = &self.entries[i]
            en.tag = <uint64_t>entries[i, EN_TAG]
            en.end_tag = <uint64_t>entries[i, EN_END_TAG]
            en.kind = <int32_t>entries[i, EN_KIND]
            en.shape = <int32_t>entries[i, EN_SHAPE]
            en.presence = <int32_t>entries[i, EN_PRESENCE]
            en.col = <int32_t>entries[i, EN_COL]
            en.elem = <int32_t>entries[i, EN_ELEM]
            en.child = <int32_t>entries[i, EN_CHILD]
            en.oneof = <int32_t>entries[i, EN_ONEOF]
            en.check = <int32_t>entries[i, EN_CHECK]
            en.aux = <int32_t>entries[i, EN_AUX]
            en.scale = entries[i, EN_SCALE]
            derive_entry(en)
            if not (0 <= en.col < n_cols) or (
                en.shape != S_SINGULAR and not (0 <= en.elem < n_cols)
            ) or ((en.kind == V_MESSAGE or en.kind == V_GROUP)
                  and not (0 <= en.child < self.n_nodes)):
                raise ValueError("encode: an entry points outside the tables")
            if (en.kind == V_TIME or en.check == C_TIMESTAMP or en.check == C_DURATION) and not (
                    en.scale > 0 and 1000000000 % en.scale == 0
                    and (en.aux >> 8 if en.kind == V_TIME else en.aux) in (4, 8)
                    and (en.kind != V_TIME or T_SECONDS <= (en.aux & 0xFF) <= T_TOD_NANOS)):
                raise ValueError("encode: a temporal entry without its unit or width")
            if en.check == C_ENUM and not (0 <= en.aux < len(sets)):
                raise ValueError("encode: a closed enum entry without its set")
            if en.shape != S_SINGULAR and en.aux != M_NONE and en.check == C_NONE and not (
                    M_BOOL <= en.aux <= M_STRING and en.kind == V_MESSAGE):
                raise ValueError("encode: a map entry without its key order")
        for i in range(self.n_nodes):
            self.nodes[i].first = <int32_t>nodes[i, N_FIRST]
            self.nodes[i].n_entries = <int32_t>nodes[i, N_ENTRIES]
            if self.nodes[i].first < 0 or self.nodes[i].n_entries < 0 or (
                    self.nodes[i].first + self.nodes[i].n_entries > self.n_entries):
                raise ValueError("encode: a node points outside the tables")
        for i in range(self.n_entries):
            en = &self.entries[i]
            if en.shape != S_SINGULAR and en.aux != M_NONE and en.check == C_NONE and (
                    self.nodes[en.child].n_entries < 1):
                raise ValueError("encode: a map entry node without its key")
            if en.kind == V_MESSAGE or en.kind == V_GROUP:
                # (bounded above: byte offsets between entries fit in 32 bits)
                child = &self.nodes[en.child]
                en.child_at = <int32_t>((child.first - i) * <int64_t>sizeof(EncodeEntry))
                en.child_end_at = <int32_t>(
                    (child.first + child.n_entries - i) * <int64_t>sizeof(EncodeEntry))
        self._set_enums(sets)

    cdef _set_enums(self, list sets):
        cdef int64_t v
        cdef int32_t at = 0
        large = [[v for v in values if not 0 <= v < 64] for values in sets]
        self.n_enum_sets = len(sets)
        self.enum_sets = <EnumSet*>PyMem_RawCalloc(max(len(sets), 1), sizeof(EnumSet))
        self.enum_values = <int32_t*>PyMem_RawCalloc(max(sum(map(len, large)), 1), sizeof(int32_t))
        if self.enum_sets == NULL or self.enum_values == NULL:
            raise MemoryError()
        for i, values in enumerate(sets):
            if list(values) != sorted(set(values)) or not all(-2**31 <= v < 2**31 for v in values):
                raise ValueError(f"enum set {i}: distinct sorted int32 values")
            self.enum_sets[i].first = at
            self.enum_sets[i].count = len(large[i])
            for v in values:
                if 0 <= v < 64:
                    self.enum_sets[i].small |= (<uint64_t>1) << v
            for v in large[i]:
                self.enum_values[at] = v
                at += 1

    def tables(self):
        """(specs, entries, nodes) as the encoder reads them, read back from its structs as
        layout records: what tests/test_layout.py checks against what was built."""
        cdef Py_ssize_t i
        cdef EncodeEntry* en
        return (
            [layout.EncodeSpec(
                parent=self.specs[i].parent, access=self.specs[i].access,
                child=self.specs[i].child, layout=self.specs[i].layout,
                wide=self.specs[i].wide)
             for i in range(self.n_specs)],
            [layout.EncodeEntry(
                tag=self.entries[i].tag, end_tag=self.entries[i].end_tag,
                kind=self.entries[i].kind, shape=self.entries[i].shape,
                presence=self.entries[i].presence, col=self.entries[i].col,
                elem=self.entries[i].elem, child=self.entries[i].child,
                oneof=self.entries[i].oneof, check=self.entries[i].check,
                aux=self.entries[i].aux, scale=self.entries[i].scale)
             for i in range(self.n_entries)],
            [layout.EncodeNode(first=self.nodes[i].first, n_entries=self.nodes[i].n_entries)
             for i in range(self.n_nodes)],
        )

    cdef ArrowColumn* _bind(self, ArrowArray* root, derive, uint8_t* absent,
                           bint implied=False) except NULL:
        """The columns of one exported batch (the caller frees them and releases root), and
        which specs are absent (`bind`; `absent` holds n_specs bytes).

        A given spec's column is asked of `derive(spec, present)`, which returns a
        layout.EncodeColumn, or None when `present` is False (its parent holds no value in
        this batch): the column is then the parent's validity alone, never read past it.
        An absent given spec (under a subtree with no value) is not asked for. `implied`:
        drop the validity of struct children whose nulls are their struct's (see bind;
        for encoding only: `columns` shows the batch's buffers).
        """
        cdef ArrowColumn* cols = <ArrowColumn*>PyMem_RawCalloc(max(self.n_specs, 1),
                                                               sizeof(ArrowColumn))
        cdef const ArrowArray** arrays = <const ArrowArray**>PyMem_RawMalloc(
            max(self.n_specs, 1) * sizeof(ArrowArray*))
        cdef int64_t bad, i
        cdef const ArrowArray* source
        cdef bint present
        if cols == NULL or arrays == NULL:
            PyMem_RawFree(cols)
            PyMem_RawFree(arrays)
            raise MemoryError()
        try:
            with nogil:
                bad = bind(self.specs, self.n_specs, root, arrays, cols, absent, implied)
            if bad >= 0:
                raise ValueError(f"encode: the batch's array {bad} is not shaped as the plan says")
            for i in range(self.n_specs):
                if self.specs[i].access != A_GIVEN or absent[i]:
                    continue
                source = arrays[self.specs[i].parent]
                present = source == NULL or (source.length > 0 and source.null_count != source.length)
                column = derive(i, present)
                if column is None:
                    if present:
                        raise ValueError(f"encode: no column given for spec {i}")
                    cols[i] = cols[self.specs[i].parent]
                    cols[i].values = NULL
                    cols[i].offsets = NULL
                    cols[i].bad = NULL
                    continue
                cols[i].validity = <const uint8_t*><uintptr_t>column[C_VALIDITY]
                cols[i].offset = column[C_OFFSET]
                cols[i].values = <const uint8_t*><uintptr_t>column[C_VALUES]
                cols[i].offsets = <const uint8_t*><uintptr_t>column[C_OFFSETS]
                cols[i].wide = <int32_t>column[C_WIDE]
                cols[i].bad = <const uint8_t*><uintptr_t>column[C_BAD]
        except BaseException:
            PyMem_RawFree(cols)
            raise
        finally:
            PyMem_RawFree(arrays)
        return cols

    def columns(self, batch, derive, export=None):
        """The columns one batch binds (layout.EncodeColumn records; addresses into the
        batch's buffers, valid while it lives; an absent spec's all zero): what
        tests/test_layout.py checks. `export` as for encode."""
        cdef ArrowArray* root = <ArrowArray*>PyMem_RawCalloc(1, sizeof(ArrowArray))
        cdef ArrowColumn* cols = NULL
        cdef uint8_t* absent = <uint8_t*>PyMem_RawCalloc(max(self.n_specs, 1), 1)
        cdef Py_ssize_t i
        if root == NULL or absent == NULL:
            PyMem_RawFree(root)
            PyMem_RawFree(absent)
            raise MemoryError()
        try:
            if export is None:
                batch._export_to_c(<uintptr_t>root)
            else:
                export(batch, <uintptr_t>root)
            cols = self._bind(root, derive, absent)
            return [layout.EncodeColumn(
                validity=<uintptr_t>cols[i].validity, offset=cols[i].offset,
                values=<uintptr_t>cols[i].values, offsets=<uintptr_t>cols[i].offsets,
                wide=cols[i].wide, bad=<uintptr_t>cols[i].bad)
                for i in range(self.n_specs)]
        finally:
            PyMem_RawFree(cols)
            PyMem_RawFree(absent)
            if root.release != NULL:
                root.release(root)
            PyMem_RawFree(root)

    def encode(self, batch, int64_t n_rows, derive, int64_t capacity=0, export=None):
        """Encode rows 0..n_rows-1 of `batch` (a RecordBatch of the plan's schema, n_rows
        long); given specs' columns from `derive` (see _bind). `export(batch, address)`
        writes the batch as a struct ArrowArray at address (default: pyarrow's
        `_export_to_c`; it may leave out the children of arrays with no value: see bind).

        Returns (status, error column, error logical index, data, start, offsets, wide): the
        serialized rows are data[start:], row r at offsets[r]..offsets[r + 1] (int32, or int64
        when `wide`). On failure (status != 0) data and offsets are None.
        """
        if n_rows < 0:
            raise ValueError("encode: negative row count")
        cdef ArrowArray* root = <ArrowArray*>PyMem_RawCalloc(1, sizeof(ArrowArray))
        if root == NULL:
            raise MemoryError()
        cdef ArrowColumn* cols = NULL
        cdef uint8_t* absent = <uint8_t*>PyMem_RawCalloc(max(self.n_specs, 1), 1)
        if absent == NULL:
            PyMem_RawFree(root)
            raise MemoryError()
        try:
            if export is None:
                batch._export_to_c(<uintptr_t>root)
            else:
                export(batch, <uintptr_t>root)
            if root.length != n_rows:
                raise ValueError("encode: the batch does not hold n_rows rows")
            cols = self._bind(root, derive, absent, True)
            return self._run(cols, absent, n_rows, capacity)
        finally:
            PyMem_RawFree(cols)
            PyMem_RawFree(absent)
            if root.release != NULL:
                root.release(root)
            PyMem_RawFree(root)

    cdef _run(self, const ArrowColumn* cols, const uint8_t* absent, int64_t n_rows,
              int64_t capacity):
        cdef int64_t used_allocated
        cdef int64_t* used = <int64_t*>pool_alloc((n_rows + 1) * sizeof(int64_t), False,
                                                  &used_allocated)
        if used == NULL:
            raise MemoryError()
        # The call's entries: the plan's, unless a column holds a `bad` mask or 64-bit
        # offsets (rare: large types, values Python found unencodable); then a copy whose
        # ops are specialised to this batch's columns (call_op).
        cdef int64_t i
        cdef EncodeEntry* entries = NULL
        for i in range(self.n_specs):
            if cols[i].bad != NULL or cols[i].wide:
                entries = <EncodeEntry*>PyMem_RawMalloc(max(self.n_entries, 1) * sizeof(EncodeEntry))
                if entries == NULL:
                    pool_free(<uint8_t*>used, used_allocated)
                    raise MemoryError()
                memcpy(entries, self.entries, self.n_entries * sizeof(EncodeEntry))
                for i in range(self.n_entries):
                    entries[i].op = call_op(&entries[i], cols)
                break
        cdef Enc e
        e.cols = cols
        e.absent = absent
        e.entries = entries if entries != NULL else self.entries
        e.nodes = self.nodes
        e.enum_sets = self.enum_sets
        e.enum_values = self.enum_values
        e.scratch = NULL
        e.scratch_cap = 0
        e.scratch_top = 0
        e.err_col = -1
        e.err_index = -1
        e.buf = NULL
        e.ptr = NULL
        e.limit = NULL
        e.low = NULL    # (set by the first grow, before any write)
        e.allocated = 0
        cdef int status = OK
        cdef int64_t r, total
        cdef Lines ls
        cdef const EncodeEntry* root_first = e.entries + self.nodes[0].first
        cdef const EncodeEntry* root_end = root_first + self.nodes[0].n_entries
        ls.at = <const uint8_t**>PyMem_RawMalloc(MAX_LINES * sizeof(uint8_t*))
        ls.count = 0
        ls.issued = 0
        cdef int64_t lo, hi = 0, step = 0, block = BLOCK
        with nogil:
            status = grow(&e, <size_t>max(capacity, 4096))
            used[n_rows] = 0
            r = n_rows
            lo = r
            while r > 0 and status == OK:
                if r == lo:
                    # A block starts: rows [lo, r). List what the next one reads.
                    hi = r
                    lo = max(r - block, 0)
                    ls.count = 0
                    ls.issued = 0
                    if ls.at != NULL and lo > 0:
                        list_node(&ls, &e, 0, max(lo - block, 0), lo, 0)
                        # Rows too wide for a block's lines: the next blocks are shorter
                        # (the block listed here keeps the lines it has).
                        if ls.count >= MAX_LINES and block > MIN_BLOCK:
                            block >>= 1
                    step = (ls.count + (r - lo) - 1) // (r - lo)
                while ls.issued < ls.count and ls.issued < (hi - r + 1) * step:
                    __builtin_prefetch(ls.at[ls.issued])
                    ls.issued += 1
                r -= 1
                status = encode_message(&e, root_first, root_end, r)
                used[r] = e.limit - e.ptr
        PyMem_RawFree(ls.at)
        PyMem_RawFree(e.scratch)
        PyMem_RawFree(entries)
        if status:
            pool_free(e.buf, e.allocated)
            pool_free(<uint8_t*>used, used_allocated)
            if status == E_NO_MEMORY:
                raise MemoryError()
            return status, e.err_col, e.err_index, None, 0, None, False
        total = e.limit - e.ptr
        cdef bint wide = total > 0x7FFFFFFF
        cdef int32_t* off32
        with nogil:
            # offsets[r] = total - used[r]; rewritten in place (int32 fits in the int64 slots)
            if wide:
                for r in range(n_rows + 1):
                    used[r] = total - used[r]
            else:
                off32 = <int32_t*>used
                for r in range(n_rows + 1):
                    off32[r] = <int32_t>(total - used[r])
        data = OwnedBuffer.adopt(e.buf, e.limit - e.buf, e.allocated)
        offsets = OwnedBuffer.adopt(<uint8_t*>used, (n_rows + 1) * (8 if wide else 4),
                                    used_allocated)
        return OK, -1, -1, data, e.ptr - e.buf, offsets, wide
