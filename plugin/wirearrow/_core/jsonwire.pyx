# cython: language_level=3
"""protojson text -> protobuf wire bytes, driven by tables compiled once from the descriptor.

The JSON text is parsed by the standard library's C scanner (the parser the runtime's
``json_format.Parse`` uses, so the same texts load and fail); every conversion rule below
mirrors ``json_format`` step by step, including the Python conversions it leans on (``int``,
``float``, ``base64.urlsafe_b64decode``), so a record is accepted exactly when the runtime
accepts it. No protobuf message is built per record: the output is wire bytes in field-number
order (map entries sorted by key), byte-identical to the runtime's
``SerializeToString(deterministic=True)``, which the binary decoder then reads as usual.

This module works on Python objects (the parsed JSON), so it holds the GIL; the tables
(``Msg``/``Field``) are built by ``wirearrow.sources.protojson`` and never look at a descriptor here.
"""

import base64
import json
import re

try:  # a faster parser, used when it provably gives what json.loads gives (parse_text)
    from orjson import loads as _fast_loads
except ImportError:  # pragma: no cover - orjson is a dependency; json.loads still works
    _fast_loads = None

from libc.stdint cimport int64_t, uint8_t, uint32_t, uint64_t
from libc.string cimport memcpy
from libc.math cimport copysign
from cpython.bytearray cimport PyByteArray_AS_STRING, PyByteArray_GET_SIZE, PyByteArray_Resize
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE
from cpython.dict cimport PyDict_Size


cdef extern from "Python.h":
    const char* PyUnicode_AsUTF8AndSize(object s, Py_ssize_t* size) except NULL

# Field kinds (the cold path maps descriptor types onto these).
KINDS = {
    "double": 1, "float": 2, "int64": 3, "uint64": 4, "int32": 5, "fixed64": 6, "fixed32": 7,
    "bool": 8, "string": 9, "group": 10, "message": 11, "bytes": 12, "uint32": 13, "enum": 14,
    "sfixed32": 15, "sfixed64": 16, "sint32": 17, "sint64": 18,
}
# Well-known types whose JSON form is not an object of fields.
WKTS = {
    "wrapper": 1, "generic": 2, "struct": 3, "value": 4, "list": 5, "any": 6, "timestamp": 7,
}

cdef enum:
    K_DOUBLE = 1
    K_FLOAT = 2
    K_INT64 = 3
    K_UINT64 = 4
    K_INT32 = 5
    K_FIXED64 = 6
    K_FIXED32 = 7
    K_BOOL = 8
    K_STRING = 9
    K_GROUP = 10
    K_MESSAGE = 11
    K_BYTES = 12
    K_UINT32 = 13
    K_ENUM = 14
    K_SFIXED32 = 15
    K_SFIXED64 = 16
    K_SINT32 = 17
    K_SINT64 = 18

cdef enum:
    W_WRAPPER = 1
    W_GENERIC = 2
    W_STRUCT = 3
    W_VALUE = 4
    W_LIST = 5
    W_ANY = 6
    W_TIMESTAMP = 7

cdef double FLOAT_MAX = float.fromhex("0x1.fffffep+127")
# Halfway from FLT_MAX to 2**128: a float rounds up to infinity from here (ties to even).
cdef double FLOAT_HALFWAY = float.fromhex("0x1.ffffffp+127")
cdef object _EXTENSION_NAME = re.compile(r"\[[a-zA-Z0-9\._]*\]$")
cdef object _urlsafe_b64decode = base64.urlsafe_b64decode
cdef object _loads = json.loads
cdef object _JSONDecodeError = json.JSONDecodeError


class JsonError(Exception):
    """One record's JSON is not a valid protojson message: ``reason`` and ``path``."""

    def __init__(self, reason, path=""):
        self.reason = reason
        self.path = path
        super().__init__(reason)


class _UnknownEnumName(JsonError):
    """An enum string the enum does not declare: skipped with ignore_unknown_fields."""


def _unique_keys(pairs):
    # json_format rejects an object that repeats a key; a dict would keep the last silently.
    d = dict(pairs)
    if len(d) != len(pairs):
        seen = set()
        for name, _ in pairs:
            if name in seen:
                raise JsonError(f"duplicate key {name!r}")
            seen.add(name)
    return d


cdef class Field:
    # (object attributes start as None, numbers as 0: no __init__ needed)
    cdef public str name
    cdef public str json_name
    cdef public int number
    cdef public int kind
    cdef public int slot
    cdef public bint repeated
    cdef public bint packed
    cdef public bint presence
    cdef public bint is_map
    cdef public str oneof
    cdef public bytes tag          # the tag bytes (wire type of one element)
    cdef public bytes packed_tag   # tag with wire type 2, for packed repeated fields
    cdef public bytes end_tag      # group end tag
    cdef public object sub         # Msg of a message / group / map entry
    cdef public dict enum_names    # name -> number
    cdef public frozenset enum_numbers
    cdef public bint enum_closed
    cdef public str enum_full_name
    cdef public bint null_enum     # google.protobuf.NullValue: JSON null is its value 0
    cdef public bint value_message  # the field's type is google.protobuf.Value


