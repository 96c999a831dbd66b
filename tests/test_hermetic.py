"""The suite decides from what each test plants, not from the machine.

``tests/hermetic.py`` lists what no test inherits; these tests hold that list
to the code (every environment read of ``pytest_dgx_spark``, found by
``tests/envscan.py``) and check that the autouse fixture and the pytest runs
tests start apply it.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import envscan
import hermetic

PACKAGE = Path(__file__).resolve().parent.parent / "pytest_dgx_spark"

#: every scan of a whole environment mapping, and what covers the keys it takes;
#: a new scan fails :func:`test_every_scan_of_the_environment_is_reviewed` until added here
REVIEWED_SCANS = {
    "pytest_dgx_spark/probes/child.py:child_env": "drops PYTEST_XDIST*/PYTEST_CURRENT_TEST from a child (KEPT)",
    "pytest_dgx_spark/probes/fleet.py:fingerprint": "ENV_PATTERN: NCCL_*, UCX_*, GLOO_*, TORCH_NCCL_*, *_SOCKET_IFNAME",
    "pytest_dgx_spark/probes/http.py:_proxies": "*_proxy in any case (SUFFIXES)",
    "pytest_dgx_spark/redact.py:__init__": "_is_secret_value: redact.SECRET_NAME (PATTERNS)",
}


@pytest.fixture(scope="module")
def reads() -> envscan.Reads:
    return envscan.env_reads(PACKAGE)


def test_the_scan_finds_the_reads_it_must(reads: envscan.Reads) -> None:
    """The reader itself: literal gets, constants of another module
    (``mn.LAUNCHER_ENV`` through G10), loop variables, locals from literals
    (G7's ptxas override), parameters whose callers pass literals (the job
    store's ``_env_int``), and ``==`` inside a scan."""
    names = reads.all_names()
    for name in ("TORCH_CUDA_ARCH_LIST", "SLURM_NNODES", "NCCL_IB_HCA", "TRITON_PTXAS_PATH", "GROUP_RANK",
                 "TORCHELASTIC_USE_AGENT_STORE", "container", "SPARK_PREFLIGHT_HOST_ROOT", "PYTEST_CURRENT_TEST"):
        assert name in names, name
    assert "NCCL_" in {p for kind, p in envscan.iter_families(reads) if kind == "prefix"}


def test_a_read_through_an_accessor_is_found_where_it_is_called(reads: envscan.Reads) -> None:
    """``said(env, "VLLM_HOST_IP")`` (G10) and ``count_of(env, size)`` over a tuple of names are reads."""
    assert any("g10_multinode/jobs.py" in w for w in reads.names["VLLM_HOST_IP"])
    assert any("g10_multinode/jobs.py" in w for w in reads.names["LOCAL_WORLD_SIZE"])


def test_no_read_of_the_environment_is_hidden_from_the_scan(reads: envscan.Reads) -> None:
    """A key the scan cannot resolve (built at run time) is a read no list covers."""
    assert reads.unresolved == []


def test_every_variable_the_code_reads_is_scrubbed_or_kept_with_a_reason(reads: envscan.Reads) -> None:
    missing = {n: sorted(w) for n, w in reads.names.items() if not hermetic.covers(n)}
    missing |= {n: ["a scan's =="] for n in reads.all_names() - set(reads.names) if not hermetic.covers(n)}
    assert missing == {}, f"add these to tests/hermetic.py (NAMES, a family, or KEPT with why): {missing}"


def test_every_family_the_code_scans_is_scrubbed(reads: envscan.Reads) -> None:
    bad = [(kind, v) for kind, v in envscan.iter_families(reads)
           if not (hermetic.covers_prefix(v) if kind == "prefix" else hermetic.covers_suffix(v))]
    bad += [("pattern", p) for p in sorted(reads.patterns) if not hermetic.covers_pattern(p)]
    assert bad == []


def test_every_scan_of_the_environment_is_reviewed(reads: envscan.Reads) -> None:
    found = {s.where for s in reads.scans}
    assert found == set(REVIEWED_SCANS), (
        "a scan of the whole environment came or went: say in REVIEWED_SCANS what covers its keys"
    )


def test_the_scrub_list_knows_the_families_ml_images_and_launchers_export() -> None:
    for name in ("TORCH_CUDA_ARCH_LIST", "NVIDIA_VISIBLE_DEVICES", "CUDA_VERSION", "NVIDIA_REQUIRE_CUDA",
                 "NCCL_IB_HCA", "WORLD_SIZE", "SLURM_NNODES", "TRITON_CACHE_DIR", "container",
                 "https_proxy", "HTTPS_PROXY", "HF_TOKEN", "GITHUB_TOKEN", "OMPI_COMM_WORLD_SIZE"):
        assert hermetic.scrubbed(name), name
    for name in ("PATH", "HOME", "PYTEST_XDIST_WORKER", "TMPDIR"):
        assert not hermetic.scrubbed(name), name


def test_a_test_sees_none_of_the_machine_variables() -> None:
    """What the autouse fixture (tests/conftest.py) leaves: run this lane with
    ``TORCH_CUDA_ARCH_LIST=9.0a WORLD_SIZE=2 ...`` exported and none is here."""
    assert [k for k in os.environ if hermetic.scrubbed(k) and k not in hermetic.SET] == []
    assert os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] == "1"
    assert os.environ["SPARK_PREFLIGHT_PYTHON_PATH"] == ""
    assert not any(os.path.exists(os.path.join(d, "nvidia-smi")) for d in os.environ["PATH"].split(os.pathsep))


def test_a_variable_set_for_one_test_is_gone_in_the_next(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", "9.0a")
    assert hermetic.clean()["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] == "1"
    assert "TORCH_CUDA_ARCH_LIST" not in hermetic.clean()


def test_a_pytest_run_a_test_starts_loads_no_plugin_of_the_environment(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An installed plugin the run does not name (here a planted one, as
    pytest-benchmark is in an ML image) stays out of a child pytest run: its
    header line would break the line-exact assertions, its warnings become
    errors where a test turns them into errors."""
    site = pytester.mkdir("site")
    (site / "loudplug.py").write_text(
        "def pytest_report_header(config):\n    return 'loudplug: I was autoloaded'\n"
    )
    info = site / "loudplug-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: loudplug\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[pytest11]\nloudplug = loudplug\n")
    pytester.makepyfile(test_one="def test_one(): pass")
    monkeypatch.setenv("PYTHONPATH", str(site))
    quiet = pytester.runpytest_subprocess("-p", "no:randomly")
    assert "loudplug" not in quiet.stdout.str()
    quiet.assert_outcomes(passed=1)
    monkeypatch.delenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD")
    loud = pytester.runpytest_subprocess("-p", "no:randomly")
    assert "loudplug: I was autoloaded" in loud.stdout.str()  # the plant works: autoload would take it


def test_the_plugin_under_test_is_named_explicitly(pytester: pytest.Pytester) -> None:
    """With autoload off, the runs tests start still load dgx_spark (``-p``)."""
    result = pytester.runpytest("--spark-preflight", "--spark-only", "G3", "--co", "-q")
    assert "G3" in result.stdout.str(), result.stdout.str()
    child = pytester.runpytest_subprocess("--spark-preflight", "--spark-only", "G3", "--co", "-q")
    assert "G3" in child.stdout.str(), child.stdout.str() + child.stderr.str()
