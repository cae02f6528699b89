"""The path language: text such as ``imp[*].pmp.deals[?(.price > 1.5)].id`` → a syntax tree.

This module is pure syntax. It knows nothing about descriptors: whether ``imp`` is a field,
whether ``[2]`` indexes a list or is an integer map key, and whether a slice is applied to a
map are decided by the plan compiler, which reports those errors with the ``pos`` kept on
every node.

Grammar (bufarrow-behaviour §1.1, §1.2, §1.6)::

    path      := [ "(" FullMessageName ")" "." ] field { accessor }
               | "(" FullMessageName ")"            -- root only
               | ""                                 -- root only
    field     := fieldname | extension
    extension := "[" ident { "." ident } "]"         -- an extension by full name: [pkg.ext]
    accessor  := "." field | extension | "[" index "]" | "[?(" predicate ")]"
    index     := integer | string | "true" | "false" | "*"
               | [integer] ":" [integer] [ ":" [integer] ]

    predicate := and { "||" and }
    and       := unary { "&&" unary }
    unary     := "!" unary | primary
    primary   := "(" predicate ")" | atom [ cmp atom ]
    atom      := "." field { "." field } | string | integer | float | "true" | "false"
    cmp       := "==" | "!=" | "<" | "<=" | ">" | ">="

Lexical rules:

* spaces and tabs between tokens are skipped (``tags[ 1 ]`` is ``tags[1]``); the raw text,
  spaces included, is kept as :attr:`Path.text` because it is the default column name;
* identifier ``[A-Za-z_][A-Za-z0-9_]*``;
* integer: octal ``-?0[0-7]+`` (``010`` is 8), hex ``-?0[xX][0-9a-fA-F]+``, decimal
  ``-?(0|[1-9][0-9]*)``; the ``-`` belongs to the literal; ``08``, ``0b1``, ``0o7`` are errors;
  index and slice literals must fit in int64;
* float (``1.5``, ``2e3``, ``-0.5e-2``) is lexed everywhere but accepted only in predicates;
* string: single or double quotes with escapes ``\\a \\b \\f \\n \\r \\t \\v \\\\ \\' \\" \\?``,
  octal ``\\ooo`` (1–3 digits), ``\\xHH`` (1–2), ``\\uHHHH``, ``\\UHHHHHHHH``. Octal and ``\\x``
  escapes are bytes, so ``"\\xc3\\xa9"`` is ``"é"``; the decoded bytes must be valid UTF-8.
  A raw newline or NUL inside a string is an error.

Where wirearrow differs from the reference: a slice that selects the whole list (``[:]``,
``[::]``, ``[::1]``, ``[0:]``, ``[0::1]``) *is* the wildcard and parses to
:class:`WildcardStep`; the reference keeps ``[0:]`` as a separate range, which only changed
how its columns were grouped into fan-outs.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import NoReturn

from wirearrow.errors import PathError

__all__ = [
    "And",
    "Compare",
    "FieldStep",
    "FilterStep",
    "IndexStep",
    "KeyStep",
    "Literal",
    "Not",
    "Or",
    "Path",
    "Predicate",
    "RelPath",
    "SliceStep",
    "Step",
    "Truthy",
    "WildcardStep",
    "format_path",
    "parse_path",
]

_INT64_MIN = -(1 << 63)
_INT64_MAX = (1 << 63) - 1
# Predicate literals may be compared with uint64 fields, so they get the union of both ranges.
_UINT64_MAX = (1 << 64) - 1

# --------------------------------------------------------------------------------------------
# Syntax tree.  ``pos`` is always a character offset into ``Path.text``.


@dataclass(frozen=True, slots=True)
class FieldStep:
    """``.name`` (or the first name of the path); ``pos`` is the name's first character."""

    name: str
    pos: int


@dataclass(frozen=True, slots=True)
class IndexStep:
    """``[N]`` / ``[-N]``: a list position, or an integer key when the field is a map.

    ``pos`` is the ``[``.
    """

    index: int
    pos: int


