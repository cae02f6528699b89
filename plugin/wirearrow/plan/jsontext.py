"""google.protobuf.Struct / Value / ListValue as JSON text, both ways, in one place.

Decoding renders a value with :func:`render`; encoding reads the text back with
:func:`to_bytes`. With ``keep_unknown=True`` the assembler keeps a value's serialized bytes
where the text cannot say everything the runtime holds (:func:`lossless`: unknown fields at
any depth, a Value with no kind, a NaN's payload), and encode writes those bytes while the
text is still the one :func:`render` made from them (docs/types.md, "Unknown fields").
"""

from __future__ import annotations

import json

from google.protobuf import json_format, struct_pb2
from google.protobuf.message import Message

__all__ = ["CLASSES", "OutsideJson", "lossless", "render", "to_bytes"]

CLASSES: dict[str, type[Message]] = {
    "google.protobuf.Struct": struct_pb2.Struct,
    "google.protobuf.Value": struct_pb2.Value,
    "google.protobuf.ListValue": struct_pb2.ListValue,
}


class OutsideJson(ValueError):
    """A Struct / Value / ListValue the runtime holds but its JSON form cannot: NullValue
    is an open enum, so the runtime keeps ``null_value = 5``, which JSON ``null`` would
    write back as 0 -- a bad record, as the other values outside their type
    (docs/types.md)."""


def _object(msg: object) -> object:
    """Struct / Value / ListValue -> the Python value of its JSON form.

    As json_format.MessageToDict, except that a non-finite number_value, which the JSON
    mapping has no form for, becomes the float itself: json.dumps writes it as the bare
    token NaN, Infinity or -Infinity, which encode parses back (docs/types.md).
    """
    name = msg.DESCRIPTOR.full_name  # type: ignore[attr-defined]
    if name == "google.protobuf.Struct":
        return {k: _object(v) for k, v in msg.fields.items()}  # type: ignore[attr-defined]
    if name == "google.protobuf.ListValue":
        return [_object(v) for v in msg.values]  # type: ignore[attr-defined]
    kind = msg.WhichOneof("kind")  # type: ignore[attr-defined]
    if kind == "null_value" and msg.null_value != 0:  # type: ignore[attr-defined]
        raise OutsideJson(
            f"google.protobuf.Value null_value {msg.null_value} is not NULL_VALUE (0)"  # type: ignore[attr-defined]
        )
    if kind is None or kind == "null_value":
        return None
    if kind in ("struct_value", "list_value"):
        return _object(getattr(msg, kind))
    return getattr(msg, kind)


def render(msg: Message) -> str | None:
    """The JSON text of a parsed value; None for a Value with no kind (no JSON form).
    Raises OutsideJson."""
    if msg.DESCRIPTOR.full_name == "google.protobuf.Value" and msg.WhichOneof("kind") is None:
        return None
    # Struct is a map: sorted keys make the text deterministic across runs.
    return json.dumps(_object(msg), separators=(",", ":"), sort_keys=True)


def to_bytes(cls: type[Message], text: str) -> bytes:
    """The runtime's deterministic bytes of the value a JSON text holds. Raises ValueError
    (json_format.ParseError is one) for a text that is not such a value."""
    value = cls()
    json_format.Parse(text, value)
    return value.SerializeToString(deterministic=True)


def lossless(msg: Message, text: str | None) -> bool:
    """Whether encoding `text` (render's text of `msg`) gives `msg`'s bytes back."""
    if text is None:
        return False  # a Value with no kind: null, which encode leaves out
    try:
        return to_bytes(type(msg), text) == msg.SerializeToString(deterministic=True)
    except ValueError:
        return False
