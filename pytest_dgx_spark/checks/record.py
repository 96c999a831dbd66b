"""Typed facts: a check's facts are dataclasses, built from JSON in one place and checked there.

Facts travel as JSON (the store between gather and evaluate, captures, xdist workers), so they come
back as plain lists and dicts. :meth:`Record.from_dict` turns that data into the dataclasses the field
types name — nested records, ``list[X]``, ``dict[str, X]``, ``X | None``, ``Literal[...]`` — once, at the
boundary, and refuses data of another shape with a :class:`FactsError` naming the field
(``devices[0].temperature_c: expected a number, got 'hot'``). Inside a check a fact is then an
attribute of a known type, not a ``.get`` chain guarding every read.

A converter is built once per type and cached: a G1 scan of thousands of libraries converts in
milliseconds. Standard library only.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import math
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, Literal, TypeVar, Union, cast, get_args, get_origin

from pytest_dgx_spark.datadef import scope_of

R = TypeVar("R", bound="Record")
Convert = Callable[[Any], Any]


class FactsError(ValueError):
    """Recorded facts of the wrong shape: where (``devices[0].temperature_c``) and what was expected."""

    def __init__(self, what: str, path: tuple[str, ...] = ()) -> None:
        self.what, self.path = what, path
        super().__init__(f"{_joined(path)}: {what}" if path else what)

    def inside(self, step: str) -> FactsError:
        return FactsError(self.what, (step, *self.path))


def _joined(path: tuple[str, ...]) -> str:
    return "".join(p if p.startswith("[") else f".{p}" for p in path).lstrip(".")


def plain(value: Any) -> Any:
    """``value`` as JSON data: dataclasses to dicts, tuples and sets to lists, NaN/inf to strings."""
    if value is None or isinstance(value, (str, int)):  # the common case first: a scan has thousands
        return value
    if isinstance(value, float):
        return str(value) if math.isnan(value) or math.isinf(value) else value
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (set, frozenset)):
        return [plain(v) for v in sorted(value, key=repr)]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {key: plain(getattr(value, name)) for name, key in _keys(type(value))}
    return str(value)


def json_key(f: dataclasses.Field[Any]) -> str:
    """A field's key in the JSON: its name, or ``field(metadata={"key": "import"})`` where the
    recorded key is no Python name (a keyword)."""
    return str(f.metadata.get("key", f.name))


@functools.cache
def _keys(cls: type) -> tuple[tuple[str, str], ...]:
    """``(attribute, JSON key)`` of each field of a dataclass, once per class."""
    return tuple((f.name, json_key(f)) for f in dataclasses.fields(cls))


class Record:
    """Mixin for a dataclass of facts (a check's ``Facts`` and the records nested in it): a JSON round
    trip that rebuilds every field as its type says. A field absent from the data takes its default
    (each field of a nested record has one: "not read"); a field without a default must be there."""

    #: the fields whose absence is not "not read" but "this version never wrote it": see FactsBase
    ADDED: ClassVar[Mapping[str, str]] = {}

    def to_dict(self) -> dict[str, Any]:
        return dict(plain(self))

    @classmethod
    def from_dict(cls: type[R], data: Any) -> R:
        """``data`` (JSON) as this record, or :class:`FactsError` naming the first field of another shape."""
        built: R = _converter(cast(Any, cls))(data)
        return built

    @classmethod
    def from_dict_or_saying(cls: type[R], data: Any, field: str, why: str) -> R:
        """``data`` as this record, or a record whose ``field`` says ``why`` and the
        :class:`FactsError`: a probe's answer of another shape (a child of another version) is said
        where the check reads its error, never a crash."""
        try:
            return cls.from_dict(data)
        except FactsError as exc:
            return cls(**{field: f"{why} ({exc})"})


@functools.cache
def _compiled(annotation: str) -> types.CodeType:
    return compile(annotation, "<annotation>", "eval")


def field_types(cls: type) -> dict[str, Any]:
    """The type of each field of a dataclass, its annotation evaluated where it was written.

    ``typing.get_type_hints`` does this too, but compiles every annotation of every class in the
    MRO each time; facts repeat a handful (``int | None``, ``str``) hundreds of times, so each text
    is compiled once and only the fields are evaluated: building every check's converter took
    10-17 ms of each run with ``get_type_hints``."""
    wanted = {f.name for f in dataclasses.fields(cls)}
    types_: dict[str, Any] = {}
    for base in reversed(cls.__mro__):
        scope = scope_of(base)
        inside = dict(vars(base))
        for name, annotation in inspect.get_annotations(base).items():
            if name in wanted:
                types_[name] = eval(_compiled(annotation), scope, inside) if isinstance(annotation, str) else annotation
    return types_


def _record(cls: type[Record]) -> Convert:
    hints = field_types(cls)
    fields = [(f.name, json_key(f), f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING)
              for f in dataclasses.fields(cls)]  # type: ignore[arg-type]  # fmt: skip
    convert = {name: _converter(hints[name]) for name, _, _ in fields}

    def build(data: Any) -> Any:
        if not isinstance(data, Mapping):
            raise FactsError(f"expected a table, got {_kind(data)}")
        kwargs: dict[str, Any] = {}
        for name, key, required in fields:
            if key in data:
                try:
                    kwargs[name] = convert[name](data[key])
                except FactsError as exc:
                    raise exc.inside(key) from None
            elif required:
                raise FactsError("missing", (key,))
        return cls(**kwargs)

    return build


def _kind(value: Any) -> str:
    shown = repr(value)
    return f"{type(value).__name__} {shown if len(shown) <= 40 else shown[:39] + '…'}"


def _scalar(tp: type) -> Convert:
    if tp is bool:

        def boolean(v: Any) -> Any:
            if isinstance(v, bool):
                return v
            raise FactsError(f"expected true or false, got {_kind(v)}")

        return boolean
    if tp is int:

        def integer(v: Any) -> Any:
            if isinstance(v, int) and not isinstance(v, bool):
                return v
            raise FactsError(f"expected an integer, got {_kind(v)}")

        return integer
    if tp is float:

        def number(v: Any) -> Any:
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                return float(v)
            if isinstance(v, str) and v in ("nan", "inf", "-inf"):  # plain() writes these as text
                return float(v)
            raise FactsError(f"expected a number, got {_kind(v)}")

        return number
    if tp is str:

        def text(v: Any) -> Any:
            if isinstance(v, str):
                return v
            raise FactsError(f"expected text, got {_kind(v)}")

        return text

    def instance(v: Any) -> Any:
        if isinstance(v, tp):
            return v
        raise FactsError(f"expected {tp.__name__}, got {_kind(v)}")

    return instance


def _union(args: tuple[Any, ...]) -> Convert:
    optional = type(None) in args
    options = [_converter(a) for a in args if a is not type(None)]

    def either(v: Any) -> Any:
        if v is None and optional:
            return None
        errors = []
        for convert in options:
            try:
                return convert(v)
            except FactsError as exc:
                errors.append(exc)
        deeper = [e for e in errors if e.path]
        if deeper or (len(errors) == 1 and not optional):  # the value had the right kind: say where inside
            raise (deeper or errors)[0]
        kinds = dict.fromkeys(e.what.split(", got")[0].removeprefix("expected ") for e in errors)
        if optional:
            kinds["null"] = None
        raise FactsError(f"expected {' or '.join(kinds)}, got {_kind(v)}")

    return either


def _sequence(item: Convert, out: type) -> Convert:
    def items(v: Any) -> Any:
        if not isinstance(v, (list, tuple)):
            raise FactsError(f"expected a list, got {_kind(v)}")
        built = []
        for i, x in enumerate(v):
            try:
                built.append(item(x))
            except FactsError as exc:
                raise exc.inside(f"[{i}]") from None
        return out(built)

    return items


def _mapping(value: Convert) -> Convert:
    def table(v: Any) -> Any:
        if not isinstance(v, Mapping):
            raise FactsError(f"expected a table, got {_kind(v)}")
        built = {}
        for k, x in v.items():
            try:
                built[str(k)] = value(x)
            except FactsError as exc:
                raise exc.inside(f"[{str(k)!r}]") from None
        return built

    return table


def _any(v: Any) -> Any:
    return v


@functools.cache
def _converter(tp: Any) -> Convert:
    """The one converter of JSON data to ``tp``, built once per type."""
    if tp is Any or tp is object:
        return _any
    if tp is type(None):
        return _union((type(None),))
    if typing.is_typeddict(tp):  # a loosely typed table, as facts were before they were records
        return _mapping(_any)
    origin, args = get_origin(tp), get_args(tp)
    if origin is Union or origin is types.UnionType:
        return _union(args)
    if origin is Literal:
        allowed = set(args)

        def literal(v: Any) -> Any:
            if v in allowed:
                return v
            raise FactsError(f"expected one of {', '.join(map(repr, args))}, got {_kind(v)}")

        return literal
    if origin in (list, set, frozenset) or (origin is not None and origin.__name__ in ("Sequence", "Iterable")):
        return _sequence(_converter(args[0] if args else Any), list if origin not in (set, frozenset) else origin)
    if origin is tuple:
        return _sequence(_converter(args[0] if args else Any), tuple)
    if origin in (dict,) or (origin is not None and origin.__name__ in ("Mapping", "MutableMapping")):
        return _mapping(_converter(args[1] if len(args) == 2 else Any))
    if isinstance(tp, type) and issubclass(tp, Record) and dataclasses.is_dataclass(tp):
        return _record(tp)
    if tp in (list, tuple):
        return _sequence(_any, tp)
    if tp is dict:
        return _mapping(_any)
    if isinstance(tp, type):
        return _scalar(tp)
    raise TypeError(f"facts field type {tp!r} has no converter: use a Record, a scalar, list, dict or a union")
