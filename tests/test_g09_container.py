"""G9 on real marker files in a fake root, and real dist-info metadata."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from pytest_dgx_spark.checks.g09_container import check as g9
from pytest_dgx_spark.checks.g09_container.facts import Dist
from pytest_dgx_spark.checks.g09_container.floor import driver_cuda
from pytest_dgx_spark.checks.kit import CheckContext, Params
from pytest_dgx_spark.checks.record import plain
from pytest_dgx_spark.engine import Engine
from pytest_dgx_spark.model import Result, Status
from pytest_dgx_spark.probes.machine import Machine
from pytest_dgx_spark.settings import Settings

from conftest import ONLY_PLANTED

GB10 = Path(__file__).parent / "data" / "gb10"


def facts_of(**fields: object) -> g9.Facts:
    """Facts as a capture holds them (plain data), built the one way the engine builds them."""
    return g9.Facts.from_dict(plain(fields))


def dists_of(dists: dict[str, dict]) -> dict[str, Dist]:
    return {k: Dist.from_dict(d) for k, d in dists.items()}


def decide(facts: g9.Facts) -> Result:
    """evaluate() after the facts' JSON round trip, as the engine runs it."""
    again = g9.Facts.from_dict(json.loads(json.dumps(facts.to_dict())))
    assert again == facts
    result = g9.evaluate(again, Params(profile="gb10"))
    assert result.line() == g9.evaluate(facts, Params(profile="gb10")).line()
    assert result.headline and len(result.short_line()) <= 120
    if result.status in (Status.FAIL, Status.WARN):
        assert result.short_fix
    return result


def dist(name: str, version: str, *requires: str) -> dict:
    return {"name": name, "version": version, "requires": list(requires), "location": ""}


STACK_OK = {
    "torch": dist("torch", "2.9.0a0+50eac811a6.nv25.9", "filelock", "sympy>=1.13.3"),
    "filelock": dist("filelock", "3.20.0"),
    "sympy": dist("sympy", "1.14.0"),
    "transformers": dist(
        "transformers", "4.57.1", "tokenizers<=0.23.0,>=0.22.0", 'torch>=2.2; extra == "torch"'
    ),
    "tokenizers": dist("tokenizers", "0.22.1"),
    "triton": dist("triton", "3.4.0"),
}


def test_ngc_container_with_a_consistent_stack_passes() -> None:
    facts = facts_of(
        dockerenv=True,
        cgroup="0::/\n",
        env={"NVIDIA_PYTORCH_VERSION": "25.09"},
        dists=STACK_OK,
    )
    result = decide(facts)
    assert result.status is Status.PASS
    assert result.summary.startswith(
        "container: NGC PyTorch 25.09 in a Docker container (/.dockerenv); torch 2.9.0a0+50eac811a6.nv25.9"
    )
    assert result.reading("broken_requirements").value == 0


def test_broken_requirement_fails_and_names_it() -> None:
    dists = dict(STACK_OK, tokenizers=dist("tokenizers", "0.23.2"))
    dists["xformers"] = dist("xformers", "0.0.32", "torch==2.8.0", "numpy")
    result = decide(facts_of(dockerenv=True, dists=dists))
    assert result.status is Status.FAIL
    assert result.codes == ["G9.broken-requirements"]
    assert (
        "transformers 4.57.1 requires tokenizers<=0.23.0,>=0.22.0, but tokenizers 0.23.2 is installed"
        in result.summary
    )
    assert (
        "xformers 0.0.32 requires torch==2.8.0, but torch 2.9.0a0+50eac811a6.nv25.9 is installed"
        in result.summary
    )
    assert "xformers 0.0.32 requires numpy, which is not installed" in result.summary
    assert result.reading("broken_requirements").value == 3


def test_requirements_behind_an_extra_or_a_false_marker_are_not_checked() -> None:
    dists = {
        "transformers": dist(
            "transformers", "4.57.1", 'torch>=9; extra == "torch"', 'nothing; python_version < "3"'
        )
    }
    problems, _ = g9.broken_requirements(dists_of(dists))
    assert problems == []


