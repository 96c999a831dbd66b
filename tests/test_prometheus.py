"""``--prometheus-textfile`` (issue 33 item 2): the node_exporter textfile-collector format, read back
by ``prometheus_client``'s text parser and by a real node_exporter (Debian's prometheus-node-exporter)
scraped over HTTP."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from pytest_dgx_spark import __version__, catalog, prometheus
from pytest_dgx_spark.model import Reading, Result, Status, Verdict

from conftest import spark_cli as cli

#: read before the autouse hermetic_env fixture removes it: CI installs node_exporter, so there its
#: absence is a failure, not a skip (``.ci/run``: apt-get install -y prometheus-node-exporter)
IN_CI = bool(os.environ.get("CI"))
NODE_EXPORTER = "/usr/bin/prometheus-node-exporter"

NASTY = 'a "quoted" path C:\\temp\nsecond line'
#: what a Result makes of it (one line: whitespace collapsed), the label value to find again
NASTY_LINE = 'offline: a "quoted" path C:\\temp second line'


def samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Every sample of the file, parsed by prometheus_client: ``{(name, labels): value}``."""
    out: dict[tuple[str, frozenset[tuple[str, str]]], float] = {}
    for family in text_string_to_metric_families(text):
        assert family.type == "gauge", family.name
        for s in family.samples:
            key = (s.name, frozenset(s.labels.items()))
            assert key not in out, f"series twice: {key}"
            out[key] = s.value
    return out


def value(found: dict, name: str, **labels: str) -> float:
    matches = [v for (n, ls), v in found.items() if n == name and set(labels.items()) <= ls]
    assert len(matches) == 1, (name, labels, matches)
    return matches[0]


def results() -> list[Result]:
    return [
        Result("G1", Status.FAIL, "torch 2.5.0+cu124 is built for CUDA 12.4", "pip install torch (cu130)",
               readings=[Reading("elf_scan_time", 450.4, "ms"), Reading("objects_loaded", 2),
                         Reading("torch_version", "2.5.0"), Reading("kernel_ok", True)],
               codes=["G1.torch-cuda-major", "G1.module-cuda-major"]),
        Result("G3", Status.INFO, "MemAvailable 96 GiB", readings=[
            Reading("mem_available", 96.5, "GiB"), Reading("page_size", 4, "KiB"), Reading("free", None, "GiB"),
            Reading("headroom_gb", 1.5, "GiB"), Reading("odd", 3, "furlongs")]),
        Result("G4", Status.WARN, "hot", readings=[
            Reading("gpu_temp", 71, "C"), Reading("power", 38.5, "W"), Reading("sm_clock", 2418, "MHz"),
            Reading("util", 55, "%"), Reading("copy", 212.5, "GB/s")], codes=["G4.hot"]),
        Result("G8", Status.SKIP, f"offline: {NASTY}", by_choice=True),
        Result("G9", Status.PASS, "container"),
    ]  # fmt: skip


def test_every_check_has_one_status_and_a_reason_when_it_did_not_run() -> None:
    text = prometheus.render(results(), Verdict.BLOCKED, 1_796_000_000.5, 12.25,
                             not_run={"G2": "deselected (--only G1,G3,G4,G8,G9)"})  # fmt: skip
    found = samples(text)
    for cid in catalog.IDS:
        statuses = {dict(ls)["status"]: v for (n, ls), v in found.items()
                    if n == "spark_preflight_check_status" and dict(ls)["check"] == cid}  # fmt: skip
        assert set(statuses) == set(prometheus.STATUSES), cid
        assert sum(statuses.values()) == 1, cid
    on = {dict(ls)["check"]: dict(ls)["status"] for (n, ls), v in found.items()
          if n == "spark_preflight_check_status" and v == 1}  # fmt: skip
    ran = {"G1": "fail", "G3": "info", "G4": "warn", "G8": "skip", "G9": "pass"}
    assert on == {cid: ran.get(cid, "not_run") for cid in catalog.IDS}  # the rest: not_run
    assert value(found, "spark_preflight_check_reason", check="G2") == 1
    assert ("spark_preflight_check_reason", frozenset({("check", "G2"), ("status", "not_run"), ("by_choice", "false"),
            ("reason", "deselected (--only G1,G3,G4,G8,G9)")})) in found  # fmt: skip
    assert value(found, "spark_preflight_check_reason", check="G5", reason="did not run") == 1
    # a label value with quotes, a backslash and a newline comes back as it went in
    assert value(found, "spark_preflight_check_reason", check="G8", reason=NASTY_LINE, by_choice="true") == 1


def test_label_values_are_escaped_as_the_format_requires() -> None:
    text = prometheus.render([], "ready", 0.0, 0.0, python=NASTY, checks=())
    assert 'python="a \\"quoted\\" path C:\\\\temp\\nsecond line"' in text
    assert value(samples(text), "spark_preflight_build_info", python=NASTY) == 1


