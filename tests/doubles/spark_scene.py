"""A whole DGX Spark (GB10) at the machine-probe boundary, for end-to-end runs.

``tests/conftest.py``'s ``spark_env`` gives the NVML and torch doubles; an
end-to-end run that must print *exact* lines needs every other input fixed
too, or a line depends on the host that runs the suite:

* the checked Python's packages (G1 counts and reads every shared object of
  the package folders, G9 reads every distribution's metadata): a fake
  site-packages with real ``.dist-info`` folders and real gcc-built ELF files
  (``tests/doubles/elfkit.py``), and *only* it — :data:`ISOLATE` drops this
  interpreter's own site-packages from ``sys.path`` the way
  ``tests/test_g01_cuda_abi.py``'s ``isolated`` fixture does;
* ``ldconfig -p`` (G1): a fake on PATH printing a DGX OS-like cache;
* the driver stack (G1): ``/proc/sys/kernel/osrelease`` and
  ``/proc/driver/nvidia/version`` of a healthy Spark under the machine root;
* ``nvidia-smi`` (G4/G6 fallback): a fake on PATH printing what a GB10 prints
  (``[N/A]`` memory and power cap, docs/EVIDENCE.md G3/G4);
* the process table (G6, G10): a fake ``/proc`` under the machine root that
  holds only the processes a scene starts (symlinks to the real
  ``/proc/<pid>`` of real sleeping children) and ``/proc/stat`` for psutil;
* the environment: launcher, container, proxy-free and CUDA variables set or
  removed explicitly.

Everything is written under one scratch folder that is *not* the run's
rootdir (G10 searches the rootdir for configs, so stray JSON there would
change its line).
"""

from __future__ import annotations

import importlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from pytest_dgx_spark import catalog

import hermetic
from conftest import isolated_path, make_root
from doubles import elfkit, gb10, tritonkit

TESTS = Path(__file__).resolve().parent.parent
DOUBLES = TESTS / "doubles"
DATA = TESTS / "data"
GIB = 1 << 30