@dataclass(frozen=True, slots=True)
class KeyStep:
    """``["k"]``, ``['k']``, ``[true]``, ``[false]``: a string or bool map key; ``pos`` is the ``[``."""

    key: str | bool
    pos: int


@dataclass(frozen=True, slots=True)
class WildcardStep:
    """``[*]``, or a slice that selects the whole list; ``pos`` is the ``[``."""

    pos: int


@dataclass(frozen=True, slots=True)
class SliceStep:
    """``[start:stop:step]`` with Python slice semantics, any part omitted is ``None``.

    Never all-default (that is a :class:`WildcardStep`); ``step`` is never 0. ``pos`` is the ``[``.
    """

    start: int | None
    stop: int | None
    step: int | None
    pos: int


@dataclass(frozen=True, slots=True)
class FilterStep:
    """``[?( predicate )]``; ``pos`` is the ``[``."""

    predicate: Predicate
    pos: int


@dataclass(frozen=True, slots=True)
class RelPath:
    """``.a.b`` inside a predicate, relative to the element being filtered; ``pos`` is the first ``.``."""

    fields: tuple[str, ...]
    pos: int


@dataclass(frozen=True, slots=True)
class Literal:
    """A string, integer, float or bool literal inside a predicate."""

    value: str | int | float | bool
    pos: int


@dataclass(frozen=True, slots=True)
class Compare:
    """``left op right`` with ``op`` one of ``== != < <= > >=``; ``pos`` is the operator."""

    op: str
    left: RelPath | Literal
    right: RelPath | Literal
    pos: int


@dataclass(frozen=True, slots=True)
class Truthy:
    """A lone atom used as a condition (``[?(.w)]``); ``pos`` is the atom's."""

    operand: RelPath | Literal
    pos: int


@dataclass(frozen=True, slots=True)
class Not:
    """``!operand``; ``pos`` is the ``!``."""

    operand: Predicate
    pos: int


@dataclass(frozen=True, slots=True)
class And:
    """``left && right``; ``pos`` is the ``&&``."""

    left: Predicate
    right: Predicate
    pos: int


@dataclass(frozen=True, slots=True)
class Or:
    """``left || right``; ``pos`` is the ``||``."""

    left: Predicate
    right: Predicate
    pos: int


Predicate = Compare | Truthy | Not | And | Or
Step = FieldStep | IndexStep | KeyStep | WildcardStep | SliceStep | FilterStep


@dataclass(frozen=True, slots=True)
class Path:
    """A parsed path.

    ``root`` is the full message name written as ``(pkg.Msg)`` (without the parentheses), or
    ``None`` when the root is implicit; ``root_pos`` is the offset of that name (0 without one).
    """

    text: str
    root: str | None
    root_pos: int
    steps: tuple[Step, ...]


# --------------------------------------------------------------------------------------------
# Lexer


class _Kind(enum.Enum):
    IDENT = "identifier"
    INT = "integer"
    FLOAT = "float"
    STRING = "string"
    PUNCT = "punctuation"
    EOF = "end of path"


@dataclass(frozen=True, slots=True)
class _Token:
    kind: _Kind
    text: str  # the source text, for messages; the operator itself for PUNCT
    pos: int
    value: str | int | float | None = None

    def is_punct(self, text: str) -> bool:
        return self.kind is _Kind.PUNCT and self.text == text

    def describe(self) -> str:
        if self.kind is _Kind.EOF:
            return "end of path"
        if self.kind is _Kind.PUNCT:
            return f"'{self.text}'"
        if self.kind is _Kind.IDENT:
            return f"identifier '{self.text}'"
        return f"{self.kind.value} {self.text}"


