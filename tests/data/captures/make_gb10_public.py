"""Build ``gb10-public-healthy.json.gz``: a capture of the GB10 double.

The double (tests/doubles/gb10.py, tests/doubles/spark_scene.py) answers with
the values and formats that DGX Spark owners posted (tests/data/gb10/); this
script runs ``spark-preflight --capture`` on its healthy scene and writes the
capture here, with the files it was built from in its ``built_from`` key.

    python tests/data/captures/make_gb10_public.py
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

BUILT_FROM = [
    "tests/data/github/issues_open.json",
    "tests/data/gb10/nvml_memory_1.txt",
    "tests/data/gb10/nvidia-smi_clocks_power_1.txt",
    "tests/data/gb10/nvidia-smi-q_1.txt",
    "tests/data/gb10/nvidia-smi_3.txt",
    "tests/data/gb10/nvml_process_memory_1.txt",
    "tests/data/gb10/torch_arch_list_1.txt",
    "tests/data/gb10/torch_arch_list_2.txt",
    "tests/data/gb10/proc_meminfo_2.txt",
]


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
    doc["built_from"] = BUILT_FROM
    doc["note"] = (
        "not a real Spark: the GB10 test double, whose answers are what DGX Spark owners posted "
        "(see built_from); host paths of the machine that built it are in it"
    )
    raw = (json.dumps(doc, indent=1) + "\n").encode()
    (HERE / "gb10-public-healthy.json.gz").write_bytes(gzip.compress(raw, mtime=0))
    (HERE / "gb10-public-healthy.lines").write_text(proc.stdout + f"exit {proc.returncode}\n")


if __name__ == "__main__":
    main()