cdef class Msg:
    cdef public str full_name
    cdef public dict by_json_name
    cdef public dict by_name
    cdef public list fields        # by field number; Field.slot indexes it
    cdef public bint extendable
    cdef public int wkt
    cdef public object runtime_class  # Timestamp / Duration / FieldMask: the runtime's class
    cdef public Field key          # map entries
    cdef public Field value


cdef class Context:
    cdef public bint ignore_unknown
    cdef public int max_depth
    cdef public object resolve_any  # type name -> Msg, or raises KeyError
    cdef int depth
    cdef dict scratch  # Msg -> one runtime message of its class, reused for every record

    def __init__(self, bint ignore_unknown, int max_depth, resolve_any):
        self.ignore_unknown = ignore_unknown
        self.max_depth = max_depth
        self.resolve_any = resolve_any
        self.depth = 0
        self.scratch = {}


# -- wire writing ------------------------------------------------------------------------


cdef inline void put_raw(bytearray out, const uint8_t* src, Py_ssize_t n):
    cdef Py_ssize_t size = PyByteArray_GET_SIZE(out)
    PyByteArray_Resize(out, size + n)
    memcpy(<uint8_t*>PyByteArray_AS_STRING(out) + size, src, n)


cdef inline void put_varint(bytearray out, uint64_t v):
    cdef uint8_t buf[10]
    cdef int n = 0
    while v >= 0x80:
        buf[n] = <uint8_t>((v & 0x7F) | 0x80)
        v >>= 7
        n += 1
    buf[n] = <uint8_t>v
    put_raw(out, buf, n + 1)


cdef inline void put_bytes(bytearray out, bytes b):
    put_raw(out, <const uint8_t*><char*>b, len(b))


cdef inline void put_len(bytearray out, bytes tag, const uint8_t* src, Py_ssize_t n):
    put_bytes(out, tag)
    put_varint(out, <uint64_t>n)
    put_raw(out, src, n)


cdef inline void put_chunk(bytearray out, bytes tag, bytearray body):
    put_len(out, tag, <const uint8_t*>PyByteArray_AS_STRING(body), PyByteArray_GET_SIZE(body))


cdef void put_scalar(bytearray out, int kind, object v):
    """The value alone (no tag) of a converted scalar."""
    cdef uint64_t u
    cdef int64_t s
    cdef double d
    cdef float f
    cdef uint32_t u32
    if kind == K_DOUBLE:
        d = v
        put_raw(out, <uint8_t*>&d, 8)
    elif kind == K_FLOAT:
        f = <float>(<double>v)
        put_raw(out, <uint8_t*>&f, 4)
    elif kind == K_INT64 or kind == K_INT32 or kind == K_ENUM:
        s = v
        put_varint(out, <uint64_t>s)
    elif kind == K_UINT64 or kind == K_UINT32:
        u = v
        put_varint(out, u)
    elif kind == K_BOOL:
        put_varint(out, 1 if v else 0)
    elif kind == K_SINT32 or kind == K_SINT64:
        s = v
        put_varint(out, (<uint64_t>s << 1) ^ <uint64_t>(s >> 63))
    elif kind == K_FIXED64 or kind == K_SFIXED64:
        if kind == K_FIXED64:
            u = v
        else:
            s = v
            u = <uint64_t>s
        put_raw(out, <uint8_t*>&u, 8)
    elif kind == K_FIXED32 or kind == K_SFIXED32:
        if kind == K_FIXED32:
            u32 = v
        else:
            u32 = <uint32_t>(<int64_t>v)
        put_raw(out, <uint8_t*>&u32, 4)
    else:  # string / bytes
        put_varint(out, len(v))
        put_bytes(out, v)


cdef inline bint is_default(int kind, object v):
    """True for the value an implicit-presence field does not serialize."""
    if kind == K_DOUBLE or kind == K_FLOAT:
        # -0.0 has a bit set: the runtime serializes it.
        return v == 0.0 and str(v)[0] != "-"
    if kind == K_STRING or kind == K_BYTES:
        return len(v) == 0
    return v == 0


# -- scalar conversions: json_format's rules, one for one ---------------------------------