_DIGITS = frozenset("0123456789")
_OCTAL = frozenset("01234567")
_HEX = frozenset("0123456789abcdefABCDEF")
_IDENT_START = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_")
_IDENT_CHARS = _IDENT_START | _DIGITS
_TWO_CHAR_PUNCT = frozenset({"==", "!=", "<=", ">=", "&&", "||"})
_ONE_CHAR_PUNCT = frozenset(".[]()*:?!<>")
# Single characters that are only half of an operator: say which one was meant.
_HALF_OPERATORS = {"=": "==", "&": "&&", "|": "||"}
_SIMPLE_ESCAPES = {
    "a": b"\a",
    "b": b"\b",
    "f": b"\f",
    "n": b"\n",
    "r": b"\r",
    "t": b"\t",
    "v": b"\v",
    "\\": b"\\",
    "'": b"'",
    '"': b'"',
    "?": b"?",
}
_COMPARE_OPS = frozenset({"==", "!=", "<", "<=", ">", ">="})
# A filter is untrusted input, parsed and later compiled and evaluated recursively: its
# predicate tree (every (, !, && and ||) is at most this deep.
MAX_FILTER_DEPTH = 64


class _Lexer:
    """Produces one token at a time, on demand.

    Lexing lazily (rather than tokenising the whole text first) keeps errors in reading
    order: a syntax error is reported before a lexical error further to its right.
    """

    __slots__ = ("_peeked", "i", "text")

    def __init__(self, text: str) -> None:
        self.text = text
        self.i = 0
        self._peeked: _Token | None = None

    def error(self, message: str, pos: int) -> NoReturn:
        raise PathError(message, self.text, pos)

    def peek(self) -> _Token:
        if self._peeked is None:
            self._peeked = self._lex()
        return self._peeked

    def advance(self) -> _Token:
        token = self.peek()
        self._peeked = None
        return token

    def _lex(self) -> _Token:
        text, n = self.text, len(self.text)
        while self.i < n and text[self.i] in " \t":
            self.i += 1
        start = self.i
        if start >= n:
            return _Token(_Kind.EOF, "", n)
        c = text[start]
        if c in _IDENT_START:
            end = start + 1
            while end < n and text[end] in _IDENT_CHARS:
                end += 1
            self.i = end
            return _Token(_Kind.IDENT, text[start:end], start, text[start:end])
        if c in _DIGITS or (c == "-" and start + 1 < n and text[start + 1] in _DIGITS):
            return self._number(start)
        if c in "\"'":
            return self._string(start)
        pair = text[start : start + 2]
        if pair in _TWO_CHAR_PUNCT:
            self.i = start + 2
            return _Token(_Kind.PUNCT, pair, start)
        if c in _ONE_CHAR_PUNCT:
            self.i = start + 1
            return _Token(_Kind.PUNCT, c, start)
        if c in _HALF_OPERATORS:
            self.error(f"unexpected '{c}' (did you mean '{_HALF_OPERATORS[c]}'?)", start)
        if c == "-":
            self.error("'-' must be directly followed by digits (a negative integer)", start)
        self.error(f"illegal character {c!r}", start)

    def _skip(self, i: int, chars: frozenset[str]) -> int:
        while i < len(self.text) and self.text[i] in chars:
            i += 1
        return i

    def _number(self, start: int) -> _Token:
        text, n = self.text, len(self.text)
        body = start + 1 if text[start] == "-" else start
        sign = -1 if body > start else 1
        is_hex = text.startswith(("0x", "0X"), body)
        is_float = False
        if is_hex:
            end = self._skip(body + 2, _HEX)
        else:
            end = self._skip(body, _DIGITS)
            # A '.' is a decimal point only before a digit: in ``tags[0].x`` it is an accessor.
            if end + 1 < n and text[end] == "." and text[end + 1] in _DIGITS:
                end = self._skip(end + 1, _DIGITS)
                is_float = True
            if end < n and text[end] in "eE":
                exp = end + 1
                if exp < n and text[exp] in "+-":
                    exp += 1
                if exp < n and text[exp] in _DIGITS:
                    end = self._skip(exp, _DIGITS)
                    is_float = True
        # Letters glued to a number make one bad literal (``12ab``, ``0b101``), reported as
        # such rather than as a number followed by a puzzling identifier.
        tail = self._skip(end, _IDENT_CHARS)
        lexeme = text[start:tail]
        self.i = tail
        if tail > end:
            if text[body : body + 2].lower() in ("0b", "0o"):
                self.error(
                    f"unsupported literal {lexeme}: write integers in decimal, hex (0x…) "
                    "or octal (leading 0)",
                    start,
                )
            self.error(f"invalid number literal {lexeme}", start)
        if is_float:
            value = float(lexeme)
            if not math.isfinite(value):
                self.error(f"float literal {lexeme} is out of range", start)
            return _Token(_Kind.FLOAT, lexeme, start, value)
        if end - body > 100:  # far outside 64 bits (and int() refuses over 4300 digits)
            self.error(f"integer literal {lexeme[:40]}... ({end - body:,} digits) is out of range", start)
        if is_hex:
            if end == body + 2:
                self.error(f"hex literal {lexeme} has no digits", start)
            return _Token(_Kind.INT, lexeme, start, sign * int(text[body + 2 : end], 16))
        digits = text[body:end]
        if digits == "0" or digits[0] != "0":
            return _Token(_Kind.INT, lexeme, start, sign * int(digits, 10))
        if all(ch in _OCTAL for ch in digits):
            return _Token(_Kind.INT, lexeme, start, sign * int(digits, 8))
        self.error(
            f"invalid octal literal {lexeme} (a leading 0 means octal: digits 0-7 only)", start
        )

    def _string(self, start: int) -> _Token:
        text, n = self.text, len(self.text)
        quote = text[start]
        out = bytearray()
        i = start + 1
        while True:
            if i >= n:
                self.error("unterminated string literal", start)
            c = text[i]
            if c == quote:
                i += 1
                break
            if c == "\n" or c == "\0":
                name = "newline" if c == "\n" else "NUL"
                self.error(f"raw {name} in string literal (write it as an escape)", i)
            if c == "\\":
                i = self._escape(i, out)
                continue
            try:
                out += c.encode("utf-8")
            except UnicodeEncodeError:  # a lone surrogate smuggled in via surrogateescape
                self.error("string literal is not valid UTF-8", i)
            i += 1
        try:
            value = out.decode("utf-8")
        except UnicodeDecodeError:
            self.error("string literal is not valid UTF-8 (check its \\x / octal escapes)", start)
        self.i = i
        return _Token(_Kind.STRING, text[start:i], start, value)

    def _escape(self, backslash: int, out: bytearray) -> int:
        """Decode the escape at ``text[backslash]``; append its bytes; return the next index."""
        text, n = self.text, len(self.text)
        i = backslash + 1
        if i >= n:
            self.error("unterminated string literal", backslash)
        c = text[i]
        if c in _SIMPLE_ESCAPES:
            out += _SIMPLE_ESCAPES[c]
            return i + 1
        if c in _OCTAL:
            end = i
            while end < n and end < i + 3 and text[end] in _OCTAL:
                end += 1
            value = int(text[i:end], 8)
            if value > 0xFF:
                self.error(f"octal escape \\{text[i:end]} is larger than \\377", backslash)
            out.append(value)
            return end
        if c == "x":
            end = i + 1
            while end < n and end < i + 3 and text[end] in _HEX:
                end += 1
            if end == i + 1:
                self.error("\\x escape needs 1 or 2 hex digits", backslash)
            out.append(int(text[i + 1 : end], 16))
            return end
        if c in "uU":
            width = 4 if c == "u" else 8
            digits = text[i + 1 : i + 1 + width]
            if len(digits) != width or not all(ch in _HEX for ch in digits):
                self.error(f"\\{c} escape needs exactly {width} hex digits", backslash)
            code = int(digits, 16)
            if code > 0x10FFFF or 0xD800 <= code <= 0xDFFF:
                self.error(f"\\{c}{digits} is not a Unicode scalar value", backslash)
            out += chr(code).encode("utf-8")
            return i + 1 + width
        self.error(f"unknown escape sequence \\{c}", backslash)


