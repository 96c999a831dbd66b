"""``python -m pytest_spark``: the ``spark-preflight`` CLI."""

import sys

from pytest_spark.cli import main

sys.exit(main())