cdef object to_integer(object value):
    # json_format._ConvertInteger
    if isinstance(value, float) and not value.is_integer():
        raise JsonError(f"Couldn't parse integer: {value}")
    if isinstance(value, str) and value.find(" ") != -1:
        raise JsonError(f'Couldn\'t parse integer: "{value}"')
    if isinstance(value, bool):
        raise JsonError(f"Bool value {value} is not acceptable for integer field")
    try:
        return int(value)
    except ValueError:
        f = float(value)
        if not f.is_integer():
            raise JsonError(f'Couldn\'t parse non-integer string: "{value}"')
        return int(f)


cdef object check_range(int kind, object v):
    # C conversions: a value past 64 bits (or negative for unsigned) raises OverflowError
    cdef long long x
    cdef unsigned long long u
    try:
        if kind == K_UINT64 or kind == K_FIXED64 or kind == K_UINT32 or kind == K_FIXED32:
            u = v
            if (kind == K_UINT32 or kind == K_FIXED32) and u > 4294967295ULL:
                raise OverflowError
        else:
            x = v
            if (kind == K_INT32 or kind == K_SINT32 or kind == K_SFIXED32 or kind == K_ENUM) and (
                x < -2147483648LL or x > 2147483647LL
            ):
                raise OverflowError
    except OverflowError:
        raise JsonError(f"Value out of range: {v}")
    return v


cdef object to_float(object value, int kind):
    # json_format._ConvertFloat
    if isinstance(value, float):
        if value != value:
            raise JsonError('Couldn\'t parse NaN, use quoted "NaN" instead')
        if value == float("inf") or value == float("-inf"):
            raise JsonError("Couldn't parse Infinity or value too large")
        if kind == K_FLOAT:
            if value > FLOAT_MAX:
                raise JsonError("Float value too large")
            if value < -FLOAT_MAX:
                raise JsonError("Float value too small")
    if value == "nan":
        raise JsonError('Couldn\'t parse float "nan", use "NaN" instead')
    try:
        return float(value)
    except ValueError:
        if value == "-Infinity":
            return float("-inf")
        if value == "Infinity":
            return float("inf")
        if value == "NaN":
            return float("nan")
        raise JsonError(f"Couldn't parse float: {value}")


cdef bytes to_utf8(object value):
    if not isinstance(value, str):
        raise JsonError(f"expected a string, not {type(value).__name__}")
    try:
        return (<str>value).encode("utf-8")
    except UnicodeEncodeError:
        raise JsonError("Unpaired surrogate")


cdef object to_scalar(Field fd, object value, bint key):
    """A JSON value (or a map key's text) as the Python value of the field's type."""
    cdef int kind = fd.kind
    if kind == K_STRING:
        return to_utf8(value)
    if kind == K_BYTES:
        encoded = to_utf8(value)
        try:
            return _urlsafe_b64decode(encoded + b"=" * (4 - len(encoded) % 4))
        except ValueError as err:
            raise JsonError(f"bad base64: {err}")
    if kind == K_BOOL:
        if key:
            if value == "true":
                return True
            if value == "false":
                return False
            raise JsonError(f'Expected "true" or "false", not {value}')
        if not isinstance(value, bool):
            raise JsonError("Expected true or false without quotes")
        return value
    if kind == K_DOUBLE or kind == K_FLOAT:
        v = to_float(value, kind)
        if kind == K_FLOAT and v == v and FLOAT_MAX < abs(v) < float("inf"):
            # A quoted (or integer) value past float's range: the runtime range-checks only
            # JSON numbers with a fraction or exponent (to_float) and rounds the rest to
            # float as C does, to FLT_MAX or, from the halfway point on, infinity. Rounded
            # here, since C's cast of an out-of-range double is undefined behaviour.
            v = copysign(FLOAT_MAX if abs(v) < FLOAT_HALFWAY else float("inf"), v)
        return v
    if kind == K_ENUM:
        number = fd.enum_names.get(value)
        if number is not None:
            return number
        try:
            number = int(value)
        except ValueError:
            raise _UnknownEnumName(f"Invalid enum value {value} for enum type {fd.enum_full_name}")
        if number in fd.enum_numbers:
            return number
        if fd.enum_closed:
            raise JsonError(f"Invalid enum value {value} for enum type {fd.enum_full_name}")
        return check_range(kind, number)
    return check_range(kind, to_integer(value))


# -- messages -----------------------------------------------------------------------------


cdef object at(object err, str segment):
    """``err`` (a JsonError raised below ``segment``) with its path prefixed by it.

    Paths are built only on failure, from the inside out: the success path builds none.
    """
    cdef str inner = err.path
    if not inner:
        err.path = segment
    elif inner[0] == "[":
        err.path = segment + inner
    else:
        err.path = segment + "." + inner
    return err


cdef object failed(object err, str segment):
    """A conversion's own exception (TypeError, ...) as a JsonError at ``segment``."""
    if isinstance(err, JsonError):
        return at(err, segment)
    return at(JsonError(f"{type(err).__name__}: {err}"), segment)


