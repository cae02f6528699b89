"""The playground's short plan format: one column per line, turned into a YAML plan.

    id
    imp_id = imp[*].id
    size = concat(imp[*].banner.w, imp[*].banner.h, sep="x")
    floor = coalesce(imp[*].pmp.deals[*].bidfloor, imp[*].bidfloor)
    # a comment

A line is a path, ``name = path`` or ``name = func(arg, ...)``. Arguments are paths,
quoted strings, numbers, ``true`` / ``false`` / ``null`` or nested calls; ``key=value``
arguments are the YAML keys of the function (``sep``, ``literal``, ``literal2``,
``param``: docs/expressions.md). Each line becomes one column of the YAML plan, written on
one line of its own, so that the plan checker's ``file:line`` maps back to the line typed.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

import yaml

__all__ = ["LineSyntaxError", "LineSyntaxErrors", "LinesPlan", "parse_lines", "to_yaml"]

_NAME = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_]*)\s*=(?!=)\s*")
_CALL = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\s*\(")
_KEYWORD = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\s*=(?!=)\s*")
_NUMBER = re.compile(r"[-+]?(\d+\.?\d*([eE][-+]?\d+)?|\.\d+([eE][-+]?\d+)?)")
_CONSTANTS = {"true": True, "false": False, "null": None}
_CLOSE = {"(": ")", "[": "]"}


class LineSyntaxError(ValueError):
    """A line that is not ``[name =] path | call``; ``pos`` is where, within the line."""

    def __init__(self, message: str, pos: int) -> None:
        super().__init__(message)
        self.message = message
        self.pos = pos


@dataclass(frozen=True)
class LinesPlan:
    """Columns of a lines plan: ``columns[i]`` (a YAML column mapping) came from line
    ``lines[i]`` (1-based)."""

    columns: tuple[dict, ...]
    lines: tuple[int, ...]


def _split(text: str, start: int) -> tuple[list[tuple[str, int]], int]:
    """The comma-separated arguments of a call whose ``(`` is just before ``start``; returns
    them with their positions, and the position after the closing ``)``."""
    args: list[tuple[str, int]] = []
    stack: list[str] = []
    quote = ""
    begin = i = start
    while i < len(text):
        ch = text[i]
        if quote:
            if ch == "\\":
                i += 1
            elif ch == quote:
                quote = ""
        elif ch in "\"'":
            quote = ch
        elif ch in "([":
            stack.append(_CLOSE[ch])
        elif ch in ")]":
            if stack:
                if ch != stack.pop():
                    raise LineSyntaxError(f"unbalanced {ch!r}", i)
            elif ch == ")":
                piece = text[begin:i]
                if piece.strip() or args:
                    args.append((piece, begin))
                return args, i + 1
            else:
                raise LineSyntaxError("unbalanced ']'", i)
        elif ch == "," and not stack:
            args.append((text[begin:i], begin))
            begin = i + 1
        i += 1
    if quote:
        raise LineSyntaxError(f"unclosed {quote} string", len(text))
    raise LineSyntaxError("unclosed '(': expected ')'", len(text))


def _literal(text: str) -> tuple[bool, object]:
    """(True, value) when ``text`` is a quoted string, a number or a constant."""
    if text in _CONSTANTS:
        return True, _CONSTANTS[text]
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "\"'":
        body = text[1:-1]
        if text[0] == "'":
            body = body.replace('\\"', '"').replace('"', '\\"').replace("\\'", "'")
        try:
            return True, json.loads(f'"{body}"')
        except json.JSONDecodeError:
            return True, body
    if _NUMBER.fullmatch(text):
        value = float(text)
        return True, int(text) if re.fullmatch(r"[-+]?\d+", text) else value
    return False, None


def _value(text: str, pos: int, depth: int) -> dict:
    """One argument as its YAML form: ``{path}``, ``{literal}`` or ``{expr}``."""
    stripped = text.strip()
    pos += len(text) - len(text.lstrip())
    if not stripped:
        raise LineSyntaxError("an empty argument", pos)
    is_literal, value = _literal(stripped)
    if is_literal:
        return {"literal": value}
    call = _CALL.match(stripped)
    if call:
        return {"expr": _call(stripped, pos, depth + 1)}
    return {"path": stripped}


def _call(text: str, pos: int, depth: int = 0) -> dict:
    if depth > 32:
        raise LineSyntaxError("calls nested more than 32 deep", pos)
    match = _CALL.match(text)
    assert match is not None
    args, end = _split(text, match.end())
    if text[end:].strip():
        raise LineSyntaxError("unexpected text after the call's ')'", pos + end)
    call: dict = {"func": match.group(1)}
    positional: list[dict] = []
    for raw, start in args:
        piece = raw.lstrip()
        at = start + len(raw) - len(piece)
        keyword = _KEYWORD.match(piece)
        if keyword:
            is_literal, value = _literal(piece[keyword.end() :].strip())
            if not is_literal:
                raise LineSyntaxError(
                    f"{keyword.group(1)}= takes a string, number, true, false or null",
                    pos + at + keyword.end(),
                )
            call[keyword.group(1)] = value
        else:
            positional.append(_value(piece, pos + at, depth))
    call["args"] = positional
    return call


def parse_line(text: str) -> dict:
    """One line as a YAML column mapping (``name`` / ``path`` / ``expr``)."""
    column: dict = {}
    body, pos = text, 0
    named = _NAME.match(text)
    if named:
        column["name"] = named.group(1)
        body, pos = text[named.end() :], named.end()
    stripped = body.strip()
    pos += len(body) - len(body.lstrip())
    if not stripped:
        raise LineSyntaxError("expected a path or a function call after '='", len(text))
    if _CALL.match(stripped):
        column["expr"] = _call(stripped, pos)
    else:
        column["path"] = stripped
    return column


def parse_lines(text: str, where: str) -> LinesPlan:
    """Every column of a lines plan; a ValueError listing each bad line (check's format:
    ``where:line: columns[i]: message`` and the line with a caret)."""
    columns: list[dict] = []
    lines: list[int] = []
    problems: list[str] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        try:
            columns.append(parse_line(line))
            lines.append(number)
        except LineSyntaxError as err:
            caret = " " * max(err.pos, 0) + "^"
            problems.append(
                f"{where}:{number}: denormalizer.columns[{len(columns)}]: {err.message}\n"
                f"  {line}\n  {caret}"
            )
            columns.append({"path": line.strip()})  # keeps later columns' indexes
            lines.append(number)
    if problems:
        raise LineSyntaxErrors(problems)
    return LinesPlan(tuple(columns), tuple(lines))


class LineSyntaxErrors(ValueError):
    def __init__(self, problems: list[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = problems


def to_yaml(plan: LinesPlan, proto: dict, *, flow: bool) -> tuple[str, dict[int, int]]:
    """The YAML plan of ``plan`` with ``proto`` as its ``proto:`` section, and the map from
    each YAML line to the line of the lines plan it came from.

    ``flow``: one column per line (for the checker, so that lines map back one to one);
    else the block style a user would write (for the download)."""
    head = yaml.safe_dump({"proto": proto}, sort_keys=False, default_flow_style=False)
    if not plan.columns:  # no column: whole messages, one row per record
        return head, {}
    if not flow:
        body = yaml.safe_dump(
            {"denormalizer": {"columns": list(plan.columns)}},
            sort_keys=False,
            default_flow_style=False,
            allow_unicode=True,
        )
        return head + body, {}
    text = head + "denormalizer:\n  columns:\n"
    first = text.count("\n") + 1
    rows = [f"    - {json.dumps(column, ensure_ascii=False)}\n" for column in plan.columns]
    mapping = {first + i: line for i, line in enumerate(plan.lines)}
    return text + "".join(rows), mapping