# --------------------------------------------------------------------------------------------
# Parser


class _Parser:
    """Recursive descent over :class:`_Lexer`, one token of lookahead."""

    __slots__ = ("depth", "lexer", "text")

    def __init__(self, text: str) -> None:
        self.text = text
        self.lexer = _Lexer(text)
        self.depth = 0  # ( and ! open around the current token

    def nest(self, pos: int) -> None:
        self.depth += 1
        if self.depth > MAX_FILTER_DEPTH:
            self.error(f"filter nested deeper than {MAX_FILTER_DEPTH} levels", pos)

    def error(self, message: str, pos: int) -> NoReturn:
        raise PathError(message, self.text, pos)

    def expect_close_bracket(self, context: str) -> None:
        token = self.lexer.advance()
        if token.is_punct("]"):
            return
        if token.kind is _Kind.EOF:
            self.error(f"unclosed '[': expected ']' after {context}", token.pos)
        self.error(f"expected ']' after {context}, found {token.describe()}", token.pos)

    # path := [ "(" FullMessageName ")" "." ] fieldname { accessor } | "(" ... ")" | ""
    def path(self) -> Path:
        lexer = self.lexer
        root: str | None = None
        root_pos = 0
        steps: list[Step] = []
        first = lexer.peek()
        if first.kind is _Kind.EOF:
            return Path(self.text, None, 0, ())
        if first.is_punct("("):
            root, root_pos = self.root()
            after = lexer.advance()
            if after.kind is _Kind.EOF:
                return Path(self.text, root, root_pos, ())
            if not after.is_punct("."):
                self.error(
                    f"expected '.' or end of path after the root message, found {after.describe()}",
                    after.pos,
                )
            steps.append(self.field_after_dot(after))
        elif first.is_punct("."):
            self.error(
                "a path starts with a field name, not '.' (it is relative to the root message)",
                first.pos,
            )
        elif first.kind is _Kind.IDENT:
            lexer.advance()
            steps.append(FieldStep(first.text, first.pos))
        elif first.is_punct("["):
            steps.append(self.bracket(first_step=True))
        else:
            self.error(
                f"a path starts with a field name or '(', found {first.describe()}", first.pos
            )

        while True:
            token = lexer.peek()
            if token.kind is _Kind.EOF:
                return Path(self.text, root, root_pos, tuple(steps))
            if token.is_punct("."):
                steps.append(self.field_after_dot(lexer.advance()))
            elif token.is_punct("["):
                steps.append(self.bracket())
            elif token.kind is _Kind.IDENT:
                self.error(f"missing '.' before field name '{token.text}'", token.pos)
            else:
                self.error(f"expected '.', '[' or end of path, found {token.describe()}", token.pos)

    # "(" ident { "." ident } ")"
    def root(self) -> tuple[str, int]:
        self.lexer.advance()  # "("
        parts: list[str] = []
        name_pos = self.lexer.peek().pos
        while True:
            token = self.lexer.advance()
            if token.kind is not _Kind.IDENT:
                self.error(
                    f"expected a message name inside '( )', found {token.describe()}", token.pos
                )
            parts.append(token.text)
            token = self.lexer.advance()
            if token.is_punct(")"):
                return ".".join(parts), name_pos
            if not token.is_punct("."):
                self.error(
                    f"expected ')' after the root message name, found {token.describe()}",
                    token.pos,
                )

    def field_after_dot(self, dot: _Token) -> FieldStep:
        token = self.lexer.advance()
        if token.kind is _Kind.IDENT:
            return FieldStep(token.text, token.pos)
        if token.is_punct("[") and self.lexer.peek().kind is _Kind.IDENT:
            return self.extension(token.pos)
        if token.kind is _Kind.EOF:
            self.error("trailing '.': expected a field name after it", dot.pos)
        if token.is_punct("."):
            self.error("double '.': expected a field name between the dots", token.pos)
        self.error(f"expected a field name after '.', found {token.describe()}", token.pos)

    # "[" ident { "." ident } "]": an extension field, by its full name (the "[" is read)
    def extension(self, open_pos: int) -> FieldStep:
        parts: list[str] = []
        while True:
            token = self.lexer.advance()
            if token.kind is not _Kind.IDENT:
                self.error(
                    f"expected the extension's full name inside '[ ]', found {token.describe()}",
                    token.pos,
                )
            parts.append(token.text)
            if not self.lexer.peek().is_punct("."):
                break
            self.lexer.advance()
        self.expect_close_bracket("the extension's name")
        return FieldStep(f"[{'.'.join(parts)}]", open_pos)

    # "[" index "]" | "[?(" predicate ")]" | extension
    def bracket(self, first_step: bool = False) -> Step:
        lexer = self.lexer
        open_pos = lexer.advance().pos
        token = lexer.peek()
        if first_step:
            if token.kind is not _Kind.IDENT or token.text in ("true", "false"):
                self.error(
                    "a path starts with a field name, an extension ([pkg.ext]) or '(', found "
                    f"'[' and {token.describe()}",
                    token.pos,
                )
            return self.extension(open_pos)
        if token.is_punct("?"):
            lexer.advance()
            paren = lexer.advance()
            if not paren.is_punct("("):
                self.error(f"expected '(' after '[?', found {paren.describe()}", paren.pos)
            predicate = self.predicate()
            self.expect_paren_close("the filter predicate")
            self.expect_close_bracket("the filter")
            if _depth(predicate) > MAX_FILTER_DEPTH:  # long && / || chains nest too
                self.error(f"filter nested deeper than {MAX_FILTER_DEPTH} levels", open_pos)
            return FilterStep(predicate, open_pos)
        if token.is_punct("*"):
            lexer.advance()
            self.expect_close_bracket("'*'")
            return WildcardStep(open_pos)
        if token.kind is _Kind.STRING:
            lexer.advance()
            self.expect_close_bracket("the key")
            assert isinstance(token.value, str)
            return KeyStep(token.value, open_pos)
        if token.kind is _Kind.IDENT:
            if token.text in ("true", "false"):
                lexer.advance()
                self.expect_close_bracket("the key")
                return KeyStep(token.text == "true", open_pos)
            # an extension field by its full name (a string key is quoted: ["k"])
            return self.extension(open_pos)
        if token.kind is _Kind.INT or token.is_punct(":"):
            return self.index_or_slice(open_pos)
        if token.kind is _Kind.FLOAT:
            self.float_in_path(token)
        if token.kind is _Kind.EOF:
            self.error("unclosed '[': expected an index, key, '*', slice or filter", token.pos)
        self.error(
            f"expected an index, key, '*', slice or filter inside '[ ]', found {token.describe()}",
            token.pos,
        )

    def float_in_path(self, token: _Token) -> NoReturn:
        self.error(
            f"float literal {token.text} is not an index (floats are allowed only inside "
            "filter predicates [?( … )])",
            token.pos,
        )

    def index_int(self, high: int = _INT64_MAX) -> int:
        token = self.lexer.advance()
        assert isinstance(token.value, int)
        if not _INT64_MIN <= token.value <= high:
            kind = "int64" if high == _INT64_MAX else "int64 or uint64"
            self.error(f"integer {token.text} does not fit in {kind}", token.pos)
        return token.value

    def optional_slice_int(self, high: int = _INT64_MAX) -> int | None:
        token = self.lexer.peek()
        if token.kind is _Kind.INT:
            return self.index_int(high)
        if token.kind is _Kind.FLOAT:
            self.float_in_path(token)
        return None

    # integer | [integer] ":" [integer] [ ":" [integer] ]
    def index_or_slice(self, open_pos: int) -> Step:
        lexer = self.lexer
        start_pos = lexer.peek().pos
        # A lone integer may be a uint64 map key; slice bounds are int64.
        start = self.optional_slice_int(_UINT64_MAX)
        if not lexer.peek().is_punct(":"):
            self.expect_close_bracket("the index")
            assert start is not None
            return IndexStep(start, open_pos)
        if start is not None and start > _INT64_MAX:
            self.error(f"slice bound {start} does not fit in int64", start_pos)
        lexer.advance()
        stop = self.optional_slice_int()
        step: int | None = None
        if lexer.peek().is_punct(":"):
            lexer.advance()
            step_pos = lexer.peek().pos
            step = self.optional_slice_int()
            if step == 0:
                self.error("slice step must not be zero", step_pos)
        self.expect_close_bracket("the slice")
        if start in (None, 0) and stop is None and step in (None, 1):
            return WildcardStep(open_pos)
        return SliceStep(start, stop, step, open_pos)

    # predicate := and { "||" and }
    def predicate(self) -> Predicate:
        left = self.conjunction()
        while self.lexer.peek().is_punct("||"):
            op = self.lexer.advance()
            left = Or(left, self.conjunction(), op.pos)
        return left

    # and := unary { "&&" unary }
    def conjunction(self) -> Predicate:
        left = self.unary()
        while self.lexer.peek().is_punct("&&"):
            op = self.lexer.advance()
            left = And(left, self.unary(), op.pos)
        return left

    # unary := "!" unary | primary
    def unary(self) -> Predicate:
        if self.lexer.peek().is_punct("!"):
            bang = self.lexer.advance()
            self.nest(bang.pos)
            operand = self.unary()
            self.depth -= 1
            return Not(operand, bang.pos)
        return self.primary()

    def expect_paren_close(self, context: str) -> None:
        token = self.lexer.advance()
        if not token.is_punct(")"):
            self.error(f"expected ')' to close {context}, found {token.describe()}", token.pos)

    # primary := "(" predicate ")" | atom [ cmp atom ]
    def primary(self) -> Predicate:
        if self.lexer.peek().is_punct("("):
            self.nest(self.lexer.advance().pos)
            inner = self.predicate()
            self.expect_paren_close("'('")
            self.depth -= 1
            return inner
        left = self.atom()
        token = self.lexer.peek()
        if token.kind is _Kind.PUNCT and token.text in _COMPARE_OPS:
            self.lexer.advance()
            return Compare(token.text, left, self.atom(), token.pos)
        return Truthy(left, left.pos)

    # atom := "." field { "." field } | string | integer | float | true | false
    def atom(self) -> RelPath | Literal:
        lexer = self.lexer
        token = lexer.advance()
        if token.is_punct("."):
            fields = [self.field_after_dot(token).name]
            while lexer.peek().is_punct("."):
                fields.append(self.field_after_dot(lexer.advance()).name)
            after = lexer.peek()
            if after.is_punct("["):
                self.error("indexing is not supported inside filter predicates", after.pos)
            return RelPath(tuple(fields), token.pos)
        if token.kind is _Kind.STRING or token.kind is _Kind.FLOAT:
            assert token.value is not None
            return Literal(token.value, token.pos)
        if token.kind is _Kind.INT:
            assert isinstance(token.value, int)
            if not _INT64_MIN <= token.value <= _UINT64_MAX:
                self.error(f"integer {token.text} does not fit in int64 or uint64", token.pos)
            return Literal(token.value, token.pos)
        if token.kind is _Kind.IDENT:
            if token.text in ("true", "false"):
                return Literal(token.text == "true", token.pos)
            self.error(
                f"bare identifier '{token.text}' in a filter predicate; did you forget a "
                f"leading '.'? (.{token.text})",
                token.pos,
            )
        self.error(
            "expected a field (.name), a literal or '(' in the filter predicate, found "
            f"{token.describe()}",
            token.pos,
        )