cdef bytearray convert(Msg m, object js, Context ctx):
    """json_format._Parser.ConvertMessage: the message's wire bytes."""
    ctx.depth += 1
    if ctx.depth > ctx.max_depth:
        raise JsonError(f"Message too deep. Max recursion depth is {ctx.max_depth}")
    if m.wkt:
        out = convert_wkt(m, js, ctx)
    else:
        out = convert_fields(m, js, ctx)
    ctx.depth -= 1
    return out


cdef bytearray convert_wkt(Msg m, object js, Context ctx):
    cdef bytearray out
    cdef int wkt = m.wkt
    if wkt == W_WRAPPER:
        out = bytearray()
        put_field(out, m.value, to_scalar(m.value, js, False))
        return out
    if wkt == W_TIMESTAMP and type(js) is str:
        out = bytearray()
        if canonical_timestamp(<str>js, out):
            return out
    if wkt == W_GENERIC or wkt == W_TIMESTAMP:
        # One message per call and type, not per record (a Context belongs to one call).
        scratch = ctx.scratch.get(m)
        if scratch is None:
            scratch = ctx.scratch[m] = m.runtime_class()
        scratch.Clear()
        try:
            scratch.FromJsonString(js)
        except Exception as err:  # the runtime's own parse: any failure rejects the record
            raise JsonError(str(err))
        return bytearray(scratch.SerializeToString(deterministic=True))
    # Struct / Value / ListValue nest by themselves: their levels count against the same
    # max_depth as messages (the wire form of a deeper one is more deeply nested than the
    # binary decoder, or the runtime's own parser, takes back).
    if wkt == W_STRUCT:
        return convert_struct(js, ctx.max_depth - ctx.depth)
    if wkt == W_VALUE:
        return convert_value(js, ctx.max_depth - ctx.depth)
    if wkt == W_LIST:
        return convert_list(js, ctx.max_depth - ctx.depth)
    return convert_any(m, js, ctx)


cdef inline int digits(const char* s, Py_ssize_t at, Py_ssize_t n) noexcept:
    """The decimal number of s[at:at+n], or -1 when a character is not an ASCII digit."""
    cdef int v = 0
    cdef Py_ssize_t i
    for i in range(at, at + n):
        if s[i] < 48 or s[i] > 57:
            return -1
        v = v * 10 + (s[i] - 48)
    return v


cdef inline long long days_from_civil(long long y, int m, int d) noexcept:
    # H. Hinnant's days_from_civil, for years 1..9999
    y -= m <= 2
    cdef long long era = y // 400
    cdef long long yoe = y - era * 400
    cdef long long doy = (153 * (m + (-3 if m > 2 else 9)) + 2) // 5 + d - 1
    cdef long long doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146097 + doe - 719468


cdef bint canonical_timestamp(str value, bytearray out) except -1:
    """``YYYY-MM-DDTHH:MM:SS[.f{1,9}]Z`` (what MessageToJson prints) without the runtime's
    strptime: False for any other spelling, which Timestamp.FromJsonString then judges.
    Seconds and nanos are computed as FromJsonString computes them."""
    cdef Py_ssize_t n = len(value)
    cdef int y, mo, d, h, mi, sec, last
    cdef long long seconds
    cdef bytes text
    cdef const char* c
    if n < 20 or n > 30 or not value.isascii():
        return False
    text = value.encode("ascii")
    c = text
    if c[n - 1] != b"Z" or c[4] != b"-" or c[7] != b"-" or c[10] != b"T":
        return False
    if c[13] != b":" or c[16] != b":":
        return False
    y, mo, d = digits(c, 0, 4), digits(c, 5, 2), digits(c, 8, 2)
    h, mi, sec = digits(c, 11, 2), digits(c, 14, 2), digits(c, 17, 2)
    if y < 1 or mo < 1 or mo > 12 or d < 1 or h < 0 or h > 23 or mi < 0 or mi > 59 or sec < 0 or sec > 59:
        return False
    last = 31
    if mo == 2:
        last = 29 if (y % 4 == 0 and (y % 100 != 0 or y % 400 == 0)) else 28
    elif mo == 4 or mo == 6 or mo == 9 or mo == 11:
        last = 30
    if d > last:
        return False
    nanos = 0
    if n > 20:
        if c[19] != b"." or n == 21 or digits(c, 20, n - 21) < 0:
            return False
        nanos = round(float("0." + value[20 : n - 1]) * 1e9)
    seconds = days_from_civil(y, mo, d) * 86400 + h * 3600 + mi * 60 + sec
    if seconds:
        put_raw(out, <const uint8_t*>b"\x08", 1)
        put_varint(out, <uint64_t>seconds)
    if nanos:
        put_raw(out, <const uint8_t*>b"\x10", 1)
        put_varint(out, <uint64_t>(<long long>nanos))
    return True


