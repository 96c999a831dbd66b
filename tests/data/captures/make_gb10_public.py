"""Build ``gb10-public-healthy.json.gz``: a capture of the GB10 double.

The double (tests/doubles/gb10.py, tests/doubles/spark_scene.py) answers with
the values and formats that DGX Spark owners posted (tests/data/gb10/); this
script runs ``spark-preflight --capture`` on its healthy scene and writes the
capture here. Its header says what it is: ``built_from`` names the public
captures the double's answers come from (``gb10-public/<file>``, each copied
verbatim to ``tests/data/gb10/`` with its ``# source:`` line, and where it was
posted), and ``host`` is a Spark's as one owner posted it, not the machine
that ran the double.

    python tests/data/captures/make_gb10_public.py                # run the double again
    python tests/data/captures/make_gb10_public.py --header-only  # rewrite the header only
"""

from __future__ import annotations

import gzip
import json
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
TESTS = HERE.parent.parent
sys.path.insert(0, str(TESTS))

from localserver import ISSUES_PATH, Answer, LocalServer  # noqa: E402

from doubles import elfkit  # noqa: E402
from doubles.spark_scene import DATA, Scene, run_cli  # noqa: E402

#: the files the double's answers come from: the public GB10 captures (copied
#: to tests/data/gb10/) with where each was posted, and G8's GitHub answer
BUILT_FROM = [
    {
        "file": "tests/data/github/issues_open.json",
        "source": "GitHub's issues API answer for NVIDIA/dgx-spark-playbooks: real issue numbers and titles, "
        "illustrative bodies (tests/data/github/README.md)",
    },
    {"file": "gb10-public/nvml_memory_1.txt", "source": "https://github.com/XuehaiPan/nvitop/pull/208"},
    {
        "file": "gb10-public/nvidia-smi_clocks_power_1.txt",
        "source": "https://github.com/colonel-otto/3x-dgx-spark-mesh-deepseek-v4-0731-flash/blob/"
        "d4c2dbf15accad6f74304e3dedaa6e58f5c494cf/docs/GPU-CLOCKS-NOT-LOCKABLE.md",
    },
    {
        "file": "gb10-public/nvidia-smi-q_1.txt",
        "source": "https://github.com/lordachoo/AI-Related-Notes-Pub/blob/"
        "0f9a5de69dd68bd3e53fd30dc4ae20cdc235b240/DGX-SPARK/GB10-Wattage/README.md",
    },
    {
        "file": "gb10-public/nvidia-smi_3.txt",
        "source": "https://github.com/Surfer11May/DwemerA4Skyrim3_AI_Spark (latest_errors.md)",
    },
    {"file": "gb10-public/nvml_process_memory_1.txt", "source": "https://github.com/Syllo/nvtop/pull/511"},
    {
        "file": "gb10-public/torch_arch_list_1.txt",
        "source": "https://github.com/jethac/dgx-spark-hijinks/blob/29166059ba96e77d33f60b7fd0e8032a40ab87e4/"
        "results/aeon_gemma26_dflash_20260608T0436JST_container_versions.json",
    },
    {
        "file": "gb10-public/torch_arch_list_2.txt",
        "source": "https://github.com/jethac/dgx-spark-hijinks/blob/29166059ba96e77d33f60b7fd0e8032a40ab87e4/"
        "results/spark_doctor_20260607T110629Z.json",
    },
    {
        "file": "gb10-public/proc_meminfo_2.txt",
        "source": "a Rust test constant 'Captured from a real DGX Spark' (public code file; "
        "repository path was not recorded)",
    },
]

#: the host identity of a Spark as posted: arch, kernel and Python from
#: torch_arch_list_2.txt (its uname and platform); the GPU and driver are the
#: double's (nvml_memory_1.txt); hostname and OS were not recorded by a source used here
HOST = {
    "hostname": "not recorded",
    "arch": "aarch64",
    "kernel": "6.17.0-1021-nvidia",
    "os": "not recorded",
    "python": "3.12.3",
}

NOTE = (
    "not a real Spark: a capture of the GB10 test double, whose answers are what DGX Spark owners "
    "posted (see built_from). host: arch, kernel and Python from gb10-public/torch_arch_list_2.txt, "
    "GPU and driver from gb10-public/nvml_memory_1.txt, hostname and OS not recorded. The checks' "
    "facts about installed packages (G1's arch, G9's environment markers, site-packages and "
    "temporary paths) are those of the x86_64 machine that ran the double"
)


def header(doc: dict) -> dict:
    """``doc`` with this capture's header: its sources, a Spark's host identity, the note."""
    host = {**doc.get("host", {}), **HOST}
    doc["host"] = host
    if isinstance(doc.get("probes", {}).get("identity"), dict):
        doc["probes"]["identity"] = dict(host)  # the same identity, recorded as a probe answer
    doc["built_from"] = BUILT_FROM
    doc["note"] = NOTE
    return doc


def save(doc: dict) -> None:
    raw = (json.dumps(doc, indent=1) + "\n").encode()
    (HERE / "gb10-public-healthy.json.gz").write_bytes(gzip.compress(raw, mtime=0))


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        kit = elfkit.session_kit(base / "kit")
        scene = Scene(base / "spark", kit)
        scene.files({".dockerenv": "", "proc/1/cgroup": "0::/\n"})
        scene.env_vars.update({"NVIDIA_PRODUCT_NAME": "CUDA", "CUDA_VERSION": "13.0.2", "NVIDIA_VISIBLE_DEVICES": "0"})
        scene.cuda13_stack()
        scene.install("transformers", "4.57.1")
        run_dir = base / "project"
        run_dir.mkdir()
        (run_dir / "pytest.ini").write_text("[pytest]\n")
        target = base / "gb10.json"
        args = ["--thermal-seconds", "0.3", "--timeout", "5", "--capture", str(target)]
        args += ["--playbook", "pytorch-fine-tune"]
        with LocalServer() as server:  # G8: GitHub's recorded answer, no issue names this playbook
            server.answers[ISSUES_PATH] = Answer(body=(DATA / "github" / "issues_open.json").read_bytes())
            proc = run_cli(scene, run_dir, [*args, "--github-url", server.url])
        print(proc.stdout, proc.stderr, sep="")
        doc = json.loads(target.read_text())
    save(header(doc))
    (HERE / "gb10-public-healthy.lines").write_text(proc.stdout + f"exit {proc.returncode}\n")


if __name__ == "__main__":
    if sys.argv[1:] == ["--header-only"]:
        save(header(json.loads(gzip.decompress((HERE / "gb10-public-healthy.json.gz").read_bytes()))))
    else:
        main()
