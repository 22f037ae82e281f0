"""``python -m benchmarks.suite``: runs the benchmark suite from the checkout (see main.py)."""

import sys

from benchmarks.suite.main import main

sys.exit(main())