cdef bytearray convert_any(Msg m, object js, Context ctx):
    cdef bytearray out = bytearray()
    cdef Msg sub
    if isinstance(js, dict) and not js:
        return out
    try:
        type_url = js["@type"]
    except (KeyError, TypeError, IndexError):
        raise JsonError("@type is missing when parsing any message")
    if not isinstance(type_url, str):
        raise JsonError(f"@type must be a string, not {type(type_url).__name__}")
    try:
        sub = ctx.resolve_any(type_url.rpartition("/")[2])
    except KeyError:
        raise JsonError(f"Can not find message descriptor by type_url: {type_url}")
    if sub.wkt:
        try:
            inner = js["value"]
        except KeyError:
            raise JsonError("missing 'value' in Any of a well-known type")
        try:
            if sub.wkt == W_WRAPPER:
                body = convert_wkt(sub, inner, ctx)
            else:
                body = convert(sub, inner, ctx)
        except JsonError as err:
            raise at(err, "value")
    else:
        rest = {k: v for k, v in js.items() if k != "@type"}
        body = convert_fields(sub, rest, ctx)
    url = to_utf8(type_url)
    if len(url):
        put_len(out, m.key.tag, <const uint8_t*><char*>url, len(url))
    if len(body):
        put_chunk(out, m.value.tag, body)
    return out


cdef bytearray convert_value(object js, int room):
    # google.protobuf.Value: null_value=1, number_value=2, string_value=3, bool_value=4,
    # struct_value=5, list_value=6 (a oneof: the member is written even at its default)
    cdef bytearray out = bytearray()
    cdef double d
    if isinstance(js, dict):
        put_chunk(out, b"\x2a", convert_struct(js, room - 1))
    elif isinstance(js, (list, tuple)):
        put_chunk(out, b"\x32", convert_list(js, room - 1))
    elif js is None:
        put_raw(out, <const uint8_t*>b"\x08\x00", 2)
    elif isinstance(js, bool):
        put_raw(out, <const uint8_t*>(b"\x20\x01" if js else b"\x20\x00"), 2)
    elif isinstance(js, str):
        s = to_utf8(js)
        put_len(out, b"\x1a", <const uint8_t*><char*>s, len(s))
    elif isinstance(js, (int, float)):
        try:
            d = float(js)
        except OverflowError:
            raise JsonError(f"number {js} is out of range")
        put_raw(out, <const uint8_t*>b"\x11", 1)
        put_raw(out, <uint8_t*>&d, 8)
    else:
        raise JsonError(f"Value {js} has unexpected type {type(js).__name__}")
    return out


cdef bytearray convert_list(object js, int room):
    cdef bytearray out = bytearray()
    cdef Py_ssize_t i = 0
    if not isinstance(js, (list, tuple)):
        raise JsonError(f"ListValue must be in [] which is {js}")
    if room < 1:
        raise JsonError("Struct / ListValue nested too deeply (max_recursion_depth)")
    for item in js:
        try:
            put_chunk(out, b"\x0a", convert_value(item, room - 1))
        except JsonError as err:
            raise at(err, f"[{i}]")
        i += 1
    return out


cdef bytearray convert_struct(object js, int room):
    cdef bytearray out = bytearray()
    cdef bytearray entry
    if not isinstance(js, dict):
        raise JsonError(f"Struct must be in a dict which is {js}")
    if room < 2:
        raise JsonError("Struct / ListValue nested too deeply (max_recursion_depth)")
    for k in upb_order(K_STRING, [to_utf8(key) for key in js]):
        key = k.decode("utf-8")
        entry = bytearray()
        put_len(entry, b"\x0a", <const uint8_t*><char*>k, len(k))
        try:
            put_chunk(entry, b"\x12", convert_value(js[key], room - 2))
        except JsonError as err:
            raise at(err, key)
        put_chunk(out, b"\x0a", entry)
    return out


cdef void put_field(bytearray out, Field fd, object v):
    """tag + value of one converted singular scalar, unless implicit presence drops it."""
    if not fd.presence and is_default(fd.kind, v):
        return
    put_bytes(out, fd.tag)
    put_scalar(out, fd.kind, v)


cdef void put_message(bytearray out, Field fd, bytearray body):
    if fd.kind == K_GROUP:
        put_bytes(out, fd.tag)
        put_raw(out, <const uint8_t*>PyByteArray_AS_STRING(body), PyByteArray_GET_SIZE(body))
        put_bytes(out, fd.end_tag)
    else:
        put_chunk(out, fd.tag, body)