#: what a GB10's nvidia-smi prints, in the formats real Sparks posted
#: (tests/data/gb10/: nvidia-smi_3.txt's table, nvml_memory_1.txt's and
#: nvidia-smi_clocks_power_1.txt's --query-gpu values, nvidia-smi-q_1.txt's
#: ``-q -d PERFORMANCE`` with the counters of nvidia-smi_clocks_power_1.txt):
#: memory and the power cap are ``[N/A]``; temperature, draw and the SM clock
#: answer. Every call is logged to ``$SMI_LOG`` when set. ``$SMI_APPS`` holds
#: --query-compute-apps rows.
NVIDIA_SMI_GB10 = r"""#!/bin/sh
# nvidia-smi as a DGX Spark (GB10, driver 580.173.02) answers it (shell builtins only:
# a test may give it a PATH without coreutils)
[ -n "$SMI_LOG" ] && printf '%s\n' "$*" >> "$SMI_LOG"
query=""; apps=""; header=1; units=1; q=0
for arg in "$@"; do
  case "$arg" in
    --query-gpu=*) query="${arg#--query-gpu=}" ;;
    --query-compute-apps=*) apps="${arg#--query-compute-apps=}" ;;
    -q|--query) q=1 ;;
  esac
  case "$arg" in --format=*noheader*) header=0 ;; esac
  case "$arg" in --format=*nounits*) units=0 ;; esac
done
if [ "$q" = 1 ]; then
printf '%s\n' "" "==============NVSMI LOG==============" "" \
"Timestamp                                 : Mon Nov 24 19:48:06 2025" \
"Driver Version                            : 580.173.02" \
"CUDA Version                              : 13.0" "" \
"Attached GPUs                             : 1" \
"GPU 0000000F:01:00.0" \
"    Performance State                     : P0" \
"    Clocks Event Reasons" \
"        Idle                              : Not Active" \
"        Applications Clocks Setting       : Not Active" \
"        SW Power Cap                      : Not Active" \
"        HW Slowdown                       : Not Active" \
"            HW Thermal Slowdown           : Not Active" \
"            HW Power Brake Slowdown       : Not Active" \
"        Sync Boost                        : Not Active" \
"        SW Thermal Slowdown               : Not Active" \
"        Display Clock Setting             : Not Active" \
"    Clocks Event Reasons Counters" \
"        SW Power Capping                  : 10800240649 us" \
"        Sync Boost                        : 0 us" \
"        SW Thermal Slowdown               : 0 us" \
"        HW Thermal Slowdown               : 1195386 us" \
"        HW Power Braking                  : 0 us" \
"    Sparse Operation Mode                 : N/A"
exit 0
fi
if [ -n "$apps" ]; then
  [ "$header" = 1 ] && printf '%s\n' "pid, process_name, used_gpu_memory [MiB]"
  if [ -n "$SMI_APPS" ] && [ -f "$SMI_APPS" ]; then
    while IFS= read -r row; do
      if [ "$units" = 1 ]; then printf '%s MiB\n' "$row"; else printf '%s\n' "$row"; fi
    done < "$SMI_APPS"
  fi
  exit 0
fi
if [ -n "$query" ]; then
  names=""; line=""
  old_ifs=$IFS; IFS=,
  for f in $query; do
    case "$f" in
      index) v=0 ;;
      name|gpu_name) v="NVIDIA GB10" ;;
      temperature.gpu) v=35 ;;
      power.draw) v=11.17 ;;
      clocks.sm|clocks.current.sm|clocks.current.graphics|clocks.gr) v=2522 ;;
      clocks.max.sm|clocks.max.graphics) v=3003 ;;
      clocks_event_reasons.active|clocks_throttle_reasons.active) v=0x0000000000000000 ;;
      compute_cap) v=12.1 ;;
      driver_version) v=580.173.02 ;;
      utilization.gpu|utilization.memory) v=0 ;;
      *) v="[N/A]" ;;
    esac
    # units as --format=csv prints them (nvml_memory_1.txt: "power.draw [W]" -> "11.17 W",
    # nvidia-smi_clocks_power_1.txt: "2522 MHz"); [N/A] and unitless fields carry none
    unit=""
    case "$f" in
      power.*) unit=W ;;
      clocks.*) unit=MHz ;;
      utilization.*) unit=% ;;
      memory.*) unit=MiB ;;
    esac
    if [ -n "$unit" ]; then names="${names:+$names, }$f [$unit]"; else names="${names:+$names, }$f"; fi
    if [ -n "$unit" ] && [ "$units" = 1 ] && [ "$v" != "[N/A]" ]; then v="$v $unit"; fi
    line="${line:+$line, }$v"
  done
  IFS=$old_ifs
  [ "$header" = 1 ] && printf '%s\n' "$names"
  printf '%s\n' "$line"
  exit 0
fi
printf '%s\n' \
"+-----------------------------------------------------------------------------------------+" \
"| NVIDIA-SMI 580.173.02             Driver Version: 580.173.02     CUDA Version: 13.0     |" \
"+-----------------------------------------+------------------------+----------------------+" \
"| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |" \
"| Fan  Temp   Perf          Pwr:Usage/Cap |           Memory-Usage | GPU-Util  Compute M. |" \
"|                                         |                        |               MIG M. |" \
"|=========================================+========================+======================|" \
"|   0  NVIDIA GB10                    On  |   0000000F:01:00.0 Off |                  N/A |" \
"| N/A   35C    P8             11W /  N/A  | Not Supported          |      0%      Default |" \
"|                                         |                        |                  N/A |" \
"+-----------------------------------------+------------------------+----------------------+"
"""