def test_ngc_container_whose_torch_was_replaced_warns() -> None:
    dists = dict(STACK_OK, torch=dist("torch", "2.9.1+cu130"))
    result = decide(facts_of(dockerenv=True, env={"NVIDIA_PYTORCH_VERSION": "25.11"}, dists=dists))
    assert result.status is Status.WARN
    assert result.codes == ["G9.replaced-by-pip"]
    assert "torch 2.9.1+cu130 has no .nvYY.MM suffix" in result.summary  # the version pip put there
    assert result.short_line() == (
        "G9 WARN: NGC 25.11's torch replaced by pip's 2.9.1+cu130; "
        "fix: fresh container, or pip -c /etc/pip/constraint.txt"
    )


@pytest.mark.parametrize(
    ("facts", "name"),
    [
        (
            facts_of(containerenv={"engine": "podman-5.4", "image": "nvcr.io/nvidia/pytorch:25.11-py3"}),
            "Podman container of nvcr.io/nvidia/pytorch:25.11-py3",
        ),
        (facts_of(cgroup="12:pids:/kubepods/besteffort/pod1/abc\n"), "Kubernetes pod"),
        (facts_of(cgroup="0::/system.slice/containerd.service\n"), "containerd container"),
        (facts_of(env={"APPTAINER_CONTAINER": "/img.sif"}), "Apptainer/Singularity container"),
        (facts_of(env={"NVIDIA_PRODUCT_NAME": "CUDA"}), "NGC CUDA image in a container"),
    ],
)
def test_container_kinds_are_named(facts: g9.Facts, name: str) -> None:
    result = decide(facts)
    assert result.status is Status.PASS
    assert result.reading("container").value == name


def test_no_marker_with_an_init_system_is_bare_pip() -> None:
    result = decide(facts_of(cgroup="0::/init.scope\n", pid1="systemd", dists=STACK_OK))
    assert result.status is Status.WARN
    assert result.codes == ["G9.no-container"]
    assert result.summary.startswith("bare pip: no container marker and PID 1 is systemd")


def test_no_marker_otherwise_is_unknown_not_bare() -> None:
    result = decide(facts_of(cgroup="0::/\n", pid1="bash"))
    assert result.status is Status.WARN
    assert result.codes == ["G9.no-container"]
    assert result.summary.startswith("unknown: no container marker matched (PID 1 is 'bash'")
    assert "no training stack installed" in result.summary


def test_h200_recording_is_a_docker_container(h200: Path, fake_root) -> None:
    root = fake_root({".dockerenv": "", "proc/1/cgroup": (h200 / "cgroup.txt").read_text()})
    env = {"PATH": "/usr/bin:/bin", "NVIDIA_PRODUCT_NAME": "CUDA", **ONLY_PLANTED}
    result = Engine(Settings(only=("G9",)), Machine(root=root, env=env)).run("G9")
    assert result.reading("container").value == "NGC CUDA image in a Docker container"


def write_dist(site: Path, name: str, version: str, *requires: str) -> None:
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    lines = [
        "Metadata-Version: 2.1",
        f"Name: {name}",
        f"Version: {version}",
        *[f"Requires-Dist: {r}" for r in requires],
    ]
    (info / "METADATA").write_text("\n".join(lines) + "\n")


def test_reads_real_metadata_from_the_machines_pythonpath(tmp_path: Path, fake_root) -> None:
    site = tmp_path / "site-packages"
    write_dist(site, "transformers", "5.17.0", "tokenizers<0.23,>=0.22", "huggingface-hub>=1.0")
    write_dist(site, "tokenizers", "0.23.2")
    write_dist(site, "huggingface-hub", "1.33.0")
    (site / "broken.dist-info").mkdir()  # no METADATA: counted, not fatal
    root = fake_root({"run/.containerenv": 'engine="podman-5.4.0"\nname="train"\n'})
    machine = Machine(root=root, env={"PYTHONPATH": str(site), **ONLY_PLANTED, "PATH": "/usr/bin:/bin"})
    result = Engine(Settings(), machine).run("G9")
    assert result.status is Status.FAIL
    assert result.codes == ["G9.broken-requirements"]
    assert (
        "transformers 5.17.0 requires tokenizers<0.23,>=0.22, but tokenizers 0.23.2 is installed"
        in result.summary
    )


NGC_ENV = {
    "NVIDIA_PRODUCT_NAME": "PyTorch",
    "NVIDIA_PYTORCH_VERSION": "25.09",
    "PYTORCH_VERSION": "2.9.0a0+50eac81",
    "NVIDIA_BUILD_ID": "206064567",
    "PATH": "/usr/bin:/bin",
}