cdef object unknown_field(Msg m, object name):
    return JsonError(f'Message type "{m.full_name}" has no field named "{name}"')


cdef bytearray convert_fields(Msg m, object js, Context ctx):
    """json_format._Parser._ConvertFieldValuePair, for an object whose keys come in field
    number order (MessageToJson's order): each field written straight to the output.

    Anything else (keys out of order, a field given twice under its two names, not an
    object) is converted again by convert_fields_slots, which orders and replaces fields.
    """
    cdef bytearray out
    cdef Field fd
    cdef Py_ssize_t last = -1
    cdef set oneofs = None
    if type(js) is not dict:
        return convert_fields_slots(m, js, ctx)
    out = bytearray()
    for name, value in (<dict>js).items():
        fd = m.by_json_name.get(name) or m.by_name.get(name)
        if fd is None or fd.slot <= last:
            return convert_fields_slots(m, js, ctx)  # (it words the unknown-field error)
        last = fd.slot
        if fd.oneof is not None and value is not None:
            if oneofs is None:
                oneofs = set()
            elif fd.oneof in oneofs:
                return convert_fields_slots(m, js, ctx)
            oneofs.add(fd.oneof)
        try:
            if put_value(out, fd, value, ctx) < 0 and not ctx.ignore_unknown:
                raise JsonError(f"Invalid enum value {value} for enum type {fd.enum_full_name}")
        except (JsonError, ValueError, TypeError, OverflowError) as err:
            raise failed(err, fd.name)
    return out


cdef int put_value(bytearray out, Field fd, object value, Context ctx) except -2:
    """One field's JSON value, appended to ``out``; -1: an enum name the enum lacks."""
    if value is None:
        if fd.value_message and not fd.repeated:
            put_len(out, fd.tag, <const uint8_t*>b"\x08\x00", 2)
        elif fd.null_enum:
            if fd.repeated:
                raise JsonError("null is not a list")
            put_field(out, fd, 0)
    elif fd.is_map:
        convert_map(fd, value, ctx, out)
    elif fd.repeated:
        convert_repeated(fd, value, ctx, out)
    elif fd.kind == K_MESSAGE or fd.kind == K_GROUP:
        put_message(out, fd, convert(<Msg>fd.sub, value, ctx))
    else:
        try:
            v = to_scalar(fd, value, False)
        except _UnknownEnumName:
            return -1
        put_field(out, fd, v)
    return 0


cdef bytearray convert_fields_slots(Msg m, object js, Context ctx):
    """json_format._Parser._ConvertFieldValuePair, writing each field into its slot."""
    cdef list slots = [None] * len(m.fields)
    cdef set names = set()
    cdef Field fd
    cdef bytearray out
    cdef bytearray chunk
    for name in js:  # (a str or list iterates too, as in the runtime)
        try:
            fd = m.by_json_name.get(name) or m.by_name.get(name)
        except TypeError:
            raise JsonError(f"field name must be a string, not {type(name).__name__}")
        if fd is None:
            if not isinstance(name, str):
                raise JsonError(f"field name must be a string, not {type(name).__name__}")
            if not (<str>name).isascii():
                # The runtime looks every name up as UTF-8 and fails on one that is not
                # (a lone surrogate), known field or not, ignore_unknown_fields or not.
                try:
                    (<str>name).encode("utf-8")
                except UnicodeEncodeError:
                    raise JsonError(f'Unpaired surrogate in field name "{name}" of {m.full_name}')
            if _EXTENSION_NAME.match(name) and not m.extendable:
                raise JsonError(f"Message type {m.full_name} does not have extensions")
            # (an extension the schema does not declare: an unknown field, as in json_format)
            if ctx.ignore_unknown:
                continue
            raise unknown_field(m, name)
        if name in names:
            raise JsonError(f'Message type "{m.full_name}" should not have multiple "{name}" fields')
        names.add(name)
        if not isinstance(js, dict):
            raise JsonError(f"{m.full_name} must be a JSON object")
        value = (<dict>js)[name]
        if fd.oneof is not None and value is not None:
            if fd.oneof in names:
                raise JsonError(
                    f'Message type "{m.full_name}" should not have multiple "{fd.oneof}" oneof fields'
                )
            names.add(fd.oneof)
        try:
            if value is None:
                if fd.value_message and not fd.repeated:
                    chunk = bytearray()
                    put_len(chunk, fd.tag, <const uint8_t*>b"\x08\x00", 2)
                    slots[fd.slot] = chunk
                elif fd.null_enum:
                    if fd.repeated:
                        raise JsonError("null is not a list")
                    chunk = bytearray()
                    put_field(chunk, fd, 0)
                    slots[fd.slot] = chunk
                else:
                    slots[fd.slot] = None
            elif fd.is_map:
                slots[fd.slot] = convert_map(fd, value, ctx, bytearray())
            elif fd.repeated:
                slots[fd.slot] = convert_repeated(fd, value, ctx, bytearray())
            elif fd.kind == K_MESSAGE or fd.kind == K_GROUP:
                chunk = bytearray()
                put_message(chunk, fd, convert(<Msg>fd.sub, value, ctx))
                previous = slots[fd.slot]
                # the same field spelled twice (name and json_name): the runtime merges them
                slots[fd.slot] = previous + chunk if previous is not None else chunk
            else:
                try:
                    v = to_scalar(fd, value, False)
                except _UnknownEnumName:
                    if ctx.ignore_unknown:
                        continue
                    raise
                chunk = bytearray()
                put_field(chunk, fd, v)
                slots[fd.slot] = chunk
        except (JsonError, ValueError, TypeError, OverflowError) as err:
            raise failed(err, fd.name)
    out = bytearray()
    for chunk in slots:
        if chunk is not None:
            out += chunk
    return out


