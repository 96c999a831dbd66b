"""pytest entry point ``dgx_spark``: a shim, kept small on purpose.

pytest marks every module of an installed plugin's package for assertion
rewriting, and imports its entry-point module through that rewriter. Under
``PYTHONDONTWRITEBYTECODE=1`` (common in container images) it never writes
the rewritten .pyc, so every plain run reads, parses and compiles the entry
module again (1-3 ms for 160 lines, ~1.5 % of a one-test run). So this
module holds only the loader below and the names pytest looks for; the
hooks and fixtures themselves live in :mod:`pytest_dgx_spark.registration`,
which Python's own loader reads from the .pyc the install wrote.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import sys
from types import ModuleType

import pytest_dgx_spark

PLUGIN_NAME = "dgx_spark_preflight"


def plain_import(name: str) -> ModuleType:
    """Import ``pytest_dgx_spark.<name>`` with Python's own loader, not pytest's."""
    full = f"pytest_dgx_spark.{name}"
    if full in sys.modules:
        return sys.modules[full]
    spec = importlib.machinery.PathFinder.find_spec(full, pytest_dgx_spark.__path__)
    if spec is None or spec.loader is None:  # an unusual install: the ordinary way
        return importlib.import_module(full)
    module = importlib.util.module_from_spec(spec)
    sys.modules[full] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[full]
        raise
    setattr(pytest_dgx_spark, name, module)
    return module


_impl = plain_import("registration")
# what pytest reads off the plugin module (hooks, fixtures), and two helpers kept under their old names
pytest_addoption = _impl.pytest_addoption
pytest_addhooks = _impl.pytest_addhooks
pytest_configure = _impl.pytest_configure
spark_preflight = _impl.spark_preflight
spark_sampler = _impl.spark_sampler
start_early = _impl.start_early
