"""Stands in for "CuPy is not installed" on a machine that has it (the GPU
image does): importing it fails exactly as a missing package does."""

raise ModuleNotFoundError("No module named 'cupy'", name="cupy")
