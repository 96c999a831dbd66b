"""``python -m pytest_dgx_spark``: the ``spark-preflight`` CLI."""

import sys

from pytest_dgx_spark.cli import main

sys.exit(main())
