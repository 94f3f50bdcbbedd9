"""`python -m pipeline.tools.sweeps`: `vlmrl-sweep` where no console script is installed."""

import sys

from pipeline.tools.sweeps.cli import main

sys.exit(main())
