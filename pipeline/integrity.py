"""`vlmrl-verify`: one command that checks everything stage one stores, and says what to do about
each problem: rollout directories (against their manifests), label and mask caches (every segment
against the checksum in its name) and shareable datasets (every file against meta/info.json).

    vlmrl-verify data/rollouts/* --caches data/label_cache/* data/mask_cache/* \\
        --datasets data/datasets/*
"""

from __future__ import annotations

import argparse
import sys

from pipeline.dataset.layout import verify_dataset
from pipeline.rollouts.verify import main as verify_rollouts_main
from pipeline.segments import verify_store


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("rollout_dirs", nargs="*", help="directories written by collect")
    parser.add_argument("--caches", nargs="+", default=[], help="label / mask cache directories")
    parser.add_argument("--datasets", nargs="+", default=[], help="dataset directories")
    parser.add_argument("--json", help="write the rollout reports to this file")
    parser.add_argument("--no-frames", action="store_true", help="skip decoding every PNG")
    args = parser.parse_args(argv)
    if not (args.rollout_dirs or args.caches or args.datasets):
        parser.error("give rollout directories, --caches and/or --datasets")
    ok = True
    for kind, directories, check in (
        ("cache", args.caches, verify_store),
        ("dataset", args.datasets, verify_dataset),
    ):
        for directory in directories:
            problems = check(directory)
            ok &= not problems
            print(
                f"{directory} ({kind}): {'ok' if not problems else f'{len(problems)} problem(s)'}"
            )
            for problem in problems:
                print(f"  {problem}")
    if args.rollout_dirs:
        extra = [*(["--json", args.json] if args.json else []), *(["--no-frames"] * args.no_frames)]
        ok &= verify_rollouts_main([*args.rollout_dirs, *extra]) == 0
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
