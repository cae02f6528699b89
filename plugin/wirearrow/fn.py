"""Expression builders: one per function of the library, for computed columns in Python.

    import wirearrow as wa
    from wirearrow import fn

    wa.Column(name="size", expr=fn.concat("imp[*].banner.w", "imp[*].banner.h", sep="x"))
    wa.Column(name="day", expr=fn.epoch_to_date("ts", unit="ms"))

Each builder returns the :class:`~wirearrow.plan.expressions.Call` that the YAML form of the
same function builds (docs/expressions.md lists them). Value arguments are expressions, paths
(a bare string naming a root field or containing ``.`` or ``[``) or literals (:func:`lit` and
:func:`path` make the choice explicit); keywords fill the function's other settings
(``sep``, ``unit``, ...).

The builders are made from the function registry (``wirearrow.plan.expressions.FUNCTIONS``)
when this module is imported: a function added to the library has its builder here with no
other change. Names that are Python keywords take a trailing underscore (``and_``, ``or_``,
``not_``); the others keep the function's name (``fn.max``, ``fn.len``), which is why they
live in this namespace and not at the top of ``wirearrow``.
"""

from __future__ import annotations

import keyword
from collections.abc import Callable

from wirearrow.plan import functions as _library  # noqa: F401  (registers the library)
from wirearrow.plan.expressions import FUNCTIONS, Call, Function, lit, path

__all__ = ["lit", "path"]


def _builder(function: Function) -> Callable[..., Call]:
    def build(*args: object, **kwargs: object) -> Call:
        return function.build(*args, **kwargs)

    name = function.name + "_" if keyword.iskeyword(function.name) else function.name
    build.__name__ = build.__qualname__ = name
    build.__module__ = __name__
    build.__doc__ = function.doc or f"The expression function {function.name!r}."
    build.__signature__ = function.signature  # type: ignore[attr-defined]
    return build


for _function in FUNCTIONS.values():
    _build = _builder(_function)
    globals()[_build.__name__] = _build
    __all__.append(_build.__name__)
__all__.sort()
del _function, _build


def __getattr__(name: str) -> Callable[..., Call]:
    # For type checkers: every builder is made above, at import; a name that is none is
    # still an AttributeError.
    raise AttributeError(f"module {__name__!r} has no function {name!r}")
