"""``@define``: a standard dataclass, made in about a fifth of the time ``@dataclass`` takes.

``@dataclass`` writes ``__init__``, ``__repr__`` and ``__eq__`` (and, frozen, ``__setattr__`` and
``__delattr__``) as source text and compiles each with ``exec`` (CPython 3.11 and 3.12), some
0.2 ms a method. A ``pytest --spark-preflight`` run defines about 125 of our dataclasses (typed facts
are records), and many of them are never instantiated in a given run (a G10 node table on a machine
alone, a G1 verdict for a stack that is not there), so the methods cost tens of ms of every run.
Here:

- ``__init__`` is compiled on the class's first instantiation, from its fields, with the generated
  method's meaning (positional then keyword-only parameters, defaults, ``default_factory``,
  ``init=False`` fields, ``__post_init__``); its speed matters (a G1 scan builds thousands of
  records), so it is the same straight-line code ``@dataclass`` writes, only later;
- ``__eq__``, ``__repr__``, ``__hash__`` and a frozen class's ``__setattr__``/``__delattr__`` are one
  shared function each, reading the field names stored on the class:

  - ``==`` compares the ``compare`` fields as tuples, only between instances of the same class;
  - ``repr`` is ``Name(field=value, …)`` over the ``repr`` fields, safe against recursion;
  - a frozen class hashes its fields' tuple and refuses assignment and deletion of any attribute
    (``FrozenInstanceError``); an unfrozen one is unhashable;
- a method the class body writes itself is kept, as ``@dataclass`` keeps it.

The result is a real dataclass: ``dataclasses.fields``, ``replace``, ``asdict`` and pytest's
dataclass diff work on it, and mypy reads ``@define`` as ``@dataclass`` (PEP 681). What differs:
``InitVar`` fields are refused (none of ours has one); a field order ``@dataclass`` refuses
(a field without a default after one with) is refused at the first instantiation, not at the
class statement (mypy reports it before either); ``__dataclass_params__`` says what
``dataclasses`` itself was asked to write (no ``__init__``; frozen only under a frozen
``@dataclass`` base).
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
_FROZEN = "__define_frozen__"
#: the default of a parameter whose field has a ``default_factory`` (as ``@dataclass``'s own sentinel)
_FACTORY = type("_HasDefaultFactory", (), {"__repr__": lambda self: "<factory>"})()


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


def _frozen_setattr(self: Any, name: str, value: Any) -> None:
    raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r}")


def _frozen_delattr(self: Any, name: str) -> None:
    raise dataclasses.FrozenInstanceError(f"cannot delete field {name!r}")


#: the name of ``__init__``'s first parameter (a field may be called ``self``)
SELF = "__define_self__"


def _init_source(cls: type, frozen: bool) -> tuple[str, dict[str, Any]]:
    """The source of ``cls``'s ``__init__`` and the names it reads: the method ``@dataclass`` writes."""
    names: dict[str, Any] = {"__define_factory__": _FACTORY, "__define_set__": object.__setattr__}
    params: list[str] = []
    keyword: list[str] = []
    lines: list[str] = []
    for f in dataclasses.fields(cls):
        dflt, fac = f"__define_dflt_{f.name}__", f"__define_fac_{f.name}__"
        has_factory = f.default_factory is not dataclasses.MISSING
        if has_factory:
            names[fac] = f.default_factory
        elif f.default is not dataclasses.MISSING:
            names[dflt] = f.default
        if f.init:
            param = f.name
            if has_factory:
                param += "=__define_factory__"
                value = f"{fac}() if {f.name} is __define_factory__ else {f.name}"
            else:
                param += f"={dflt}" if f.default is not dataclasses.MISSING else ""
                value = f.name
            (keyword if getattr(f, "kw_only", False) else params).append(param)
        elif has_factory:
            value = f"{fac}()"
        elif f.default is not dataclasses.MISSING:
            value = dflt
        else:
            continue
        lines.append(f"__define_set__({SELF}, {f.name!r}, {value})" if frozen else f"{SELF}.{f.name} = {value}")
    if hasattr(cls, "__post_init__"):
        lines.append(f"{SELF}.__post_init__()")
    signature = ", ".join([SELF, *params, *(["*", *keyword] if keyword else [])])
    body = "\n".join(f"        {line}" for line in lines or ["pass"])
    return f"def __create_define_init__({', '.join(names)}):\n    def __init__({signature}):\n{body}\n    return __init__", names


def _lazy_init(cls: type, frozen: bool) -> Callable[..., None]:
    """An ``__init__`` that compiles ``cls``'s own on the first call, puts it on the class and runs it."""

    def __init__(self: Any, /, *args: Any, **kwargs: Any) -> None:  # a field may be called "self"
        source, names = _init_source(cls, frozen)
        scope: dict[str, Any] = {}
        exec(source, {"__builtins__": __builtins__}, scope)  # our own text, built from field names
        made = scope["__create_define_init__"](**names)
        made.__qualname__ = f"{cls.__qualname__}.__init__"
        made.__module__ = cls.__module__
        cls.__init__ = made  # type: ignore[misc]
        made(self, *args, **kwargs)

    __init__.__qualname__ = f"{cls.__qualname__}.__init__"
    return __init__


def _made(cls: T, frozen: bool) -> T:
    body = dict(cls.__dict__)  # before dataclass() adds to it
    if any("InitVar" in str(a) for a in body.get("__annotations__", {}).values()):
        raise TypeError(f"@define: {cls.__qualname__} has an InitVar field; use @dataclass")
    # a __hash__ the body wrote itself (not the None Python sets for a body that writes __eq__)
    own_hash = "__hash__" in body and not (body["__hash__"] is None and "__eq__" in body)
    # the rules @dataclass keeps between frozen and unfrozen dataclasses up the hierarchy, ours
    # included (frozen here without dataclasses' knowing); under a frozen @dataclass base,
    # dataclasses itself must make the class frozen
    bases = [b for b in cls.__mro__[1:] if "__dataclass_fields__" in b.__dict__]
    std_frozen = any(b.__dict__["__dataclass_params__"].frozen for b in bases)
    if bases and (std_frozen or any(b.__dict__.get(_FROZEN, False) for b in bases)) != frozen:
        raise TypeError(f"cannot inherit {'' if frozen else 'non-'}frozen dataclass from a "
                        f"{'non-' if frozen else ''}frozen one")  # fmt: skip
    made: Any = dataclasses.dataclass(cls, init=False, repr=False, eq=False, frozen=std_frozen)
    setattr(made, _FROZEN, frozen)
    if "__init__" not in body:
        made.__init__ = _lazy_init(made, frozen)
    if frozen and not std_frozen:
        if "__setattr__" not in body:
            made.__setattr__ = _frozen_setattr
        if "__delattr__" not in body:
            made.__delattr__ = _frozen_delattr
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
