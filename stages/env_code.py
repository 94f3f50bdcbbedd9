"""DVC stage `env_code`: each env's building code as a file its stages depend on.

A brought env's factory or package is code that dvc.yaml cannot list (its module is a params
value). This stage runs on every `dvc repro` (`always_changed`, cheap: it imports no simulator)
and writes `<out>/<env>.json` for every env in `envs` (pipeline.core.env_code): editing a
factory's module reruns that env's stages alone; an unchanged file reruns nothing.

    python -m stages.env_code --params params.yaml --out data/env_code
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

from pipeline.core.config import load_params
from pipeline.core.env_code import env_code
from pipeline.core.errors import PipelineError, print_error
from pipeline.core.io import atomic_write_json


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--params", default="params.yaml")
    parser.add_argument("--out", type=Path, required=True, help="directory of <env>.json files")
    args = parser.parse_args(argv)
    # the project's modules import as the stages import them: from the working directory
    sys.path.insert(0, str(Path.cwd()))
    try:
        params = load_params(args.params)
        files = {
            env_id: env_code(env_id, params.env[env_id].make, Path.cwd()) for env_id in params.envs
        }
    except PipelineError as exc:
        print_error(f"{exc}\nNothing was written: fix {args.params} and rerun.")
        return 2
    if args.out.exists():  # an env removed from `envs` leaves no file behind
        shutil.rmtree(args.out)
    args.out.mkdir(parents=True)
    for env_id, code in files.items():
        atomic_write_json(args.out / f"{env_id}.json", code)
    brought = [e for e, code in files.items() if len(code) > 1]
    print(
        f"{args.out}: {len(files)} envs"
        + (f"; brought code: {', '.join(brought)}" if brought else "")
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