cdef bytearray convert_repeated(Field fd, object value, Context ctx, bytearray out):
    cdef bytearray packed
    cdef Msg sub
    cdef Py_ssize_t i = 0
    if not isinstance(value, (list, tuple)):
        raise JsonError(f"repeated field {fd.json_name} must be in [] which is {value}")
    if fd.kind == K_MESSAGE or fd.kind == K_GROUP:
        sub = fd.sub
        for item in value:
            if item is None and sub.wkt != W_VALUE:
                raise at(JsonError("null is not allowed to be used as an element in a repeated field"), f"[{i}]")
            try:
                put_message(out, fd, convert(sub, item, ctx))
            except (JsonError, ValueError, TypeError, OverflowError) as err:
                raise failed(err, f"[{i}]")
            i += 1
        return out
    packed = bytearray() if fd.packed else None
    for item in value:
        if item is None:
            raise at(JsonError("null is not allowed to be used as an element in a repeated field"), f"[{i}]")
        try:
            v = to_scalar(fd, item, False)
        except _UnknownEnumName as err:
            if ctx.ignore_unknown:
                i += 1
                continue
            raise at(err, f"[{i}]")
        except (JsonError, ValueError, TypeError, OverflowError) as err:
            raise failed(err, f"[{i}]")
        if packed is not None:
            put_scalar(packed, fd.kind, v)
        else:
            put_bytes(out, fd.tag)
            put_scalar(out, fd.kind, v)
        i += 1
    if packed is not None and len(packed):
        put_chunk(out, fd.packed_tag, packed)
    return out


cdef bytearray convert_map(Field fd, object value, Context ctx, bytearray out):
    cdef Msg entry = fd.sub
    cdef Field kf = entry.key
    cdef Field vf = entry.value
    cdef dict entries = {}
    cdef bytearray body
    cdef bytearray chunk
    if not isinstance(value, dict):
        raise JsonError(f"Map field {fd.name} must be in a dict which is {value}")
    for key, item in (<dict>value).items():
        try:
            k = to_scalar(kf, key, True)
        except (JsonError, ValueError, TypeError, OverflowError) as err:
            raise failed(err, "key")
        try:
            if vf.kind == K_MESSAGE:
                body = convert(<Msg>vf.sub, item, ctx)
                previous = entries.get(k)
                # two keys naming the same entry ("1", "01"): the runtime merges into it
                entries[k] = previous + body if previous is not None else body
            else:
                if item is None:
                    raise JsonError("null is not a map value")
                try:
                    entries[k] = to_scalar(vf, item, False)
                except _UnknownEnumName:
                    if not ctx.ignore_unknown:
                        raise
        except (JsonError, ValueError, TypeError, OverflowError) as err:
            raise failed(err, f"[{key}]")
    for k in upb_order(kf.kind, list(entries)):
        chunk = bytearray()
        put_bytes(chunk, kf.tag)
        put_scalar(chunk, kf.kind, k)
        if vf.kind == K_MESSAGE:
            put_chunk(chunk, vf.tag, <bytearray>entries[k])
        else:
            put_bytes(chunk, vf.tag)
            put_scalar(chunk, vf.kind, entries[k])
        put_chunk(out, fd.tag, chunk)
    return out


def _terminated(bytes k):
    return k + b"\xff"


def _low32(k):
    return k & 0xFFFFFFFF


def _low64(k):
    return k & 0xFFFFFFFFFFFFFFFF