def _depth(predicate: Predicate) -> int:
    """Height of a predicate tree, without recursion."""
    deepest = 0
    stack: list[tuple[Predicate, int]] = [(predicate, 1)]
    while stack:
        p, d = stack.pop()
        deepest = max(deepest, d)
        if isinstance(p, And | Or):
            stack += [(p.left, d + 1), (p.right, d + 1)]
        elif isinstance(p, Not):
            stack.append((p.operand, d + 1))
    return deepest


def parse_path(text: str) -> Path:
    """Parse ``text`` into a :class:`Path`.

    Raises :class:`~wirearrow.errors.PathError` whose ``pos`` is the offset of the offending
    character (the end of the text when something is missing there).
    """
    return _Parser(text).path()


# --------------------------------------------------------------------------------------------
# Canonical text


def _quote(value: str) -> str:
    out = ['"']
    for ch in value:
        if ch in '"\\':
            out.append("\\" + ch)
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\t":
            out.append("\\t")
        elif ch == "\r":
            out.append("\\r")
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\x{ord(ch):02x}")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def _format_atom(atom: RelPath | Literal) -> str:
    if isinstance(atom, RelPath):
        return "." + ".".join(atom.fields)
    value = atom.value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return _quote(value)
    return repr(value)  # int, or a finite float whose repr the lexer reads back


