"""DVC stage `check_params`: validate the whole params.yaml before any other stage runs.

Every stage depends on its output, so DVC runs it first and stops at a bad value with the
project's message (one line per problem: the key, the bad value, the allowed values or the fix)
before it deletes any other stage's outputs or reaches a params key that does not exist. Its
output is constant, so a valid change of params reruns only the stages that read it.

    python -m stages.check_params --params params.yaml --out data/params_checked.json
"""

from __future__ import annotations

import argparse
import sys

from pipeline.config import load_params
from pipeline.errors import PipelineError
from pipeline.io import atomic_write_json
from pipeline.methods.table import check_params


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--params", default="params.yaml")
    parser.add_argument("--out", required=True, help="marker file to write when params are valid")
    args = parser.parse_args(argv)
    try:
        check_params(load_params(args.params))
    except PipelineError as exc:
        print(f"error: {exc}\nNothing was run: fix {args.params} and rerun.", file=sys.stderr)
        return 2
    atomic_write_json(
        args.out, {"params": "valid"}
    )  # constant: dependants rerun on their own params
    print(f"{args.params}: valid")
    return 0


if __name__ == "__main__":
    sys.exit(main())