def test_pip_replacing_ngc_torch_names_the_containers_version(tmp_path: Path, fake_root) -> None:
    """container_vs_pip_1.txt: building Unsloth on nvcr.io/nvidia/pytorch:25.09, pip
    replaced the image's torch-2.9.0a0+50eac811a6.nv25.9 with the PyPI torch 2.9.1.
    A crafted container root (/.dockerenv, NGC's /etc/pip/constraint.txt) and NGC's
    environment; the WARN names the package and the container's own version."""
    text = (GB10 / "container_vs_pip_1.txt").read_text()
    assert text.startswith("# source:")
    original = re.search(r"torch-(2\.9\.0a0\+\w+\.nv25\.9)", text).group(1)
    pypi = re.search(r"torch-(\d+\.\d+\.\d+)-cp312", text).group(1)
    site = tmp_path / "site-packages"
    write_dist(site, "torch", pypi, "filelock")
    write_dist(site, "filelock", "3.20.0")
    write_dist(site, "triton", "3.5.1")
    constraint = f"torch=={original}\ntriton==3.4.0+gitc3c476f3\n# a comment\nnumpy>=1.26\n"
    root = fake_root({".dockerenv": "", "etc/pip/constraint.txt": constraint, "proc/1/cgroup": "0::/\n"})
    machine = Machine(root=root, env={**NGC_ENV, "PYTHONPATH": str(site), **ONLY_PLANTED})
    result = Engine(Settings(only=("G9",)), machine).run("G9")
    assert result.status is Status.WARN, result.report_text()
    assert result.codes == ["G9.replaced-by-pip"]
    assert (
        "NGC PyTorch 25.09 container, but torch 2.9.1 has no .nvYY.MM suffix: pip replaced the container's "
        "build (torch 2.9.0a0+50eac811a6.nv25.9)" in result.summary
    )
    assert "pip replaced its triton 3.4.0+gitc3c476f3 with 3.5.1" in result.summary
    assert result.short_line() == (
        "G9 WARN: NGC 25.09's torch replaced by pip's 2.9.1 (+1 more); fix: fresh container, or pip -c "
        "/etc/pip/constraint.txt"
    )


def test_an_empty_constraint_file_falls_back_to_the_ngc_environment(tmp_path: Path, fake_root) -> None:
    """NGC 25.10+ ships an empty constraint file; PYTORCH_VERSION still names its torch
    (torch_device_props_1.txt: 2.9.0a0+145a3a7bda.nv25.10 inside pytorch:25.10)."""
    assert "2.9.0a0+145a3a7bda.nv25.10" in (GB10 / "torch_device_props_1.txt").read_text()
    site = tmp_path / "site-packages"
    write_dist(site, "torch", "2.9.1+cu130")
    root = fake_root({".dockerenv": "", "etc/pip/constraint.txt": ""})
    env = {**NGC_ENV, "NVIDIA_PYTORCH_VERSION": "25.10", "PYTHONPATH": str(site), **ONLY_PLANTED}
    result = Engine(Settings(only=("G9",)), Machine(root=root, env=env)).run("G9")
    assert result.status is Status.WARN, result.report_text()
    assert result.codes == ["G9.replaced-by-pip"]
    assert "pip replaced the container's build (torch 2.9.0a0+50eac81)" in result.summary
    assert result.headline == "NGC torch 2.9.0a0+50eac81 replaced by 2.9.1+cu130"


def test_ngc_torch_kept_passes(tmp_path: Path, fake_root) -> None:
    """torch_capability_1.txt / torch_device_props_1.txt: NGC torch keeps its .nvYY.MM suffix."""
    version = re.search(r"torch\.version\s*:\s*(\S+)", (GB10 / "torch_device_props_1.txt").read_text()).group(
        1
    )
    assert version.endswith(".nv25.10")
    assert ".nv25.05" in (GB10 / "torch_capability_1.txt").read_text()
    site = tmp_path / "site-packages"
    write_dist(site, "torch", version)
    root = fake_root({".dockerenv": "", "etc/pip/constraint.txt": f"torch=={version}\n"})
    env = {**NGC_ENV, "NVIDIA_PYTORCH_VERSION": "25.10", "PYTHONPATH": str(site), **ONLY_PLANTED}
    result = Engine(Settings(only=("G9",)), Machine(root=root, env=env)).run("G9")
    assert result.status is Status.PASS, result.report_text()
    assert (
        result.short_line()
        == "G9 PASS: container: NGC PyTorch 25.10 in a Docker container; declared requirements hold"
    )


