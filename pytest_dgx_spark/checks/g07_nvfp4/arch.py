"""SM121's build targets: arch names (``sm_121a``, ``12.0f``, ``blackwell``) parsed, and whether a
target runs on GB10 (compute capability 12.1) or carries its FP4 instructions; tool versions parsed.
Pure functions of text: G7's probe and its decisions share them."""

from __future__ import annotations

import re
from typing import NamedTuple

SM121 = (12, 1)
#: torch's TORCH_CUDA_ARCH_LIST names (torch/utils/cpp_extension.py)
NAMED_ARCHS = {
    "kepler": ["3.5", "3.7"], "maxwell": ["5.0", "5.2"], "pascal": ["6.0", "6.1"], "volta": ["7.0"],
    "turing": ["7.5"], "ampere": ["8.0", "8.6"], "ada": ["8.9"], "hopper": ["9.0"],
    "blackwell": ["10.0", "12.0"],
}
_SM = re.compile(r"^(?:(sm|compute|lto)_)?(\d+)(?:\.(\d+))?([a-z]?)(\+ptx)?$", re.IGNORECASE)
_CUBIN = re.compile(r"\bsm_(\d+)([a-z]?)\b")


class Arch(NamedTuple):
    """One build target: ``sm_121a`` -> Arch(12, 1, "a", "sm")."""

    major: int
    minor: int
    suffix: str  # "", "a" (arch-specific) or "f" (family)
    kind: str  # "sm" (cubin) or "compute" (PTX)

    @property
    def name(self) -> str:
        return f"{self.kind}_{self.major}{self.minor}{self.suffix}"


def parse_arch(token: str) -> list[Arch]:
    """Parse one arch name defensively; unknown text gives ``[]``."""
    m = _SM.match(token.strip().lower())
    if not m:
        return []
    kind, digits, minor_text, suffix, ptx = m.groups()
    if minor_text is not None:  # "12.1a"
        major, minor = int(digits), int(minor_text)
    elif len(digits) >= 2:  # "121" / sm_90
        major, minor = int(digits[:-1]), int(digits[-1])
    else:
        return []
    out = [Arch(major, minor, suffix, "compute" if kind == "compute" else "sm")]
    return [*out, Arch(major, minor, suffix, "compute")] if ptx else out


def parse_arch_list(text: str | list[str] | None) -> tuple[list[Arch], list[str]]:
    """A list (torch) or a ``TORCH_CUDA_ARCH_LIST`` string (``"9.0a;12.1a 12.0+PTX"``)."""
    if text is None:
        return [], []
    archs: list[Arch] = []
    bad: list[str] = []
    for raw in text if isinstance(text, list) else re.split(r"[;,\s]+", text):
        token = str(raw).strip()
        named = NAMED_ARCHS.get(token.lower().replace("+ptx", ""))
        ptx = "+PTX" if token.lower().endswith("+ptx") else ""
        parsed = [a for n in named for a in parse_arch(n + ptx)] if named else parse_arch(token)
        if parsed:
            archs.extend(parsed)
        elif token:
            bad.append(token)
    return archs, bad


def targets_121a(archs: list[Arch]) -> bool:
    """An ``sm_121a`` cubin, or ``compute_121a`` PTX the driver compiles for SM121."""
    return any((a.major, a.minor, a.suffix) == (12, 1, "a") for a in archs)


def parse_cuobjdump(text: str) -> list[str]:
    """Cubin targets from ``cuobjdump --list-elf`` (``ELF file 1: x.sm_121a.cubin``)."""
    lines = [line for line in text.splitlines() if "ELF file" in line]
    return list(dict.fromkeys(f"sm_{mm}{s}" for line in lines for mm, s in _CUBIN.findall(line)))


def runs_on_sm121(arch: Arch) -> bool:
    """Can this build target execute on SM121 (compute capability 12.1)?"""
    if arch.suffix == "a":
        return (arch.major, arch.minor) == SM121
    if arch.kind == "sm" or arch.suffix == "f":
        return arch.major == 12 and arch.minor <= 1
    return (arch.major, arch.minor) <= SM121


def fp4_target(arch: Arch) -> bool:
    """A target with SM12x's FP4 instructions that runs on SM121: ``sm_121a``,
    ``sm_121f``, ``sm_120f`` (a plain ``sm_120`` runs, without them)."""
    return arch.major == 12 and arch.suffix in ("a", "f") and runs_on_sm121(arch)


def _two(pattern: str, text: str) -> list[int] | None:
    m = re.search(pattern, text or "")
    return [int(m.group(1)), int(m.group(2))] if m else None


def ptxas_release(text: str) -> list[int] | None:
    """``[12, 8]`` from ``ptxas --version`` (``Cuda compilation tools, release 12.8, V12.8.93``)."""
    return _two(r"release (\d+)\.(\d+)", text)


def cublas_release(text: str) -> list[int] | None:
    """``[13, 1]`` from ``13.1.0.3`` or ``libcublasLt.so.13.1.0.3``."""
    return _two(r"(?:^|\.so\.)(\d+)\.(\d+)", text)


def names(archs: list[Arch]) -> str:
    return ", ".join(dict.fromkeys(a.name for a in archs))


def version_tuple(text: str) -> tuple[int, ...]:
    return tuple(_two(r"^(\d+)\.(\d+)", text) or ())


def release_floor(value: float) -> tuple[int, int]:
    return int(value), round((value - int(value)) * 10)
