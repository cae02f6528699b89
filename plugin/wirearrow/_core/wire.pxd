# The protobuf wire format, read (decoder, framing) and sized (encoder): written once here.
#
# Every reader takes the position by address (pp), checks each byte against `end` before it
# reads it, and moves the position only on success. Statuses are the decoder's numbering
# (its STATUS_TEXT names them); framing maps them to its own errors.
#
# The decoder is built with these forced inline (setup.py): a hot-loop call site copies the
# position into a local whose address is taken (`q = p; read_varint(&q, ...); p = q`) so
# that `p` itself stays in a register.
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t
from libc.string cimport memcpy


cdef extern from *:
    int __builtin_clzll(unsigned long long) nogil


cdef enum:  # statuses
    OK = 0
    E_TRUNCATED = 1         # the region ends inside a value
    E_VARINT_OVERFLOW = 2   # a varint longer than 10 bytes
    E_LENGTH = 3            # a length prefix runs past the end of the region
    E_TAG_OVERFLOW = 12     # a tag larger than 32 bits
    E_TAG_LONG = 17         # a tag varint longer than 5 bytes
    E_LENGTH_LONG = 18      # a length prefix varint longer than 5 bytes


cdef inline int read_varint_slow(const uint8_t** pp, const uint8_t* end,
                                 uint64_t* out) noexcept nogil:
    """Base-128 varint, least significant group first, at most 10 bytes (any length)."""
    cdef const uint8_t* p = pp[0]
    cdef uint64_t result = 0
    cdef uint64_t b
    cdef int shift = 0
    while True:
        if p >= end:
            return E_TRUNCATED
        if shift > 63:
            return E_VARINT_OVERFLOW
        b = p[0]
        p += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            break
        shift += 7
    out[0] = result
    pp[0] = p
    return OK


cdef inline int read_varint(const uint8_t** pp, const uint8_t* end, uint64_t* out) noexcept nogil:
    """A varint; one byte (most values, most lengths) without the loop."""
    cdef const uint8_t* p = pp[0]
    if p < end and p[0] < 0x80:
        out[0] = p[0]
        pp[0] = p + 1
        return OK
    return read_varint_slow(pp, end, out)


cdef inline int skip_varint(const uint8_t** pp, const uint8_t* end) noexcept nogil:
    cdef const uint8_t* p = pp[0]
    cdef const uint8_t* limit = p + 10
    while True:
        if p >= end:
            return E_TRUNCATED
        if p >= limit:
            return E_VARINT_OVERFLOW
        if p[0] < 0x80:
            pp[0] = p + 1
            return OK
        p += 1


cdef inline int read_length(const uint8_t** pp, const uint8_t* end, int64_t* out) noexcept nogil:
    """A length prefix, checked against the bytes left in the enclosing region.

    At most 5 bytes, as protobuf 7's upb reads it (6's accepts up to 10: docs/errors.md)."""
    cdef uint64_t v
    cdef const uint8_t* start = pp[0]
    cdef int st = read_varint(pp, end, &v)
    if st != OK:
        return st
    if pp[0] - start > 5:
        pp[0] = start
        return E_LENGTH_LONG
    if v > <uint64_t>(end - pp[0]):
        return E_LENGTH
    out[0] = <int64_t>v
    return OK


cdef inline int read_tag(const uint8_t** pp, const uint8_t* end, uint64_t* out) noexcept nogil:
    """A field tag (number << 3 | wire type): one or two bytes (field numbers below 2048)
    without the loop; over 5 bytes or over 32 bits is an error. Number and wire type are not checked.
    The caller has checked that a byte is left (a field starts here)."""
    cdef const uint8_t* p = pp[0]
    cdef int st
    if p[0] < 0x80:
        out[0] = p[0]
        pp[0] = p + 1
        return OK
    if p + 1 < end and p[1] < 0x80:
        out[0] = (p[0] & 0x7F) | (<uint64_t>p[1] << 7)
        pp[0] = p + 2
        return OK
    st = read_varint_slow(pp, end, out)
    if st == OK and pp[0] - p > 5:  # upb's limit, even for a padded small number
        pp[0] = p
        return E_TAG_LONG
    if st == OK and out[0] >> 32:
        return E_TAG_OVERFLOW
    return st


cdef inline int skip_fixed(const uint8_t** pp, const uint8_t* end, int64_t width) noexcept nogil:
    """A fixed32 (width 4) or fixed64 (width 8) value."""
    if end - pp[0] < width:
        return E_TRUNCATED
    pp[0] += width
    return OK


cdef inline int32_t zigzag32(uint32_t v) noexcept nogil:
    """sint32 from the low 32 bits of its zigzag varint."""
    return <int32_t>((v >> 1) ^ (~(v & 1) + 1))