def test_constraint_pins_are_parsed_defensively() -> None:
    text = "Torch==2.9.0a0+x.nv25.9\nflash_attn == 2.7.4.post1  # ngc\nnumpy>=1.26\n\n==1\n-c other.txt\n"
    assert g9.parse_constraints(text) == {"torch": "2.9.0a0+x.nv25.9", "flash-attn": "2.7.4.post1"}


def test_requirement_markers_come_from_the_gathered_facts() -> None:
    """evaluate reads no environment: a marker is judged on the facts' marker values."""
    dists = {
        "transformers": dist("transformers", "4.57.1", 'missing-pkg>=1; platform_machine == "aarch64"'),
    }
    arm = decide(facts_of(dockerenv=True, dists=dists, markers={"platform_machine": "aarch64"}))
    assert arm.status is Status.FAIL
    assert arm.codes == ["G9.broken-requirements"]
    x86 = decide(facts_of(dockerenv=True, dists=dists, markers={"platform_machine": "x86_64"}))
    assert x86.status is Status.PASS


def test_ngc_pre_release_torch_meets_a_plain_specifier_of_accelerate_and_passes() -> None:
    """NGC's torch is a pre-release (2.9.0a0+….nv25.9), and accelerate, peft
    and trl declare a plain ``torch>=2.0.0``: PEP 440 leaves pre-releases out
    of such a specifier unless asked, and then every NGC container with one
    of them would FAIL G9. The comparison allows pre-releases."""
    dists = dict(STACK_OK, accelerate=dist("accelerate", "1.10.1", "torch>=2.0.0", "numpy<3.0.0,>=1.17"))
    dists["numpy"] = dist("numpy", "1.26.4")
    result = decide(facts_of(dockerenv=True, env={"NVIDIA_PYTORCH_VERSION": "25.09"}, dists=dists))
    assert result.status is Status.PASS, result.line()
    assert result.reading("broken_requirements").value == 0
    assert g9.broken_requirements(dists_of(dists)) == ([], [])


# --------------------------------------------------------------------------- the image's CUDA floor (issue 22, N2)

#: /proc/driver/nvidia/version of a Spark on DGX OS's 580 driver, the version of
#: container_error_driver_1.txt ("version 580.159.03 was detected")
DRIVER_580 = (
    "NVRM version: NVIDIA UNIX Open Kernel Module for aarch64  580.159.03  Release Build  "
    "(dvs-builder@U22-I3-H10-02-1)  Tue Mar  3 19:08:06 UTC 2026\n"
    "GCC version:  gcc version 13.3.0 (Ubuntu 13.3.0-6ubuntu2~24.04.1)\n"
)


def posted_driver_error() -> tuple[str, str]:
    """``(the image's driver floor, the host driver)`` as container_error_driver_1.txt posted them."""
    text = (GB10 / "container_error_driver_1.txt").read_text()
    assert text.startswith("# source:")
    m = re.search(r"built for NVIDIA Driver Release (\S+) or later, but\s+version (\S+) was detected", text)
    assert m and "compatibility mode is UNAVAILABLE" in text
    return m.group(1), m.group(2)


def floor_facts(**changes: object) -> g9.Facts:
    """An NGC container on a 580 Spark (NVML: driver 580.159.03, CUDA 13.0)."""
    base = {
        "dockerenv": True,
        "env": {"NVIDIA_PRODUCT_NAME": "vLLM"},
        "nvml_driver": posted_driver_error()[1],
        "nvml_cuda": 13000,
        "host_driver": posted_driver_error()[1],
    }
    return facts_of(**{**base, **changes})


def test_a_cuda_13_2_image_on_the_580_driver_fails_naming_both_versions() -> None:
    """container_error_driver_1.txt (b): a CUDA 13.2-toolchain image on the 13.0 driver dies
    with cudaErrorUnsupportedPtxVersion; G9 says so before the job starts."""
    assert "CUDA 13.2" in (GB10 / "container_error_driver_1.txt").read_text()
    facts = floor_facts(cuda_env={"CUDA_VERSION": "13.2.0", "NVIDIA_REQUIRE_CUDA": "cuda>=13.2 brand=unknown"})
    result = decide(facts)
    assert result.status is Status.FAIL
    assert result.codes == ["G9.driver-below-image"]
    assert result.summary.startswith(
        "image built for CUDA 13.2 (CUDA_VERSION=13.2.0), but host driver 580.159.03 supports CUDA 13.0 (NVML)"
    )
    assert "cudaErrorUnsupportedPtxVersion" in result.summary  # the error the job would die with
    assert "on a 13.0 driver, run an image built with a CUDA 13.0 toolchain" in result.fix  # the host's CUDA
    assert result.short_line() == (
        "G9 FAIL: image needs CUDA 13.2, host driver 580.159.03 gives CUDA 13.0; fix: a CUDA 13.0 image; keep "
        "the NGC ENTRYPOINT"
    )
    assert result.reading("image_cuda").value == "13.2"
    assert result.reading("host_driver_cuda").value == "13.0"