#: ``ldconfig -p`` of DGX OS: the driver's libcuda and the CUDA 13.0 toolkit
LDCONFIG_GB10 = r"""#!/bin/sh
printf '%s\n' "5 libs found in cache \`/etc/ld.so.cache'" \
"	libz.so.1 (libc6,AArch64) => /lib/aarch64-linux-gnu/libz.so.1" \
"	libcudart.so.13 (libc6,AArch64) => /usr/local/cuda-13.0/targets/sbsa-linux/lib/libcudart.so.13" \
"	libcublas.so.13 (libc6,AArch64) => /usr/local/cuda-13.0/targets/sbsa-linux/lib/libcublas.so.13" \
"	libcuda.so.1 (libc6,AArch64) => /lib/aarch64-linux-gnu/libcuda.so.1" \
"	libc.so.6 (libc6,AArch64, OS ABI: Linux 3.7.0) => /lib/aarch64-linux-gnu/libc.so.6"
"""

#: the NGC CUDA base container's variables (recorded: tests/data/h200-cu130/env_nvidia_cuda.txt)
NGC_CUDA_ENV = {"NVIDIA_PRODUCT_NAME": "CUDA", "CUDA_VERSION": "13.0.2", "NVIDIA_VISIBLE_DEVICES": "0"}
#: the NGC PyTorch 25.09 container's (pip may replace its torch: G9 says so)
NGC_PYTORCH_ENV = {
    "NVIDIA_PRODUCT_NAME": "PyTorch",
    "NVIDIA_PYTORCH_VERSION": "25.09",
    "PYTORCH_BUILD_VERSION": "2.9.0a0+50eac811a6",
    "CUDA_VERSION": "13.0.1",
    "NVIDIA_VISIBLE_DEVICES": "0",
}

#: host variables that would change a line: every scene removes them, the
#: list of tests/hermetic.py (held to the code by tests/test_hermetic.py), and
#: the pytest options and plugins of the shell
HOST_VARS = ("PYTEST_ADDOPTS", "PYTEST_PLUGINS")

#: what a run imports lazily from site-packages: imported before ``sys.path``
#: loses site-packages (see :func:`preimport`), so the probes still find them
LAZY_MODULES = (
    "yaml",
    "packaging.markers",
    "packaging.requirements",
    "packaging.specifiers",
    "packaging.version",
    "pytest",
    "pytest_dgx_spark.cli",
    "pytest_dgx_spark.plugin",
    "pytest_dgx_spark.engine",
    "pytest_dgx_spark.session",
    "pytest_dgx_spark.probes.configs",
)
_DROP_SITE = (
    "sys.path[:] = [p for p in sys.path if not p.rstrip('/').endswith(('site-packages', 'dist-packages'))]\n"
)

#: Python source run first in a spark-preflight child (``python -c``): it
#: imports what the checks load lazily, then drops every site-packages folder
#: from ``sys.path``, so the checked environment is the scene's fake
#: site-packages alone, as ``isolated`` in tests/test_g01_cuda_abi.py does
#: in-process. The editable install's import hook (set up at start) still
#: finds ``pytest_dgx_spark``.
ISOLATE = f"import sys, importlib\nfor _m in {LAZY_MODULES!r}:\n    importlib.import_module(_m)\n{_DROP_SITE}"
CLI = ISOLATE + "from pytest_dgx_spark.cli import main\nsys.exit(main())\n"

#: the same isolation for ``pytest --spark-preflight`` run in a child (as
#: another user): a ``conftest.py`` for the run's rootdir. Only around the
#: test loop, because pytest reads installed metadata as it starts and reports.
ISOLATE_CONFTEST = f'''"""Check the given site-packages only (tests/doubles/spark_scene.py)."""
import importlib
import sys

import pytest


@pytest.hookimpl(wrapper=True)
def pytest_runtestloop(session):
    for name in {LAZY_MODULES!r}:
        importlib.import_module(name)
    saved = sys.path[:]
    {_DROP_SITE.strip()}
    try:
        return (yield)
    finally:
        sys.path[:] = saved
'''


def preimport() -> None:
    """Import, in this process, what a run loads lazily (before ``sys.path``
    loses site-packages for an isolated in-process run)."""
    for name in LAZY_MODULES:
        importlib.import_module(name)
    try:  # optional: the [json] extra
        importlib.import_module("pytest_jsonreport.plugin")
    except ImportError:
        pass


