"""``pytest_dgx_spark.unsloth.force_sdpa`` against a stand-in ``unsloth`` package.

The stand-in is built in tmp_path with the structure the helper relies on,
taken from Unsloth's source (docs/EVIDENCE.md, snapshot 015bdef):
``unsloth/models/_utils.py`` holds ``HAS_FLASH_ATTENTION`` and a resolver that
reads that module global; ``unsloth/models/llama.py`` does ``from ._utils import *``
(its own copy of the flag) and its loader drops the caller's
``attn_implementation``.
"""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from pytest_dgx_spark.unsloth import force_sdpa

UTILS = """
HAS_FLASH_ATTENTION = True


def resolve_attention_implementation(model_class, config, requested_attn_implementation=None, supports_sdpa=True):
    if HAS_FLASH_ATTENTION:
        return "flash_attention_2"
    if supports_sdpa:
        return "sdpa"
    return "eager"
"""
LLAMA = """
from ._utils import *
from . import _utils


class FastLlamaModel:
    @staticmethod
    def from_pretrained(name, **kwargs):
        kwargs.pop("attn_implementation", None)  # No need since we auto call it
        return _utils.resolve_attention_implementation(None, None)
"""


@pytest.fixture
def fake_unsloth(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    pkg = tmp_path / "unsloth"
    (pkg / "models").mkdir(parents=True)
    (pkg / "__init__.py").write_text("from .models.llama import FastLlamaModel\n")
    (pkg / "models" / "__init__.py").write_text("")
    (pkg / "models" / "_utils.py").write_text(textwrap.dedent(UTILS))
    (pkg / "models" / "llama.py").write_text(textwrap.dedent(LLAMA))
    monkeypatch.syspath_prepend(str(tmp_path))
    yield pkg
    for name in [m for m in sys.modules if m == "unsloth" or m.startswith("unsloth.")]:
        del sys.modules[name]


def test_sdpa_is_used_inside_and_flash_attention_restored_after(fake_unsloth: Path) -> None:
    from unsloth import FastLlamaModel
    from unsloth.models import _utils, llama

    assert FastLlamaModel.from_pretrained("m", attn_implementation="sdpa") == "flash_attention_2"  # the trap
    with force_sdpa():
        assert FastLlamaModel.from_pretrained("m", attn_implementation="sdpa") == "sdpa"
        assert _utils.HAS_FLASH_ATTENTION is False
        assert llama.HAS_FLASH_ATTENTION is False
    assert _utils.HAS_FLASH_ATTENTION is True and llama.HAS_FLASH_ATTENTION is True
    assert FastLlamaModel.from_pretrained("m") == "flash_attention_2"


def test_flags_are_restored_when_the_load_raises(fake_unsloth: Path) -> None:
    from unsloth.models import _utils, llama

    with pytest.raises(RuntimeError, match="out of memory"), force_sdpa():
        raise RuntimeError("out of memory")
    assert _utils.HAS_FLASH_ATTENTION is True and llama.HAS_FLASH_ATTENTION is True


def test_a_false_flag_stays_false(fake_unsloth: Path) -> None:
    from unsloth.models import _utils

    _utils.HAS_FLASH_ATTENTION = False  # flash-attn absent: Unsloth decided False itself
    with force_sdpa():
        pass
    assert _utils.HAS_FLASH_ATTENTION is False


def test_works_as_a_decorator(fake_unsloth: Path) -> None:
    from unsloth import FastLlamaModel

    @force_sdpa()
    def load() -> str:
        return FastLlamaModel.from_pretrained("m")

    assert load() == "sdpa"
    assert FastLlamaModel.from_pretrained("m") == "flash_attention_2"


def test_an_unsloth_without_llama_module_is_still_patched(fake_unsloth: Path) -> None:
    (fake_unsloth / "models" / "llama.py").unlink()
    (fake_unsloth / "__init__.py").write_text("")
    from unsloth.models import _utils

    with force_sdpa():
        assert _utils.resolve_attention_implementation(None, None) == "sdpa"
    assert _utils.HAS_FLASH_ATTENTION is True


def test_without_unsloth_the_error_says_so(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(sys, "path", [str(tmp_path)] + [p for p in sys.path if "site-packages" not in p])
    monkeypatch.delitem(sys.modules, "unsloth", raising=False)
    with pytest.raises(ModuleNotFoundError, match="is Unsloth installed"), force_sdpa():
        pass


def test_an_unsloth_that_moved_the_flag_is_reported(fake_unsloth: Path) -> None:
    (fake_unsloth / "models" / "_utils.py").write_text(
        "def resolve_attention_implementation(*a):\n    return 'x'\n"
    )
    with pytest.raises(AttributeError, match="has no HAS_FLASH_ATTENTION"), force_sdpa():
        pass


def test_a_missing_dependency_of_unsloth_is_not_hidden(fake_unsloth: Path) -> None:
    (fake_unsloth / "models" / "llama.py").write_text("import a_dependency_that_is_missing\n")
    with pytest.raises(ModuleNotFoundError, match="a_dependency_that_is_missing"), force_sdpa():
        pass