cdef list upb_order(int kind, list keys):
    """Map keys in the order of the runtime's deterministic serialization.

    upb sorts ascending and writes backwards: integer keys descend as unsigned numbers of
    their width, bools descend, strings ascend bytewise except that a string comes after
    every longer string it is a prefix of (0xff, never in UTF-8, as a terminator does that).
    The same rule as wirearrow.plan.encoding's map order, checked against the runtime.
    """
    if len(keys) < 2:
        return keys
    if kind == K_STRING:
        return sorted(keys, key=_terminated)
    if kind == K_BOOL:
        return sorted(keys, reverse=True)
    if kind == K_INT32 or kind == K_SINT32 or kind == K_SFIXED32 or kind == K_UINT32 or kind == K_FIXED32:
        return sorted(keys, key=_low32, reverse=True)
    return sorted(keys, key=_low64, reverse=True)


# -- records ------------------------------------------------------------------------------


cdef Py_ssize_t scan_keys(const uint8_t* p, Py_ssize_t n) noexcept nogil:
    """The number of object keys in JSON text (its colons outside strings), or -1 when a
    number has 19 digits or more (orjson turns integers past 64 bits into floats)."""
    cdef Py_ssize_t i = 0, keys = 0, digits = 0
    cdef uint8_t c
    cdef bint in_string = False
    while i < n:
        c = p[i]
        if in_string:
            if c == 92:  # backslash: the next byte is escaped
                i += 1
            elif c == 34:
                in_string = False
        elif c == 34:
            in_string = True
            digits = 0
        elif c == 58:
            keys += 1
            digits = 0
        elif 48 <= c <= 57:
            digits += 1
            if digits >= 19:
                return -1
        else:
            digits = 0
        i += 1
    return keys


cdef Py_ssize_t count_keys(object js):
    """The keys of every object in parsed JSON (a repeated key counts once)."""
    cdef Py_ssize_t n = 0
    if isinstance(js, dict):
        n = PyDict_Size(js)
        for v in (<dict>js).values():
            if isinstance(v, (dict, list)):
                n += count_keys(v)
    elif isinstance(js, list):
        for v in <list>js:
            if isinstance(v, (dict, list)):
                n += count_keys(v)
    return n


cdef object fast_parse(object text):
    """orjson's parse when it is the same as json_format's, else None (then parse_text).

    orjson rejects what json.loads accepts beyond JSON (NaN literals, lone surrogates,
    1e400), keeps the last of repeated keys and reads integers past 64 bits as floats:
    any such text goes the standard library's way. A repeated key shows as fewer keys in
    the parsed objects than colons in the text.
    """
    cdef const uint8_t* p
    cdef Py_ssize_t n, keys
    if _fast_loads is None:
        return None
    if type(text) is bytes:
        p = <const uint8_t*>PyBytes_AS_STRING(text)
        n = PyBytes_GET_SIZE(text)
    elif type(text) is str:
        try:
            p = <const uint8_t*>PyUnicode_AsUTF8AndSize(text, &n)
        except UnicodeEncodeError:
            return None
    else:
        return None
    with nogil:
        keys = scan_keys(p, n)
    if keys < 0:
        return None
    try:
        js = _fast_loads(text)
    except Exception:  # let json.loads decide, and word the error
        return None
    if count_keys(js) != keys:
        return None
    return js


def parse_text(text):
    """json_format.Parse's loading step: UTF-8 text -> Python objects, duplicate keys rejected."""
    js = fast_parse(text)
    if js is not None:
        return js
    return slow_parse(text)


def slow_parse(text):
    """parse_text with the standard library's parser: what json_format.Parse runs."""
    if not isinstance(text, str):
        try:
            text = bytes(text).decode("utf-8")
        except UnicodeDecodeError as err:
            raise JsonError(f"invalid UTF-8: {err}")
    try:
        return _loads(text, object_pairs_hook=_unique_keys)
    except JsonError:
        raise
    except _JSONDecodeError as err:
        raise JsonError(f"invalid JSON: {err.msg} at line {err.lineno} column {err.colno}")
    except RecursionError:
        raise JsonError("invalid JSON: nested too deeply")
    except Exception as err:  # what json.loads raises beyond its own error type
        raise JsonError(f"invalid JSON: {type(err).__name__}: {err}")


def to_wire(Msg root, list texts, Context ctx):
    """Each text's wire bytes; (position, reason, path) for every rejected text."""
    cdef list out = []
    cdef list errors = []
    cdef Py_ssize_t i
    for i in range(len(texts)):
        text = texts[i]
        if text is None:
            errors.append((i, "null record", ""))
            continue
        ctx.depth = 0
        try:
            out.append(bytes(convert(root, parse_text(text), ctx)))
        except JsonError as err:
            errors.append((i, err.reason, err.path))
        except RecursionError:
            errors.append((i, "nested too deeply", ""))
        except (ValueError, TypeError, OverflowError, AttributeError, KeyError) as err:
            # a conversion the runtime also fails on, seen from an unexpected angle
            errors.append((i, f"{type(err).__name__}: {err}", ""))
    return out, errors