# Imported when the test modules are collected, before any test: pytester
# restores sys.modules after each test, dropping what the test imported, and a
# re-imported PyYAML no longer matches its C parser (which keeps the first
# import's node classes: every YAML document then fails with "could not
# determine a constructor for the tag None").
preimport()


class IsolatedRun:
    """A pytest plugin object (``pytester.runpytest(plugins=[IsolatedRun()])``)
    that runs the tests -- and so the preflight's probes -- with this
    interpreter's site-packages out of ``sys.path``, then puts them back.

    Only around the test loop: pytest itself reads installed metadata while
    it starts (entry points, its header) and while it reports.
    """

    @pytest.hookimpl(wrapper=True)
    def pytest_runtestloop(self, session: pytest.Session) -> Any:
        preimport()
        saved = sys.path[:]
        sys.path[:] = isolated_path()
        try:
            return (yield)
        finally:
            sys.path[:] = saved


def has_json_report() -> bool:
    """pytest-json-report (the ``[json]`` extra) is installed."""
    try:
        import pytest_jsonreport  # noqa: F401
    except ImportError:
        return False
    return True


def sleeper_binary(folder: Path) -> Path:
    """A real ELF that sleeps, copied under a server's name so ``/proc``
    shows that name (a Python script would show the interpreter's)."""
    folder.mkdir(parents=True, exist_ok=True)
    out = folder / "sleeper"
    if out.exists():
        return out
    src = folder / "sleeper.c"
    src.write_text(
        "#include <unistd.h>\nint main(void) { for (int i = 0; i < 120; i++) sleep(1); return 0; }\n"
    )
    partial = folder / f"sleeper.{os.getpid()}"  # xdist workers may build it at once
    subprocess.run(["gcc", "-O1", "-o", str(partial), str(src)], check=True, capture_output=True, timeout=60)
    os.replace(partial, out)
    return out