# Binding strength, loosest first; used to add only the parentheses the tree needs.
_OR, _AND, _NOT = 1, 2, 3


def _format_predicate(node: Predicate, context: int = _OR) -> str:
    """``node`` as text, parenthesised when it binds more loosely than ``context`` requires."""
    strength = _NOT
    if isinstance(node, Or):
        strength = _OR
        text = f"{_format_predicate(node.left, _OR)} || {_format_predicate(node.right, _AND)}"
    elif isinstance(node, And):
        strength = _AND
        text = f"{_format_predicate(node.left, _AND)} && {_format_predicate(node.right, _NOT)}"
    elif isinstance(node, Not):
        inner = _format_predicate(node.operand, _NOT)
        # "!.w > 2" parses as !(.w > 2), but nobody reads it that way: spell it out.
        text = f"!({inner})" if isinstance(node.operand, Compare) else f"!{inner}"
    elif isinstance(node, Compare):
        text = f"{_format_atom(node.left)} {node.op} {_format_atom(node.right)}"
    else:
        text = _format_atom(node.operand)
    return f"({text})" if strength < context else text


def format_path(steps: Iterable[Step]) -> str:
    """The canonical text of a step sequence, e.g. ``imp[*].pmp.deals[2]``.

    No spaces, decimal integers, double-quoted keys. Parsing the result gives the same steps
    (positions aside), so the text can name hidden columns and appear in error paths.
    """
    out: list[str] = []
    for step in steps:
        if isinstance(step, FieldStep):
            # an extension ([pkg.ext]) needs no dot
            out.append(f".{step.name}" if out and not step.name.startswith("[") else step.name)
        elif isinstance(step, IndexStep):
            out.append(f"[{step.index}]")
        elif isinstance(step, KeyStep):
            key = step.key
            if isinstance(key, bool):
                out.append("[true]" if key else "[false]")
            else:
                out.append(f"[{_quote(key)}]")
        elif isinstance(step, WildcardStep):
            out.append("[*]")
        elif isinstance(step, SliceStep):
            start = "" if step.start is None else str(step.start)
            stop = "" if step.stop is None else str(step.stop)
            stride = "" if step.step is None else f":{step.step}"
            out.append(f"[{start}:{stop}{stride}]")
        elif isinstance(step, FilterStep):
            out.append(f"[?({_format_predicate(step.predicate)})]")
        else:
            raise TypeError(f"not a path step: {step!r}")
    return "".join(out)
