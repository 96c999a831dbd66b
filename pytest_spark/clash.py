"""The PySpark ``pytest-spark`` clash check, free of pytest.

Both the plugin (at configure time) and ``spark-preflight`` ask it; the CLI
must not pay pytest's import (~77 ms) for it, so it lives here and imports
only the standard library.
"""

from __future__ import annotations

MESSAGE = (
    "pytest-dgx-spark cannot run next to pytest-spark (the PySpark plugin): both install "
    "the top-level package 'pytest_spark' and overwrite each other's files. "
    "Use separate environments, or `pip uninstall pytest-spark` and reinstall pytest-dgx-spark."
)


def pyspark_plugin_clash() -> str | None:
    """Say so when PySpark's ``pytest-spark`` shares our ``pytest_spark`` folder.

    Both distributions install a top-level ``pytest_spark`` package; whichever
    was installed last overwrote the other's files, and uninstalling either
    breaks both. No entry-point name can fix that, so we refuse to run.
    """
    import pytest_spark

    if not getattr(pytest_spark, "__dgx_spark__", False):
        return MESSAGE
    from importlib import metadata

    try:
        metadata.distribution("pytest-spark")
    except metadata.PackageNotFoundError:
        return None
    except Exception:  # unreadable metadata: do not block on a guess
        return None
    return MESSAGE
