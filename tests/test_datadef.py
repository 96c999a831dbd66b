"""``@define`` means what ``@dataclass`` means: each case is built both ways and compared."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

import pytest

from pytest_dgx_spark.datadef import define


def _pair(frozen: bool = False) -> tuple[type, type]:
    """The same class body under ``@dataclass`` and under ``@define``."""

    def body() -> type:
        class Point:
            x: int
            y: float = 0.0
            tags: list[str] = field(default_factory=list)
            secret: str = field(default="", repr=False, compare=False)

        return Point

    return dataclass(frozen=frozen)(body()), define(frozen=frozen)(body())


@pytest.mark.parametrize("frozen", [False, True])
def test_equality_repr_and_hash_match_dataclass(frozen: bool) -> None:
    std, ours = _pair(frozen)
    for args in [(1, 2.0, ["a"], "s"), (1, 2.0, ["a"], "other"), (2, 2.0, [], "")]:
        a, b = std(*args), ours(*args)
        assert repr(a) == repr(b)
        assert (a == std(1, 2.0, ["a"], "x")) == (b == ours(1, 2.0, ["a"], "x"))
    assert ours(1) != std(1)  # another class: not equal, as a dataclass is not to another class
    assert ours(1).__eq__(object()) is NotImplemented
    nan = math.nan
    assert ours(1, nan) == ours(1, nan)  # the very same NaN: equal as tuples are (identity first)
    assert ours(1, float("nan")) != ours(1, float("nan"))
    if frozen:
        assert hash(ours(1, 2.0, ())) == hash(std(1, 2.0, ()))  # type: ignore[arg-type]
        with pytest.raises(dataclasses.FrozenInstanceError):
            ours(1).x = 2
    else:
        with pytest.raises(TypeError, match="unhashable"):
            hash(ours(1))


def test_a_method_the_body_writes_is_kept() -> None:
    @define
    class Own:
        a: int

        def __repr__(self) -> str:
            return "mine"

        def __eq__(self, other: object) -> bool:
            return True

    assert repr(Own(1)) == "mine"
    assert Own(1) == Own(2)
    assert Own.__hash__ is None  # a body that writes __eq__ and no __hash__: unhashable, as dataclass does

    @define(frozen=True)
    class Hashed:
        a: int

        def __hash__(self) -> int:
            return 7

    assert hash(Hashed(1)) == 7


def test_it_is_a_real_dataclass() -> None:
    _, ours = _pair()
    p = ours(1, 2.5, ["t"])
    assert [f.name for f in dataclasses.fields(p)] == ["x", "y", "tags", "secret"]
    assert dataclasses.asdict(p) == {"x": 1, "y": 2.5, "tags": ["t"], "secret": ""}
    assert dataclasses.replace(p, x=3) == ours(3, 2.5, ["t"])
    with pytest.raises(TypeError):
        ours()  # x has no default


def test_subclass_compares_its_own_fields() -> None:
    @define
    class Base:
        a: int = 0

    @define
    class Child(Base):
        b: int = 0

    assert Child(1, 2) != Child(1, 3)
    assert repr(Child(1, 2)) == "test_subclass_compares_its_own_fields.<locals>.Child(a=1, b=2)"
    assert Base(1) != Child(1, 0)


def test_recursive_repr_does_not_recurse_forever() -> None:
    @define
    class Node:
        child: object = None

    n = Node()
    n.child = n
    assert repr(n) == "test_recursive_repr_does_not_recurse_forever.<locals>.Node(child=...)"


def test_init_matches_dataclass_for_every_kind_of_field() -> None:
    """Keyword-only, ``init=False`` with a default and with a factory, ``__post_init__``, a field
    called ``self``: the same instances, the same errors, under both."""

    def body() -> type:
        class Rich:
            self: int
            n: int = 1
            tags: list[str] = field(default_factory=list)
            hidden: int = field(default=5, init=False)
            made: list[int] = field(default_factory=lambda: [1], init=False)
            seen: int = field(default=0, init=False, repr=False)
            k: str = field(default="k", kw_only=True)

            def __post_init__(self) -> None:
                self.seen = self.n * 2

        return Rich

    std, ours = dataclass(body()), define(body())
    for args, kwargs in [((), {"self": 4}), ((1,), {}), ((1, 3, ["t"]), {"k": "x"}), ((), {"self": 4, "n": 2})]:
        a, b = std(*args, **kwargs), ours(*args, **kwargs)
        assert repr(a).split("(", 1)[1] == repr(b).split("(", 1)[1]
        assert dataclasses.asdict(a) == dataclasses.asdict(b)
    for args, kwargs in [((), {}), ((1, 2, [], 3), {}), ((1,), {"hidden": 1}), ((1,), {"nope": 1})]:
        with pytest.raises(TypeError) as std_error:
            std(*args, **kwargs)
        with pytest.raises(TypeError) as our_error:
            ours(*args, **kwargs)
        assert str(our_error.value).split("() ", 1)[1] == str(std_error.value).split("() ", 1)[1]
    assert ours(1).tags is not ours(1).tags  # a fresh list each time, as the factory makes it


def test_init_is_compiled_on_first_use_and_then_is_the_class_own() -> None:
    @define
    class Later:
        a: int

    lazy = Later.__init__
    assert Later(1).a == 1
    assert Later.__init__ is not lazy and Later.__init__.__qualname__.endswith("Later.__init__")
    assert Later(2) == Later(2)


def test_frozen_refuses_assignment_and_deletion_and_subclass_init_runs() -> None:
    @define(frozen=True)
    class Base:
        a: int

        def __post_init__(self) -> None:
            object.__setattr__(self, "a", self.a + 1)

    @define(frozen=True)
    class Child(Base):
        b: int = 0

    c = Child(1, 2)
    assert (c.a, c.b) == (2, 2)
    with pytest.raises(dataclasses.FrozenInstanceError):
        del c.a
    with pytest.raises(dataclasses.FrozenInstanceError):
        c.other = 1  # type: ignore[attr-defined]

    class Plain(Base):  # not a dataclass of its own: Base's __init__, compiled for Base
        pass

    assert Plain(1).a == 2


def test_a_body_init_is_kept_and_initvar_is_refused() -> None:
    @define
    class Own:
        a: int = 0

        def __init__(self, text: str) -> None:
            self.a = len(text)

    assert Own("abc").a == 3

    with pytest.raises(TypeError, match="InitVar"):

        @define
        class WithInitVar:
            a: dataclasses.InitVar[int]


def test_frozen_and_unfrozen_do_not_mix_up_the_hierarchy() -> None:
    @dataclass(frozen=True)
    class StdFrozen:
        a: int = 0

    @define(frozen=True)
    class OnStd(StdFrozen):
        b: int = 0

    with pytest.raises(dataclasses.FrozenInstanceError):
        OnStd().b = 1  # type: ignore[misc]

    @define(frozen=True)
    class OurFrozen:
        a: int = 0

    @define
    class Loose:
        a: int = 0

    for base, frozen in [(StdFrozen, False), (OurFrozen, False), (Loose, True)]:
        with pytest.raises(TypeError, match="cannot inherit"):
            define(frozen=frozen)(type("Sub", (base,), {"__annotations__": {"b": "int"}, "b": 0}))
