"""The CLI's reading of the project's pytest configuration (:mod:`pytest_dgx_spark.inifiles`, public
parsers and pytest's documented discovery) gives pytest's own answer (issue 31 item 6: it called
pytest's private ``determine_setup``).

Each case plants a project tree, asks pytest (its ``rootpath``, ``inipath`` and ``getini`` of the
``spark_preflight_*`` keys, in process) and :func:`inifiles.locate` from the same folder with the same
``-c``/``--rootdir``/paths, and compares. The trees are ones pytest 9.0 and 9.2 agree on.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_dgx_spark import inifiles
from pytest_dgx_spark.options import OPTIONS
from pytest_dgx_spark.settings import ini_value

INI = "[pytest]\nspark_preflight_only = G3\nspark_preflight_timeout = 7\nspark_preflight_strict = yes\n"
TOML = '[pytest]\nspark_preflight_only = ["G5"]\nspark_preflight_timeout = 9.5\n'
PYPROJECT_INI = '[tool.pytest.ini_options]\nspark_preflight_only = "G4"\nspark_preflight_timeout = 3\n'
PYPROJECT_NATIVE = '[tool.pytest]\nspark_preflight_only = ["G6"]\nspark_preflight_strict = true\n'
THRESHOLD = "[pytest]\nspark_preflight_threshold =\n    g3_margin_gb=20\n    g4_temp_c=80\n"

#: name: ({path: text}, the folder run from, extra arguments)
TREES: dict[str, tuple[dict[str, str], str, list[str]]] = {
    "pytest.ini from a subfolder": ({"pytest.ini": INI, "sub/x.txt": ""}, "sub", []),
    "hidden .pytest.ini": ({".pytest.ini": INI}, ".", []),
    "an empty pytest.toml before pytest.ini": ({"pytest.toml": "", "pytest.ini": INI}, ".", []),
    "pytest.toml": ({"pytest.toml": TOML}, ".", []),
    "pyproject ini_options": ({"pyproject.toml": PYPROJECT_INI}, ".", []),
    "pyproject native": ({"pyproject.toml": PYPROJECT_NATIVE}, ".", []),
    "pyproject without pytest's table, tox.ini beside": (
        {"pyproject.toml": "[project]\nname = 'x'\n", "tox.ini": INI}, ".", []),
    "a bare pyproject.toml is the configfile": ({"pyproject.toml": "[project]\nname = 'x'\n", "sub/a": ""}, "sub", []),
    "setup.cfg above a tox.ini without [pytest]": (
        {"setup.cfg": INI.replace("[pytest]", "[tool:pytest]"), "sub/tox.ini": "[tox]\n"}, "sub", []),
    "the nearest configfile wins": ({"pytest.ini": INI, "sub/tox.ini": THRESHOLD}, "sub", []),
    "no config, setup.py above": ({"setup.py": "", "sub/deeper/a": ""}, "sub/deeper", []),
    "no config at all": ({"sub/a": ""}, "sub", []),
    "-c another file": ({"pytest.ini": INI, "conf/other.ini": THRESHOLD, "sub/a": ""}, "sub", ["-c", "../conf/other.ini"]),
    "-c and --rootdir": ({"conf/other.ini": INI, "root/a": ""}, ".", ["-c", "conf/other.ini", "--rootdir", "root"]),
    "--rootdir moves the rootdir, not the file": ({"pytest.ini": INI, "elsewhere/a": ""}, ".", ["--rootdir", "elsewhere"]),
    "a path argument in another project": ({"a/pytest.ini": INI, "b/tox.ini": THRESHOLD, "b/tests/t.py": ""}, "a",
                                           ["../b/tests"]),
    "two path arguments: their common ancestor": ({"pytest.ini": INI, "x/t.py": "", "y/t.py": "", "w/a": ""}, "w",
                                                  ["../x", "../y"]),
}  # fmt: skip


def plant(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def split(args: list[str]) -> tuple[list[str], str | None, str | None]:
    """``(paths, -c, --rootdir)`` of a command line."""
    paths, given = [], {"-c": None, "--rootdir": None}
    it = iter(args)
    for arg in it:
        if arg in given:
            given[arg] = next(it)
        else:
            paths.append(arg)
    return paths, given["-c"], given["--rootdir"]


def pytests_answer(pytester: pytest.Pytester, here: Path, args: list[str]) -> tuple[Path, Path | None, dict]:
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(here)
        config = pytester.parseconfig("-p", "dgx_spark", "-p", "no:randomly", *args)
    values = {o.ini: config.getini(o.ini) for o in OPTIONS}
    return config.rootpath, config.inipath, values


def ours(here: Path, args: list[str]) -> tuple[Path, Path | None, dict]:
    paths, inifile, rootdir = split(args)
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(here)  # -c is relative to the current folder, as pytest's
        setup = inifiles.locate(here, paths, inifile, rootdir)
    by_key = {o.ini: o for o in OPTIONS}
    values = {key: ini_value(by_key[key], value, mode, setup.inipath) for key, (value, mode) in setup.values.items()}
    return setup.rootdir, setup.inipath, values


@pytest.mark.parametrize("name", list(TREES))
def test_the_same_rootdir_configfile_and_values_as_pytest(pytester: pytest.Pytester, name: str) -> None:
    files, where, args = TREES[name]
    root = pytester.path / "tree"
    plant(root, files)
    here = (root / where).resolve()
    want_root, want_ini, want_values = pytests_answer(pytester, here, args)
    got_root, got_ini, got_values = ours(here, args)
    assert (got_root, got_ini) == (want_root, want_ini)
    # every key the file sets reads as pytest's getini reads it; the others are pytest's defaults
    for key, value in got_values.items():
        assert value == want_values[key], key


def test_the_trees_set_values_that_differ_from_the_defaults(pytester: pytest.Pytester) -> None:
    """The comparison above is not empty: pytest reads a value from most trees."""
    read = 0
    for files, where, args in TREES.values():
        root = pytester.path / f"t{read}-{len(files)}-{len(args)}"
        plant(root, files)
        _, _, values = ours((root / where).resolve(), args)
        read += bool(values)
    assert read >= 12


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("pytest.ini", "[pytest\nspark_preflight_only = G3\n"),
        ("pyproject.toml", "[tool.pytest.ini_options]\nspark_preflight_only = [\n"),
        ("setup.cfg", "[pytest]\nspark_preflight_only = G3\n"),
    ],
    ids=["bad-ini", "bad-toml", "setup.cfg-[pytest]"],
)
def test_a_broken_file_is_refused_as_pytest_refuses_it(pytester: pytest.Pytester, name: str, text: str) -> None:
    (pytester.path / name).write_text(text)
    with pytest.raises((pytest.UsageError, pytest.fail.Exception)):
        pytester.parseconfig("-p", "dgx_spark", "-p", "no:randomly")
    with pytest.raises(inifiles.ConfigError) as refused:
        inifiles.locate(pytester.path)
    assert str(refused.value).strip()
    assert name in str(refused.value) or "setup.cfg" in str(refused.value)


def test_a_rootdir_that_is_not_there_is_refused(tmp_path: Path) -> None:
    with pytest.raises(inifiles.ConfigError, match=r"Directory '.*nowhere' not found. Check your '--rootdir'"):
        inifiles.locate(tmp_path, rootdir=str(tmp_path / "nowhere"))