def test_findings_verdict_time_version_and_readings_in_base_units() -> None:
    found = samples(prometheus.render(results(), "blocked", 1_796_000_000.5, 12.25, python="/job/venv/bin/python"))
    assert value(found, "spark_preflight_finding", check="G1", code="G1.torch-cuda-major", status="fail") == 1
    assert value(found, "spark_preflight_finding", check="G1", code="G1.module-cuda-major") == 1
    assert value(found, "spark_preflight_finding", check="G4", code="G4.hot", status="warn") == 1
    assert not [k for k in found if k[0] == "spark_preflight_finding" and ("check", "G3") in k[1]]
    assert {dict(ls)["verdict"]: v for (n, ls), v in found.items() if n == "spark_preflight_verdict"} == {
        "ready": 0, "ready-with-warnings": 0, "blocked": 1}
    assert value(found, "spark_preflight_run_timestamp_seconds") == 1_796_000_000.5
    assert value(found, "spark_preflight_run_duration_seconds") == 12.25
    assert value(found, "spark_preflight_build_info", version=__version__, mode="preflight",
                 python="/job/venv/bin/python") == 1  # fmt: skip
    assert value(found, "spark_preflight_elf_scan_time_seconds", check="G1") == pytest.approx(0.4504)
    assert value(found, "spark_preflight_objects_loaded", check="G1") == 2
    assert value(found, "spark_preflight_mem_available_bytes", check="G3") == round(96.5 * 2**30)
    assert value(found, "spark_preflight_page_size_bytes", check="G3") == 4096
    assert value(found, "spark_preflight_headroom_bytes", check="G3") == round(1.5 * 2**30)  # not headroom_gb_bytes
    assert value(found, "spark_preflight_gpu_temp_celsius", check="G4") == 71
    assert value(found, "spark_preflight_power_watts", check="G4") == 38.5
    assert value(found, "spark_preflight_sm_clock_hertz", check="G4") == 2_418_000_000
    assert value(found, "spark_preflight_util_ratio", check="G4") == 0.55
    assert value(found, "spark_preflight_copy_bytes_per_second", check="G4") == 212.5e9
    names = {n for n, _ in found}
    # text, yes/no, not available and an unknown unit are no number in a base unit: left out
    for skipped in ("torch_version", "kernel_ok", "free", "odd"):
        assert not [n for n in names if n.startswith(f"spark_preflight_{skipped}")], skipped


def test_without_codes_each_check_still_has_its_status_series() -> None:
    bare = [Result("G1", Status.FAIL, "broken")]
    found = samples(prometheus.render(bare, "blocked", 0.0, 0.0))
    assert not [k for k in found if k[0] == "spark_preflight_finding"]
    assert value(found, "spark_preflight_check_status", check="G1", status="fail") == 1


def test_a_reading_named_like_a_fixed_family_does_not_take_it() -> None:
    clash = [Result("G5", Status.PASS, "ok", readings=[Reading("verdict", 3), Reading("run_duration", 2, "s")])]
    found = samples(prometheus.render(clash, "ready", 0.0, 1.0))
    assert value(found, "spark_preflight_reading_verdict", check="G5") == 3
    assert value(found, "spark_preflight_reading_run_duration_seconds", check="G5") == 2
    assert value(found, "spark_preflight_run_duration_seconds") == 1


def test_watch_readings_and_the_file_is_replaced_atomically(tmp_path: Path) -> None:
    """The entry watch calls after every sample: the file is renamed over, never rewritten in place
    (a scrape in between reads the old file whole), and no temporary file is left."""
    path = tmp_path / "spark.prom"
    prometheus.write_textfile(path, results(), "blocked", 1.0, 2.0)
    first = path.stat().st_ino
    prometheus.write_textfile(path, [Result("G4", Status.PASS, "cool")], "ready", 3.0, 4.0, mode="watch",
                              readings=[Reading("gpu_temp", 52, "C")], checks=("G4",))  # fmt: skip
    assert path.stat().st_ino != first
    assert sorted(p.name for p in tmp_path.iterdir()) == ["spark.prom"]
    found = samples(path.read_text())
    assert value(found, "spark_preflight_gpu_temp_celsius", check="watch") == 52
    assert value(found, "spark_preflight_build_info", mode="watch") == 1
    assert value(found, "spark_preflight_verdict", verdict="ready") == 1