def test_an_image_whose_driver_floor_is_590_48_fails_on_580() -> None:
    """container_error_driver_1.txt (a): NGC's entrypoint refused a 590.48 image on 580.159.03."""
    need, have = posted_driver_error()
    result = decide(floor_facts(cuda_env={"CUDA_DRIVER_VERSION": f"{need}.01"}))
    assert result.status is Status.FAIL
    assert result.codes == ["G9.driver-below-image"]
    assert result.headline == f"image needs driver {need}.01, host driver {have} gives CUDA 13.0"
    assert result.reading("image_driver_floor").value == f"{need}.01"


def test_a_cuda_13_0_image_on_the_580_driver_is_a_reading_not_a_finding() -> None:
    result = decide(floor_facts(cuda_env={"CUDA_VERSION": "13.0.2"}))
    assert result.status is Status.PASS
    assert (
        "image built for CUDA 13.0 (CUDA_VERSION=13.0.2), within what host driver 580.159.03 supports (CUDA 13.0, "
        "NVML)" in result.details
    )
    assert result.reading("image_cuda").value == "13.0"


def test_an_older_image_passes() -> None:
    assert decide(floor_facts(cuda_env={"NVIDIA_REQUIRE_CUDA": "cuda>=12.8 brand=tesla,driver>=470"})).status is (
        Status.PASS
    )


def test_forward_compatibility_in_use_warns_on_gb10_and_is_a_note_elsewhere() -> None:
    """NGC's ENTRYPOINT switches the image's cuda-compat driver on (langX101 PR #409,
    container_error_driver_1.txt (c)); where forward compatibility is supported the newer image
    runs, and G9 only says so. On GB10 NGC's entrypoint reported "compatibility mode is
    UNAVAILABLE" (container_error_driver_1.txt (a)): a WARN, not a silent PASS."""
    env = {"CUDA_VERSION": "13.2.0", "LD_LIBRARY_PATH": "/usr/local/cuda/compat/lib:/usr/local/lib"}
    facts = floor_facts(cuda_env=env, compat_lib="libcuda.so.595.45.04")
    result = decide(facts)
    assert result.status is Status.WARN, result.line()
    assert result.codes == ["G9.forward-compat-gb10"]
    assert result.reading("forward_compat").value == "in use: libcuda.so.595.45.04"
    assert result.short_line() == (
        "G9 WARN: image needs CUDA 13.2, host gives CUDA 13.0: forward compat on GB10; fix: a CUDA 13.0 image"
    )
    generic = g9.evaluate(facts, Params(profile="generic"))
    assert generic.status is Status.PASS, generic.line()
    assert any("forward-compatibility driver libcuda.so.595.45.04 is switched on" in d for d in generic.details)
    linked = floor_facts(cuda_env={"CUDA_VERSION": "13.2.0"}, compat_lib="libcuda.so.1", compat_linked=True)
    assert g9.evaluate(linked, Params(profile="generic")).status is Status.PASS


def test_forward_compatibility_present_but_bypassed_fails() -> None:
    """A `command:` that bypasses NGC's ENTRYPOINT leaves the compat driver unused (PR #409)."""
    env = {"CUDA_VERSION": "13.2.0", "NV_CUDA_COMPAT_PACKAGE": "cuda-compat-13-2"}
    result = decide(floor_facts(cuda_env=env, compat_lib="libcuda.so.595.45.04"))
    assert result.status is Status.FAIL
    assert result.codes == ["G9.driver-below-image"]
    assert result.reading("forward_compat").value == "present, not in use: libcuda.so.595.45.04"
    assert result.reading("image_compat_package").value == "cuda-compat-13-2"


