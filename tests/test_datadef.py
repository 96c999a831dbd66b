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
