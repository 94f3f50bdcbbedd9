"""DVC stage `verify@<env>`: integrity check of a rollout directory; fails the pipeline on any
problem and writes the counts as DVC metrics.

    python -m stages.verify data/rollouts/CarRacing-v3 --json metrics/rollouts/CarRacing-v3.json
"""

import sys

from pipeline.teach.rollouts.verify import main

if __name__ == "__main__":
    sys.exit(main())