def test_a_planted_symlink_is_refused_not_followed(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("keep\n")
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    (shared / "spark.prom").symlink_to(victim)
    if os.geteuid() != 0:
        pytest.skip("only root can give the planted link to another user here")
    os.lchown(shared / "spark.prom", 65534, 65534)  # nobody's link in a world-writable folder
    with pytest.raises(OSError):
        prometheus.write_textfile(shared / "spark.prom", results(), "blocked", 0.0, 0.0)
    assert victim.read_text() == "keep\n"


def test_cli_writes_the_textfile(spark_env, tmp_path: Path) -> None:
    path = tmp_path / "spark.prom"
    done = cli("--only", "G3,G9", "--prometheus-textfile", str(path), cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"Prometheus textfile written to {path}" in done.stdout
    found = samples(path.read_text())
    assert value(found, "spark_preflight_check_status", check="G3", status="info") == 1
    assert value(found, "spark_preflight_check_reason", check="G1", reason="deselected (--only G3,G9)") == 1
    assert value(found, "spark_preflight_mem_total_bytes", check="G3") > 100 * 2**30
    assert value(found, "spark_preflight_run_duration_seconds") > 0


def test_cli_refuses_a_textfile_into_a_missing_folder_and_the_report_path(spark_env, tmp_path: Path) -> None:
    done = cli("--only", "G3", "--prometheus-textfile", str(tmp_path / "nope" / "x.prom"), cwd=tmp_path)
    assert done.returncode == 2 and "--prometheus-textfile: folder" in done.stderr
    same = str(tmp_path / "x")
    done = cli("--only", "G3", "--report", same, "--prometheus-textfile", same, cwd=tmp_path)
    assert done.returncode == 2 and "--report and --prometheus-textfile name the same file" in done.stderr


def test_pytest_plugin_writes_the_textfile(spark_env, pytester: pytest.Pytester) -> None:
    path = pytester.path / "spark.prom"
    result = pytester.runpytest_subprocess("--spark-preflight", "--spark-only", "G3",
                                           f"--spark-prometheus-textfile={path}")  # fmt: skip
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    found = samples(path.read_text())
    assert value(found, "spark_preflight_check_status", check="G3", status="info") == 1
    assert value(found, "spark_preflight_check_status", check="G10", status="not_run") == 1
    assert value(found, "spark_preflight_verdict", verdict="ready-with-warnings") == 1


# ---------------------------------------------------------------------- a real node_exporter


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def node_exporter(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """A real node_exporter on 127.0.0.1 reading only its textfile collector from a temp folder:
    ``(its /metrics URL, the folder)``. Stopped by pid, in its own process group."""
    exe = NODE_EXPORTER if os.access(NODE_EXPORTER, os.X_OK) else shutil.which("prometheus-node-exporter")
    if exe is None:
        why = f"{NODE_EXPORTER} missing: apt-get install -y prometheus-node-exporter"
        if IN_CI:
            pytest.fail(f"CI installs node_exporter, but {why}")
        pytest.skip(why)
    folder = tmp_path / "textfiles"
    folder.mkdir()
    for attempt in range(3):  # a port taken between free_port() and the bind: another
        port = free_port()
        log = tmp_path / f"node_exporter.{attempt}.log"
        with open(log, "wb") as out:
            proc = subprocess.Popen(
                [exe, f"--web.listen-address=127.0.0.1:{port}", "--collector.disable-defaults",
                 "--collector.textfile", f"--collector.textfile.directory={folder}",
                 "--web.disable-exporter-metrics"],
                stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip
        url = f"http://127.0.0.1:{port}/metrics"
        try:
            deadline = time.monotonic() + 15
            while time.monotonic() < deadline and proc.poll() is None:
                try:
                    with urllib.request.urlopen(url, timeout=2):
                        break
                except OSError:
                    time.sleep(0.1)
            if proc.poll() is None and time.monotonic() < deadline:
                yield url, folder
                return
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
    pytest.fail(f"node_exporter did not serve {url}: {log.read_text(errors='replace')[-500:]}")


def scrape(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as answer:
        return answer.read().decode("utf-8")


def test_a_real_node_exporter_serves_the_projects_series(spark_env, node_exporter, tmp_path: Path) -> None:
    url, folder = node_exporter
    path = folder / "spark_preflight.prom"
    done = cli("--only", "G3,G9", "--prometheus-textfile", str(path), cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    page = scrape(url)
    found = _all(page)
    # node_exporter read the file without an error, and serves what the tool wrote
    assert value(found, "node_textfile_scrape_error") == 0, page[-2000:]
    assert value(found, "node_textfile_mtime_seconds", file=str(path)) > 0
    assert value(found, "spark_preflight_check_status", check="G3", status="info") == 1
    assert value(found, "spark_preflight_check_status", check="G1", status="not_run") == 1
    assert value(found, "spark_preflight_check_reason", check="G1", reason="deselected (--only G3,G9)") == 1
    assert value(found, "spark_preflight_verdict", verdict="ready-with-warnings") == 1
    assert value(found, "spark_preflight_build_info", version=__version__) == 1
    assert value(found, "spark_preflight_mem_total_bytes", check="G3") > 100 * 2**30
    # refreshed (as watch does every sample): the next scrape serves the new file, escapes and all
    prometheus.write_textfile(path, results(), "blocked", 1.0, 2.0, python=NASTY)
    page = scrape(url)
    found = _all(page)
    assert value(found, "node_textfile_scrape_error") == 0, page[-2000:]
    assert value(found, "spark_preflight_verdict", verdict="blocked") == 1
    assert value(found, "spark_preflight_check_reason", check="G8", reason=NASTY_LINE) == 1
    assert value(found, "spark_preflight_build_info", python=NASTY) == 1
    assert value(found, "spark_preflight_finding", check="G1", code="G1.torch-cuda-major") == 1
    assert value(found, "spark_preflight_sm_clock_hertz", check="G4") == 2_418_000_000


def _all(page: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """A scrape's samples (node_exporter's own families are counters and untyped too)."""
    out = {}
    for family in text_string_to_metric_families(page):
        for s in family.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out