def test_an_unreadable_host_driver_is_said_and_decides_nothing() -> None:
    facts = facts_of(
        dockerenv=True,
        cuda_env={"CUDA_VERSION": "13.2.0"},
        host_driver_error="cannot read /proc/driver/nvidia/version: No such file or directory",
        nvml_error="NVML unavailable: Driver Not Loaded (DriverNotLoaded)",
    )
    result = decide(facts)
    assert result.status is Status.PASS
    assert (
        "image CUDA floor (CUDA_VERSION=13.2.0) not compared: NVML unavailable: Driver Not Loaded (DriverNotLoaded); "
        "cannot read /proc/driver/nvidia/version: No such file or directory" in result.details
    )


@pytest.mark.parametrize(
    ("driver", "cuda"),
    [("580.65.06", (13, 0)), ("580.142", (13, 0)), ("590.48.01", (13, 1)), ("595.45.04", (13, 2)), ("575.57.08", None)],
)
def test_the_driver_table_maps_a_driver_to_its_cuda(driver: str, cuda: tuple[int, int] | None) -> None:
    assert driver_cuda(driver) == cuda


def test_gather_reads_the_floor_from_the_environment_and_the_driver_through_the_root(
    fake_root, doubles
) -> None:
    """The host driver from <root>/proc/driver/nvidia/version, NVML not loadable (a container
    without the driver's libraries): the release notes' table gives its CUDA; the
    cuda-compat link in the image names the compat driver."""
    root = fake_root({".dockerenv": "", "proc/driver/nvidia/version": DRIVER_580, "proc/1/cgroup": "0::/\n"})
    (root / "usr/local/cuda/compat").mkdir(parents=True)
    (root / "usr/local/cuda/compat/libcuda.so.595.45.04").write_text("")
    (root / "usr/local/cuda/compat/libcuda.so.1").symlink_to("libcuda.so.595.45.04")
    doubles.nvml({"init_error": "LibraryNotFound"})
    env = {**doubles.env, **ONLY_PLANTED, "CUDA_VERSION": "13.2.0", "NVIDIA_PRODUCT_NAME": "vLLM"}
    env.pop("LD_LIBRARY_PATH", None)
    result = Engine(Settings(only=("G9",)), Machine(root=root, env=env)).run("G9")
    assert result.status is Status.FAIL, result.report_text()
    assert result.codes == ["G9.driver-below-image"]
    assert result.reading("host_driver").value == "580.159.03"
    assert "supports CUDA 13.0 (the release notes' driver table)" in result.summary
    assert result.reading("forward_compat").value == "present, not in use: libcuda.so.595.45.04"


def test_cdi_mode_of_the_container_runtime_is_a_note(fake_root) -> None:
    """container_error_cdi_1.txt: after `nvidia-ctk config --set nvidia-container-runtime.mode=cdi`,
    `docker --gpus` is refused; the runtime's config.toml says the mode."""
    text = (GB10 / "container_error_cdi_1.txt").read_text()
    assert "nvidia-container-runtime.mode=cdi" in text and "--device nvidia.com/gpu=all" in text
    config = '[nvidia-container-runtime]\nlog-level = "info"\nmode = "cdi"\n'
    root = fake_root({"etc/nvidia-container-runtime/config.toml": config, "proc/1/comm": "systemd\n"})
    facts = g9.gather(CheckContext("G9", Settings(), Machine(root=root, env=dict(ONLY_PLANTED)), None))  # type: ignore[arg-type]
    assert facts.runtime_mode == "cdi"
    result = decide(facts)
    assert result.reading("container_runtime_mode").value == "cdi"
    assert any("--device nvidia.com/gpu=all" in d for d in result.details)


def test_a_garbled_driver_version_file_is_a_reason_not_a_verdict(fake_root, doubles) -> None:
    root = fake_root({".dockerenv": "", "proc/driver/nvidia/version": "\x00\xff NVRM ???\n" * 100})
    doubles.nvml({"init_error": "LibraryNotFound"})
    env = {**doubles.env, **ONLY_PLANTED, "CUDA_VERSION": "13.2.0"}
    facts = g9.gather(CheckContext("G9", Settings(), Machine(root=root, env=env), None))  # type: ignore[arg-type]
    assert facts.host_driver is None
    assert facts.host_driver_error == "/proc/driver/nvidia/version names no kernel module version"
    result = decide(facts)
    assert result.status is Status.PASS
    assert any(d.startswith("image CUDA floor (CUDA_VERSION=13.2.0) not compared: NVML unavailable") for d in result.details)
