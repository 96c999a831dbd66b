"""Make Unsloth honour ``attn_implementation="sdpa"`` for one load (G2).

Unsloth picks flash-attn or SDPA from ``unsloth.models._utils.HAS_FLASH_ATTENTION`` (set at
import; ``unsloth.models.llama`` keeps a copy) and drops the caller's ``attn_implementation``.
Within ``with force_sdpa():`` both are ``False``, restored after. Imports nothing of Unsloth
until entered.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from types import ModuleType

FLAG = "HAS_FLASH_ATTENTION"
#: where Unsloth keeps the flag: the resolver reads ``_utils``; ``llama`` has a copy
MODULES: tuple[str, ...] = ("unsloth.models._utils", "unsloth.models.llama")


def _load(name: str, *, required: bool) -> ModuleType | None:
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name is None or not name.startswith(exc.name):
            raise  # a missing dependency of Unsloth
        if required:
            raise ModuleNotFoundError(
                f"force_sdpa: {name} is not importable ({exc}); is Unsloth installed?", name=exc.name
            ) from exc
        return None  # this Unsloth has no such module


@contextmanager
def force_sdpa(modules: Sequence[str] = MODULES) -> Iterator[None]:
    """Within the block, Unsloth's ``HAS_FLASH_ATTENTION`` is ``False``; restored after, even when
    the block raises. The first module is required, the others are patched when present. Not
    thread-safe: it changes module globals."""
    saved: list[tuple[ModuleType, bool]] = []
    for i, name in enumerate(modules):
        module = _load(name, required=i == 0)
        if module is not None and hasattr(module, FLAG):
            saved.append((module, getattr(module, FLAG)))
        elif i == 0:
            raise AttributeError(f"force_sdpa: {name} has no {FLAG}; this Unsloth decides differently")
    try:
        for module, _ in saved:
            setattr(module, FLAG, False)
        yield
    finally:
        for module, value in reversed(saved):
            setattr(module, FLAG, value)
