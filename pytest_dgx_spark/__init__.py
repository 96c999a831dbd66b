"""pytest-dgx-spark: the DGX Spark training gotchas (G1, G2, …: ``catalog``) as pytest tests.

Kept tiny on purpose: pytest imports this package on every run in an
environment where the plugin is installed.
"""

__version__ = "0.3.0"
