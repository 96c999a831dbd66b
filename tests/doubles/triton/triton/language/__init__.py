"""``triton.language``: the names the preflight kernel uses (never executed by the double)."""

float32 = "fp32"


def store(pointer, value):
    raise RuntimeError("triton.language.store is only valid inside a @triton.jit kernel")
