"""The readings read outside the check that produces them: each named once here, with its check.

``diagnose`` gates a log's ambiguous lines on the machine's state as today's checks read it (G1's
kernel and CMA, G3's free 32 MiB blocks, G6's other GPU processes, G9's image and driver CUDA).
The producing check writes each through the name here and diagnose reads it through the same
name, so a rename is one edit, never a silent break (``tests/test_diagnose.py`` holds each to a
reading its check really produces).
"""

from __future__ import annotations

from typing import NamedTuple


class Shared(NamedTuple):
    """A reading by its check and name."""

    check: str
    name: str


KERNEL_RELEASE = Shared("G1", "kernel_release")
CMA_TOTAL = Shared("G1", "cma_total")  # kB, /proc/meminfo's CmaTotal
CMA_FREE = Shared("G1", "cma_free")  # kB, /proc/meminfo's CmaFree
NORMAL_FREE_BLOCKS = Shared("G3", "normal_free_blocks")  # free 32 MiB blocks in zone Normal
OTHER_GPU_PROCESSES = Shared("G6", "other_gpu_processes")  # how many other processes hold GPU memory
IMAGE_CUDA = Shared("G9", "image_cuda")  # "13.2": the CUDA the image needs
HOST_DRIVER_CUDA = Shared("G9", "host_driver_cuda")  # "13.0": the CUDA the host's driver supports

#: every reading above, for the test that holds each to its check
ALL = (KERNEL_RELEASE, CMA_TOTAL, CMA_FREE, NORMAL_FREE_BLOCKS, OTHER_GPU_PROCESSES, IMAGE_CUDA,
       HOST_DRIVER_CUDA)