cdef inline int64_t zigzag64(uint64_t v) noexcept nogil:
    """sint64 from its zigzag varint."""
    return <int64_t>((v >> 1) ^ (~(v & 1) + 1))


cdef inline uint32_t zigzag32_of(int32_t v) noexcept nogil:
    """The zigzag varint of a sint32 (what zigzag32 reads back)."""
    return (<uint32_t>v << 1) ^ <uint32_t>(v >> 31)


cdef inline uint64_t zigzag64_of(int64_t v) noexcept nogil:
    return (<uint64_t>v << 1) ^ <uint64_t>(v >> 63)


cdef inline int varint_size(uint64_t v) noexcept nogil:
    """Bytes of v as a varint."""
    if v < 0x80:
        return 1
    return (63 - __builtin_clzll(v)) // 7 + 1


cdef inline int64_t put_varint(uint8_t* out, uint64_t v) noexcept nogil:
    """Write ``v`` as a varint at ``out`` (room for 10 bytes): the bytes written."""
    cdef int64_t n = 0
    while v >= 0x80:
        out[n] = <uint8_t>(v | 0x80)
        v >>= 7
        n += 1
    out[n] = <uint8_t>v
    return n + 1


# ---- UTF-8 (string fields the schema requires to be valid) ----------------------------


cdef inline bint utf8_valid(const uint8_t* s, int64_t n) noexcept nogil:
    # Most strings are ASCII: OR all their bytes together, 8 at a time with no early exit
    # (the last word overlaps the one before), and validate properly only if a high bit shows.
    cdef uint64_t acc = 0, w
    cdef int64_t j = 0
    if n >= 8:
        while j + 8 <= n:
            memcpy(&w, s + j, 8)
            acc |= w
            j += 8
        memcpy(&w, s + n - 8, 8)
        acc |= w
    else:
        while j < n:
            acc |= s[j]
            j += 1
    if not (acc & 0x8080808080808080ULL):
        return True
    return utf8_valid_full(s, n)


cdef inline bint utf8_valid_full(const uint8_t* s, int64_t n) noexcept nogil:
    """What Python's strict UTF-8 decoder accepts: no overlong forms, no surrogates, nothing
    past U+10FFFF."""
    cdef int64_t i = 0
    cdef uint64_t word
    cdef uint8_t b
    cdef uint32_t cp
    cdef int k, need
    while i < n:
        # ASCII runs are the common case: 8 bytes at a time.
        while i + 8 <= n:
            memcpy(&word, s + i, 8)
            if word & 0x8080808080808080ULL:
                break
            i += 8
        if i >= n:
            break
        b = s[i]
        if b < 0x80:
            i += 1
            continue
        if b >= 0xC2 and b <= 0xDF:
            need = 1
            cp = b & 0x1F
        elif b >= 0xE0 and b <= 0xEF:
            need = 2
            cp = b & 0x0F
        elif b >= 0xF0 and b <= 0xF4:
            need = 3
            cp = b & 0x07
        else:
            return False
        if i + need >= n:
            return False
        for k in range(1, need + 1):
            if (s[i + k] & 0xC0) != 0x80:
                return False
            cp = (cp << 6) | (s[i + k] & 0x3F)
        # overlong forms, surrogates and values past U+10FFFF
        if (need == 2 and (cp < 0x800 or (cp >= 0xD800 and cp <= 0xDFFF))) or \
                (need == 3 and (cp < 0x10000 or cp > 0x10FFFF)):
            return False
        i += need + 1
    return True


cdef inline uint64_t copy_short(uint8_t* dst, const uint8_t* src, int64_t n) noexcept nogil:
    """Copies n <= 16 bytes as two overlapping words (1-3 bytes: the first, middle and last)
    and returns the OR of what it moved: no high bit set means the bytes are ASCII, so a
    string needs no validation pass of its own. Shortest first: most string values are
    short (codes, currencies, names: on OpenRTB about two thirds are under 8 bytes)."""
    cdef uint64_t a, b
    cdef uint32_t x, y
    if n < 4:
        if n == 0:
            return 0
        dst[0] = src[0]
        dst[n >> 1] = src[n >> 1]
        dst[n - 1] = src[n - 1]
        return src[0] | src[n >> 1] | src[n - 1]
    if n < 8:
        memcpy(&x, src, 4)
        memcpy(&y, src + n - 4, 4)
        memcpy(dst, &x, 4)
        memcpy(dst + n - 4, &y, 4)
        return x | y
    memcpy(&a, src, 8)
    memcpy(&b, src + n - 8, 8)
    memcpy(dst, &a, 8)
    memcpy(dst + n - 8, &b, 8)
    return a | b
