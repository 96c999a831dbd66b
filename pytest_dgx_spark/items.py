"""The checks as pytest items: ``spark_preflight::G<n>``, children of a file at the rootdir that is not
on disk. They are ordinary items to pytest: its own ``--deselect``, ``-k`` and ``-m`` select them as any
test (docs/INTERNALS.md, "Selection"), and a node id given as an argument names them, though no file
of that name exists (:func:`named_checks`, :func:`collect_the_rest`).
"""

from __future__ import annotations

import os
from collections.abc import Generator, Iterable, Sequence
from pathlib import Path
from typing import Any

import pytest

from pytest_dgx_spark import catalog, report
from pytest_dgx_spark.hooks import PLUGIN_NAME
from pytest_dgx_spark.model import Result, Status
from pytest_dgx_spark.safe_text import visible

FILE_NAME = "spark_preflight"
ORDER = {cid: n for n, cid in enumerate(catalog.IDS)}
#: a passed check's outcome as pytest shows it: WARN as ``warned`` (W), INFO as ``I``
TEST_STATUS = {
    "WARN": ("warned", "W", ("WARN", {"yellow": True})), "INFO": ("passed", "I", ("INFO", {"cyan": True}))
}


class SparkCheckFailed(Exception):
    """A check item's failure: the message is the G-line, ``text`` the whole text."""

    def __init__(self, line: str, text: str) -> None:
        super().__init__(line)
        self.text = text


class SparkPreflightFile(pytest.File):
    """The checks' parent; ``path`` is ``<rootdir>/spark_preflight``."""

    def __init__(self, *, ids: Sequence[str] = catalog.IDS, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.ids = list(ids)

    def collect(self) -> Iterable[pytest.Item]:
        specs = [c for c in catalog.CHECKS if c.id in self.ids]
        return [SparkCheckItem.from_parent(self, name=c.id, spec=c) for c in specs]


class SparkCheckItem(pytest.Item):
    def __init__(self, *, spec: catalog.CheckSpec, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.spec = spec
        self.spark_result: Result | None = None
        for marker in spec.markers:
            self.add_marker(marker)
        self.extra_keyword_matches.add(f"spark_check_{spec.id}")

    def runtest(self) -> None:
        plugin: Any = self.config.pluginmanager.get_plugin(PLUGIN_NAME)
        result = self.spark_result = plugin.result_for(self.spec.id)
        try:
            family = str(self.config.getini("junit_family"))
        except (ValueError, KeyError):
            family = "xunit2"
        if family in ("xunit1", "legacy"):
            self.user_properties.extend(report.case_properties(result))
        text = result.report_text()
        if result.status is Status.FAIL:
            raise SparkCheckFailed(result.line(), text)  # the body holds the whole text, once
        if result.status is Status.WARN and plugin.settings.strict:
            line = f"{result.line()} (a failure under --spark-strict)"
            raise SparkCheckFailed(line, "\n".join([line, *text.splitlines()[1:]]))
        self.add_report_section("call", "stdout", text + "\n")
        if result.status is Status.SKIP:
            raise pytest.skip.Exception(result.line(), _use_item_location=True)

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> Any:
        """A FAIL's whole text as its failure, no traceback: pytest's short summary shows its first line
        (the G-line), JUnit's ``message=`` starts with it and its body holds it all."""
        if isinstance(excinfo.value, SparkCheckFailed):
            return excinfo.value.text
        return super().repr_failure(excinfo)

    def reportinfo(self) -> tuple[Path, int, str]:
        return self.path, 0, f"{self.spec.id} {self.spec.title}"


class ChecksFirst:
    """The checks run first, by number, after pytest-randomly and any other reordering (an outer wrapper)."""

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> Generator[None, None, None]:
        yield
        checks = sorted((i for i in items if isinstance(i, SparkCheckItem)), key=lambda i: ORDER[i.spec.id])
        if checks and items[: len(checks)] != checks:
            items[:] = [*checks, *(i for i in items if not isinstance(i, SparkCheckItem))]


def named_checks(config: pytest.Config) -> tuple[list[str], list[str]] | None:
    """The checks named by node id among pytest's arguments (``spark_preflight::G3``; the file alone
    names all of them) and the other arguments, or ``None`` when none names a check. Read, never
    edited: :func:`collect_the_rest` collects the others."""
    rootpath, here = config.rootpath, config.invocation_params.dir
    target = rootpath / FILE_NAME
    if target.exists() or (here / FILE_NAME).exists():  # a real file of that name: pytest's to resolve
        return None
    ours: list[str] = []
    for arg in map(str, config.args):
        path, _, name = arg.partition("::")
        if path != FILE_NAME and Path(os.path.abspath(here / path)) != target:
            continue
        if name and name not in catalog.IDS:
            first, last = catalog.IDS[0], catalog.IDS[-1]
            raise pytest.UsageError(visible(f"{arg}: no such check; the checks are {FILE_NAME}::{first} .. "
                                            f"{FILE_NAME}::{last}"))  # fmt: skip
        ours.append(arg)
    if not ours:
        return None
    names = {a.partition("::")[2] for a in ours}
    named = [cid for cid in catalog.IDS if cid in names or "" in names]
    return named, [a for a in map(str, config.args) if a not in ours]


def collect_the_rest(session: pytest.Session, plugin: object, rest: list[str]) -> object:
    """pytest's own collection of the arguments that name no check (a check's node id names no file
    it could find): the ``pytest_collection`` implementations that pluggy would call after ``plugin``'s
    (the assertion rewriter's, xdist's controller's) run as it would call them, then
    :meth:`pytest.Session.perform_collect` of the rest in place of pytest's default, which would
    collect every argument. Its answer is the hook's."""
    pm = session.config.pluginmanager
    impls = pm.hook.pytest_collection.get_hookimpls()  # pluggy calls them last to first
    wrappers = [impl.plugin for impl in impls if impl.wrapper or impl.hookwrapper]  # already around this call
    calls = [impl.plugin for impl in reversed(impls) if not (impl.wrapper or impl.hookwrapper)]
    done = calls[: calls.index(plugin) + 1] if plugin in calls else [plugin]  # ours, and those before it
    default = pm.get_plugin("main")  # pytest's own default implementation, replaced below
    others = pm.subset_hook_caller("pytest_collection", remove_plugins=[*done, *wrappers, default])
    answer = others(session=session)
    if answer is not None:  # another plugin collects (xdist's controller: nothing)
        return answer
    session.perform_collect(rest)
    return True
