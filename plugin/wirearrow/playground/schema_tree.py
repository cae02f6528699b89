"""A message descriptor as a tree for the playground: fields, types, labels and paths.

Each node carries the path that reads it (``imp[*].banner.w``), so that a click on the
page can add it as a column. Recursive types are shown once and marked where they recur;
the tree is cut at ``max_nodes`` nodes so that a huge schema stays a bounded answer.
"""

from __future__ import annotations

from google.protobuf.descriptor import Descriptor, FieldDescriptor

__all__ = ["schema_tree"]

_SCALARS = {
    FieldDescriptor.TYPE_DOUBLE: "double",
    FieldDescriptor.TYPE_FLOAT: "float",
    FieldDescriptor.TYPE_INT64: "int64",
    FieldDescriptor.TYPE_UINT64: "uint64",
    FieldDescriptor.TYPE_INT32: "int32",
    FieldDescriptor.TYPE_FIXED64: "fixed64",
    FieldDescriptor.TYPE_FIXED32: "fixed32",
    FieldDescriptor.TYPE_BOOL: "bool",
    FieldDescriptor.TYPE_STRING: "string",
    FieldDescriptor.TYPE_BYTES: "bytes",
    FieldDescriptor.TYPE_UINT32: "uint32",
    FieldDescriptor.TYPE_SFIXED32: "sfixed32",
    FieldDescriptor.TYPE_SFIXED64: "sfixed64",
    FieldDescriptor.TYPE_SINT32: "sint32",
    FieldDescriptor.TYPE_SINT64: "sint64",
}


def _type_name(f: FieldDescriptor) -> str:
    if f.message_type is not None:
        return f.message_type.full_name
    if f.enum_type is not None:
        return f"enum {f.enum_type.full_name}"
    return _SCALARS.get(f.type, str(f.type))


def _is_repeated(f: FieldDescriptor) -> bool:
    # FieldDescriptor.label is deprecated in protobuf 6; is_repeated replaces it.
    flag = getattr(f, "is_repeated", None)
    if flag is not None:
        return bool(flag)
    return f.label == FieldDescriptor.LABEL_REPEATED  # pragma: no cover (protobuf < 6)


def _map_entry(f: FieldDescriptor) -> Descriptor | None:
    entry = f.message_type
    if entry is not None and entry.GetOptions().map_entry and _is_repeated(f):
        return entry
    return None


def schema_tree(descriptor: Descriptor, max_nodes: int = 5000) -> dict:
    """``{"message", "fields": [...], "cut"}``: each field a dict with ``name``, ``path``,
    ``type``, ``kind`` (scalar / message / enum / map), ``repeated``, ``oneof``,
    ``recursive`` (its type is an ancestor's: not expanded) and ``fields`` (children)."""
    budget = [max_nodes]

    def fields(message: Descriptor, prefix: str, ancestors: tuple[str, ...]) -> list[dict]:
        out = []
        for f in message.fields:
            if budget[0] <= 0:
                break
            budget[0] -= 1
            entry = _map_entry(f)
            repeated = _is_repeated(f) and entry is None
            path = f"{prefix}{f.name}"
            node: dict = {
                "name": f.name,
                "number": f.number,
                "path": path,
                "repeated": repeated,
                "oneof": f.containing_oneof.name if f.containing_oneof else None,
                "recursive": False,
                "fields": [],
            }
            target = f.message_type
            if entry is not None:
                key, value = entry.fields_by_name["key"], entry.fields_by_name["value"]
                node["kind"] = "map"
                node["type"] = f"map<{_type_name(key)}, {_type_name(value)}>"
                node["path"] = path  # the whole map; ``path[*]`` reads its values
                node["value_path"] = f"{path}[*]"
                target = value.message_type
                child_prefix = f"{path}[*]."
            else:
                node["kind"] = (
                    "message" if target is not None else "enum" if f.enum_type else "scalar"
                )
                node["type"] = _type_name(f)
                if repeated:
                    node["path"] = f"{path}[*]"
                child_prefix = f"{node['path']}."
            if target is not None:
                if target.full_name in ancestors:
                    node["recursive"] = True
                else:
                    node["fields"] = fields(
                        target, child_prefix, (*ancestors, target.full_name)
                    )
            out.append(node)
        return out

    tree = fields(descriptor, "", (descriptor.full_name,))
    return {"message": descriptor.full_name, "fields": tree, "cut": budget[0] <= 0}
