"""One package per gotcha, ``g<NN>_<name>`` (see :mod:`pytest_dgx_spark.catalog`): its ``spec.json``,
its finding codes and its check (a ``gather(ctx)`` that asks the machine, an ``evaluate`` that
decides: see :mod:`.kit`). The naming rule lives here, where the catalog and a test that narrows
this package's path (tests/onlychecks.py) both read it without the catalog being imported."""

from __future__ import annotations


def check_id(name: str) -> str | None:
    """``g01_cuda_abi`` -> ``G1``: the id of the check package of that name (a ``g``, two digits,
    ``_``, then lower-case letters, digits and ``_``); None for any other name."""
    rest = name[4:]
    if name[:1] != "g" or not name[1:3].isdigit() or name[3:4] != "_" or not rest or not name.isascii():
        return None
    return f"G{int(name[1:3])}" if all(c.islower() or c.isdigit() or c == "_" for c in rest) else None
