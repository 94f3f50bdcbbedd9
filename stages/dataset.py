"""DVC stage `dataset@<env>`: join rollouts, labels and masks into the dataset users share.

    python -m stages.dataset --params params.yaml --rollouts data/rollouts/CarRacing-v3 \\
        --labels data/labels/CarRacing-v3.parquet --masks data/masks/CarRacing-v3.parquet \\
        --out data/datasets/CarRacing-v3
"""

from __future__ import annotations

import argparse
import sys

from pipeline.core.config import ConfigError, load_params
from pipeline.core.errors import PipelineError, print_error
from pipeline.dataset.build import build_dataset


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--params", default="params.yaml")
    parser.add_argument("--rollouts", required=True)
    parser.add_argument("--labels", required=True)
    parser.add_argument("--masks", required=True)
    parser.add_argument("--out", required=True, help="dataset directory to write")
    args = parser.parse_args(argv)
    try:
        params = load_params(args.params)
        if params.dataset is None:
            raise ConfigError(f"{args.params} has no `dataset` section")
        info = build_dataset(
            args.rollouts,
            args.labels,
            args.masks,
            args.out,
            shard_max_samples=params.dataset.shard_max_samples,
        )
    except (PipelineError, FileNotFoundError) as exc:
        print_error(exc)
        return 2
    c = info["counts"]
    print(
        f"{args.out}: {c['samples']} samples, {c['parquet_files']} parquet files, {c['wds_shards']} training shards"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
