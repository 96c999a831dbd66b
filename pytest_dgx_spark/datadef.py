"""``@define``: a standard dataclass, made in about 40 % of the time ``@dataclass`` takes.

``@dataclass`` writes ``__init__``, ``__repr__`` and ``__eq__`` as source text and compiles each with
``exec`` (CPython 3.11 and 3.12), some 0.25 ms a method. A ``pytest --spark-preflight`` run defines
about 125 of our dataclasses (typed facts are records), so the two methods every class gets but
few instances ever use cost ~30 ms of every run. Here only ``__init__`` is generated (its speed
matters: a G1 scan builds thousands of records); ``__eq__``, ``__repr__`` and ``__hash__`` are one
shared function each, reading the field names stored on the class, with the generated methods'
meaning:

- ``==`` compares the ``compare`` fields as tuples, only between instances of the same class;
- ``repr`` is ``Name(field=value, …)`` over the ``repr`` fields, safe against recursion;
- a frozen class hashes its fields' tuple; an unfrozen one is unhashable;
- a method the class body writes itself is kept, as ``@dataclass`` keeps it.

The result is a real dataclass: ``dataclasses.fields``, ``replace``, ``asdict`` and pytest's
dataclass diff work on it, and mypy reads ``@define`` as ``@dataclass`` (PEP 681).
"""

from __future__ import annotations

import dataclasses
import reprlib
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar, cast, overload

if TYPE_CHECKING:  # typing has it from 3.11; at run time it only marks the function for type checkers
    from typing_extensions import dataclass_transform
else:

    def dataclass_transform(**_: Any) -> Any:
        return lambda f: f


T = TypeVar("T", bound=type)

_COMPARE = "__define_compare__"
_REPR = "__define_repr__"
_HASH = "__define_hash__"
_SCOPE = "__define_scope__"


def scope_of(cls: type) -> dict[str, Any]:
    """The namespace ``cls`` was written in, where its string annotations are evaluated. ``@define``
    keeps it when the class is made: a harness may drop the module from ``sys.modules`` while the
    class lives on (pytester's in-process runs restore ``sys.modules`` after each run), and then
    ``sys.modules`` no longer leads to it. Other classes: their module in ``sys.modules``."""
    kept: dict[str, Any] | None = cls.__dict__.get(_SCOPE)
    if kept is not None:
        return kept
    module = sys.modules.get(cls.__module__)
    return vars(module) if module is not None else {}


def _eq(self: Any, other: Any) -> Any:
    if other.__class__ is not self.__class__:
        return NotImplemented
    names = getattr(self, _COMPARE)
    return tuple(getattr(self, n) for n in names) == tuple(getattr(other, n) for n in names)


@reprlib.recursive_repr()
def _repr(self: Any) -> str:
    shown = ", ".join(f"{n}={getattr(self, n)!r}" for n in getattr(self, _REPR))
    return f"{type(self).__qualname__}({shown})"


def _hash(self: Any) -> int:
    return hash(tuple(getattr(self, n) for n in getattr(self, _HASH)))


def _made(cls: T, frozen: bool) -> T:
    body = dict(cls.__dict__)  # before dataclass() adds to it
    # a __hash__ the body wrote itself (not the None Python sets for a body that writes __eq__)
    own_hash = "__hash__" in body and not (body["__hash__"] is None and "__eq__" in body)
    made: Any = dataclasses.dataclass(cls, repr=False, eq=False, frozen=frozen)
    fields = dataclasses.fields(made)
    setattr(made, _COMPARE, tuple(f.name for f in fields if f.compare))
    setattr(made, _REPR, tuple(f.name for f in fields if f.repr))
    setattr(made, _HASH, tuple(f.name for f in fields if (f.compare if f.hash is None else f.hash)))
    setattr(made, _SCOPE, scope_of(made))  # its module is in sys.modules while the class is made
    if "__eq__" not in body:
        made.__eq__ = _eq
    if "__repr__" not in body:
        made.__repr__ = _repr
    if not own_hash:
        made.__hash__ = _hash if frozen else None
    return cast(T, made)


@overload
def define(cls: T, /) -> T: ...


@overload
def define(*, frozen: bool = False) -> Callable[[T], T]: ...


@dataclass_transform(field_specifiers=(dataclasses.field, dataclasses.Field))
def define(cls: T | None = None, /, *, frozen: bool = False) -> T | Callable[[T], T]:
    """``@define`` or ``@define(frozen=True)``: ``@dataclass`` with the same meaning (see the module)."""
    if cls is None:
        return lambda c: _made(c, frozen)
    return _made(cls, frozen)
