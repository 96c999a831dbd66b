"""``triton.backends.compiler.GPUTarget``."""

from dataclasses import dataclass


@dataclass(frozen=True)
class GPUTarget:
    backend: str
    arch: int
    warp_size: int