def wait_for_exec(pid: int, program: str, timeout: float = 5.0) -> None:
    """Until the child has exec'd ``program`` (its argv[0] in ``/proc`` says so;
    before the exec it still shows the forking pytest's command line)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            argv0 = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0", 1)[0].decode(errors="replace")
            if os.path.basename(argv0) == program:
                return
        except OSError:
            pass
        time.sleep(0.01)
    raise AssertionError(f"pid {pid} never exec'd {program!r}")


@dataclass
class Scene:
    """One Spark: a machine root, a site-packages, tools, an environment."""

    base: Path
    kit: elfkit.Kit | None = None
    nvml: dict[str, Any] = field(default_factory=gb10.nvml)
    torch: dict[str, Any] = field(default_factory=gb10.torch)
    env_vars: dict[str, str] = field(default_factory=dict)
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.root = self.base / "root"
        self.site = self.base / "site-packages"
        self.bin = self.base / "bin"
        self.logs = self.base / "logs"
        for folder in (self.root / "proc", self.site, self.bin, self.logs):
            folder.mkdir(parents=True, exist_ok=True)
        (self.root / "proc" / "meminfo").write_text(gb10.meminfo())
        make_root(self.root, gb10.stack_files())  # kernel 6.17.0-1031-nvidia, the open module 580.173.02
        for rel, text in gb10.memory_files().items():  # G3's buddyinfo, vmstat, cgroup, mounts
            (self.root / rel).parent.mkdir(parents=True, exist_ok=True)
            (self.root / rel).write_text(text)
        # the GPU's device nodes (their existence is what is read; plain files do)
        (self.root / "dev").mkdir(exist_ok=True)
        for node in ("nvidiactl", "nvidia0"):
            (self.root / "dev" / node).write_text("")
        # the kernel log as /dev/kmsg records (a plain file is read line by line): a healthy
        # Spark's GPU line (dmesg_xid_5.txt), no Xid
        (self.root / "dev" / "kmsg").write_text(gb10.HEALTHY_KMSG)
        (self.root / "proc" / "stat").symlink_to("/proc/stat")  # psutil's boot time
        self.tool("nvidia-smi", NVIDIA_SMI_GB10)
        self.tool("ldconfig", LDCONFIG_GB10)

    # ------------------------------------------------------------------ pieces

    def tool(self, name: str, script: str) -> Path:
        exe = self.bin / name
        exe.write_text(script)
        exe.chmod(0o755)
        return exe

    def files(self, files: Mapping[str, str | bytes]) -> None:
        """Files under the machine root (``{".dockerenv": ""}``)."""
        make_root(self.root, files)

    def install(
        self,
        dist: str,
        version: str,
        files: Mapping[str, Path | bytes | str] | None = None,
        requires: Iterable[str] = (),
    ) -> None:
        """A distribution in the fake site-packages, with the dist-info pip writes."""
        elfkit.install(self.site, dist, version, dict(files or {}))
        reqs = list(requires)
        if reqs:
            info = self.site / f"{dist.replace('-', '_')}-{version}.dist-info" / "METADATA"
            info.write_text(info.read_text() + "".join(f"Requires-Dist: {r}\n" for r in reqs))

    def triton(self, version: str = "3.6.0", tools: Mapping[str, str] | None = None) -> None:
        """Triton as torch's cu130 wheels bring it: 3.6.0 bundles ptxas 12.8 and ptxas-blackwell
        12.9 and compiles sm_121a with the latter (tests/data/triton/compile_sm121_triton360.json),
        planted as the triton double (tests/doubles/tritonkit.py)."""
        tools = dict(tools or {"ptxas": "12.8", "ptxas-blackwell": "12.9"})
        tritonkit.install(self.site, "triton", version, tools, self.logs / "ptxas.log")

    def python_headers(self) -> None:
        """CPython's headers (``python3.12-dev``), which Triton's launcher build includes: a
        ``Python.h`` on gcc's ``CPATH`` (error_triton_pythonh_1.txt is a box without them)."""
        folder = self.base / "include" / "python3.12"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "Python.h").write_text("/* CPython's header, as python3.12-dev installs it */\n")
        self.env_vars["CPATH"] = str(folder)

    def cuda13_stack(self) -> None:
        """torch 2.11.0+cu130 as pip installs it: its CUDA 13 runtime and cuBLAS
        wheels (``nvidia/cu13/lib``) and a torch library linking them."""
        assert self.kit is not None, "real ELF files need the gcc-built kit"
        self.install("nvidia-cuda-runtime", "13.0.96", {"nvidia/cu13/lib/libcudart.so.13": self.kit.cudart13})
        self.install("nvidia-cublas", "13.1.0.3", {"nvidia/cu13/lib/libcublas.so.13": self.kit.cublas13})
        self.install(
            "torch",
            "2.11.0+cu130",
            {"torch/lib/libtorch_cuda.so": self.kit.ext13},
            requires=["nvidia-cuda-runtime==13.0.96; platform_system == 'Linux'", "nvidia-cublas==13.1.0.3"],
        )

    def gpu_process(self, argv0: str, *args: str, used_bytes: int | None = None) -> int:
        """Start a real sleeping process named ``argv0`` (e.g. ``vllm``) with
        ``args``, show it in the machine's ``/proc`` and, with ``used_bytes``,
        in NVML's compute processes (per-process memory works on GB10)."""
        exe = self.bin / argv0
        if not exe.exists():
            built = self.kit.folder if self.kit is not None else self.base
            shutil.copyfile(sleeper_binary(built / "sleeper"), exe)
            exe.chmod(0o755)
        proc = subprocess.Popen(
            [str(exe), *args], stdin=subprocess.DEVNULL, start_new_session=True, cwd=self.base
        )
        self.procs.append(proc)
        wait_for_exec(proc.pid, argv0)
        (self.root / "proc" / str(proc.pid)).symlink_to(f"/proc/{proc.pid}")
        if used_bytes is not None:
            self.nvml["devices"][0]["compute_procs"].append({"pid": proc.pid, "used_bytes": used_bytes})
        return proc.pid

    # ------------------------------------------------------------------ the environment

    def env(self, base: Mapping[str, str] | None = None) -> dict[str, str]:
        """The environment a run gets: the doubles first on PYTHONPATH, then
        the fake site-packages; the fake tools first on PATH."""
        nvml_json = self.base / "nvml.json"
        torch_json = self.base / "torch.json"
        nvml_json.write_text(json.dumps(self.nvml))
        torch_json.write_text(json.dumps(self.torch))
        env = hermetic.clean(os.environ if base is None else base)
        for var in HOST_VARS:
            env.pop(var, None)
        env.update(
            {
                "SPARK_FAKE_NVML": str(nvml_json),
                "SPARK_FAKE_TORCH": str(torch_json),
                "SPARK_PREFLIGHT_HOST_ROOT": str(self.root),
                "PYTHONPATH": os.pathsep.join(
                    [str(DOUBLES / "nvml"), str(DOUBLES / "torch"), str(self.site)]
                ),
                "PATH": os.pathsep.join([str(self.bin), env.get("PATH", os.defpath)]),
                "LD_LIBRARY_PATH": "",
                "SMI_LOG": str(self.logs / "nvidia-smi.log"),
                "NO_PROXY": "127.0.0.1,localhost",
                "no_proxy": "127.0.0.1,localhost",
            }
        )
        env.update(self.env_vars)
        return env

    def smi_calls(self) -> list[str]:
        log = self.logs / "nvidia-smi.log"
        return log.read_text().splitlines() if log.exists() else []

    def stop(self) -> None:
        for proc in self.procs:
            proc.kill()
            proc.wait(timeout=5)
        self.procs.clear()


