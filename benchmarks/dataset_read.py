"""Dataset read throughput: samples/s reading the training shards with decoding and frame
stacking (pipeline.dataset.loader.iter_stacked) vs reading the raw bytes of the same files
(the decode overhead), measured in the same run on a dataset built by `dvc repro`.

    python -m benchmarks.dataset_read [data/datasets/CarRacing-v3 ...] [--stack 3] [--repeats 3]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from pipeline.dataset.loader import iter_raw, iter_stacked


def _rate(fn, repeats: int) -> tuple[int, float]:
    best = 0.0
    for _ in range(repeats):
        start = time.perf_counter()
        n = sum(1 for _ in fn())
        best = max(best, n / (time.perf_counter() - start))
    return n, best


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("datasets", nargs="*", help="dataset dirs (default: every data/datasets/*)")
    parser.add_argument("--stack", type=int, default=3, help="frames per observation (ERPv: 3)")
    parser.add_argument("--repeats", type=int, default=3, help="best of this many passes")
    args = parser.parse_args()
    dirs = [Path(d) for d in args.datasets] or sorted(
        p for p in Path("data/datasets").iterdir() if p.is_dir()
    )
    print(
        f"{'dataset':<28} {'samples':>8} {'raw bytes':>12} {'stacked x' + str(args.stack):>12} {'ratio':>6}"
    )
    for d in dirs:
        n, raw = _rate(lambda d=d: iter_raw(d / "wds"), args.repeats)
        _, stacked = _rate(lambda d=d: iter_stacked(d / "wds", args.stack), args.repeats)
        print(f"{d.name:<28} {n:>8} {raw:>10.0f}/s {stacked:>10.0f}/s {stacked / raw:>6.2f}")


if __name__ == "__main__":
    from benchmarks import run_main

    raise SystemExit(run_main(main))