# ---------------------------------------------------------------------- running a scene


GLINE = re.compile(rf"^(?:(?:{'|'.join(catalog.IDS)}) (?:PASS|FAIL|WARN|SKIP|INFO): |verdict: )")


def plugin_args(cli_args: Iterable[str]) -> list[str]:
    """spark-preflight's options as the plugin spells them (``--x`` -> ``--spark-x``)."""
    out = ["--spark-preflight", "-p", "no:cacheprovider", "-p", "no:randomly"]
    return out + [a.replace("--", "--spark-", 1) if a.startswith("--") else a for a in cli_args]


def run_plugin(
    pytester: Any, monkeypatch: pytest.MonkeyPatch, scene: Scene, args: Iterable[str], *pytest_args: str
) -> Any:
    """``pytest --spark-preflight`` in-process (``args`` in the CLI's spelling,
    then plain pytest options), with the scene's environment and its
    site-packages as the only package folder."""
    env = scene.env()
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    for key in set(os.environ) - set(env):
        monkeypatch.delenv(key, raising=False)
    return pytester.runpytest(*plugin_args(args), *pytest_args, plugins=[IsolatedRun()])


def run_cli(
    scene: Scene, cwd: Path, args: Iterable[str], timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """``spark-preflight`` (its ``main``) in a child process, isolated the same way."""
    return subprocess.run(
        [sys.executable, "-c", CLI, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
        env=scene.env(),
    )


def section(outlines: list[str]) -> list[str]:
    """The terminal's ``spark preflight`` section: its G-lines and verdict."""
    start = next(i for i, ln in enumerate(outlines) if re.match(r"^=+ spark preflight =+$", ln))
    end = next((i for i in range(start + 1, len(outlines)) if outlines[i].startswith("==")), len(outlines))
    return [ln for ln in outlines[start + 1 : end] if GLINE.match(ln)]


def failure_message(outlines: list[str], check: str) -> str:
    """The first line of a failed check's report (after pytest's ``___ G6 title ___``)."""
    header = next(i for i, ln in enumerate(outlines) if re.match(rf"^_+ {check} .*_+$", ln))
    return outlines[header + 1]


def assert_clean(*outputs: str) -> None:
    """No INTERNALERROR and no traceback anywhere a user looks."""
    for out in outputs:
        assert "INTERNALERROR" not in out and "Traceback" not in out, out[-3000:]
