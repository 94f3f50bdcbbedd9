"""The spread of the default pipeline's returns over seeds, and what other kernels change: the
measurement behind `pipeline.tools.reproducibility.RETURN_TOLERANCE`.

Input: metric directories, each a copy of a built workspace's `metrics/` (its `train/`, `eval/`
and `rounds/` files), one per seed (`--seeds DIR ...`, built with every `train.<run>.seed`,
`critic.seed` and round seed shifted) and optionally one built from the same params as the first
but with other kernels (`--kernels DIR`). Output: one row per (metric file, return key) with the
seeds' values, their mean and std (ddof 1), the bound, and the other kernels' |difference| from
the first seed; then per env the largest bound, the tolerance to state.

The bound: another machine's kernels change a run as another seed does, so the check compares
two draws of one run's return. Their difference over s * sqrt(2) (s: the sample std of n seeds,
ddof 1) is t-distributed with n - 1 degrees of freedom, and the bound is its two-sided
1 - ALPHA quantile: t(1 - ALPHA / 2, n - 1) * sqrt(2) * s. ALPHA is per checked evaluation; with
the default's ten or so, a machine whose kernels only reseed the runs fails the check with
probability at most about 1 %. Few seeds make it wide (n = 3: 44.7 s; n = 10: 6.8 s): more seeds
narrow it. (It was 4 s, which ignores how poorly 3 seeds estimate s: an Intel AVX-512 machine
moved cartpole-swingup-sac's evaluation by 58.7 against 4 s = 57.5.)

    python -m benchmarks.return_spread --seeds s0 s1 s2 [--kernels native]
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from pathlib import Path

GROUPS = ("train", "eval", "rounds")
# every return a run's metrics hold: evaluations' means and the curves' last episodes
RETURN_KEYS = frozenset({"return_mean", "last_eval_return", "last_episode_return"})
ALPHA = 0.001  # the chance that a reseeded run leaves its bound, per checked evaluation


def bound(std: float, n: int, alpha: float = ALPHA) -> float:
    """|a - b| that two draws of one run's return exceed with probability `alpha`, from the
    sample std (ddof 1) of `n` seeds: t(1 - alpha / 2, n - 1) * sqrt(2) * std."""
    from scipy import stats

    return float(stats.t.ppf(1 - alpha / 2, n - 1)) * math.sqrt(2) * std


def returns(metrics_dir: Path) -> dict[tuple[str, str], float]:
    """(group/file, key) -> value for every return key of the run metric files in `metrics_dir`."""
    found = {}
    for group in GROUPS:
        for path in sorted((metrics_dir / group).glob("*.json")):
            data = json.loads(path.read_text())
            for key in sorted(RETURN_KEYS & set(data)):
                found[(f"{group}/{path.stem}", key)] = float(data[key])
    return found


def env_of(name: str, envs: list[str]) -> str:
    """The env a metric file's run belongs to: the longest env id its file name starts with."""
    stem = name.partition("/")[2]
    matches = [env for env in envs if stem.startswith(env)]
    if not matches:
        raise SystemExit(f"{name}: no env of {envs} prefixes it; pass --envs")
    return max(matches, key=len)


def table(
    seeds: list[dict[tuple[str, str], float]],
    kernels: dict[tuple[str, str], float] | None,
    envs: list[str],
) -> tuple[list[str], dict[str, float]]:
    """Markdown rows, and per env the largest bound over its runs and keys."""
    rows = [
        "| metric | key | " + " | ".join(f"seed {i}" for i in range(len(seeds)))
        + f" | mean +- std (ddof 1) | bound (alpha {ALPHA:g}) | other kernels: abs diff from "
        "seed 0 |",
        "|---|---|" + "---|" * len(seeds) + "---|---|---|",
    ]  # fmt: skip
    tolerance: dict[str, float] = {}
    for name, key in sorted(set.intersection(*(set(s) for s in seeds))):
        values = [s[(name, key)] for s in seeds]
        mean, std = statistics.mean(values), statistics.stdev(values)
        env = env_of(name, envs)
        limit = bound(std, len(values))
        tolerance[env] = max(tolerance.get(env, 0.0), limit)
        other = "" if kernels is None or (name, key) not in kernels else (
            f"{abs(kernels[(name, key)] - values[0]):.1f}"
        )  # fmt: skip
        cells = " | ".join(f"{v:.1f}" for v in values)
        rows.append(
            f"| {name} | {key} | {cells} | {mean:.1f} +- {std:.1f} | {limit:.1f} | {other} |"
        )
    return rows, tolerance


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seeds", nargs="+", type=Path, required=True, help="metrics/ per seed")
    parser.add_argument("--kernels", type=Path, help="metrics/ of seed 0 with other kernels")
    parser.add_argument(
        "--envs",
        nargs="+",
        default=["MountainCarContinuous-v0", "MountainCar-v0", "cartpole-swingup", "CarRacing-v3",
                 "highway-hw"],
    )  # fmt: skip
    args = parser.parse_args(argv)
    if len(args.seeds) < 2:
        raise SystemExit("--seeds: at least two directories (a std needs two values)")
    seeds = [returns(d) for d in args.seeds]
    rows, tolerance = table(seeds, returns(args.kernels) if args.kernels else None, args.envs)
    print("\n".join(rows))
    print("\n| env | tolerance: the largest bound over its runs and keys |\n|---|---|")
    for env, value in sorted(tolerance.items()):
        print(f"| {env} | {value:.1f} |")


if __name__ == "__main__":
    from benchmarks import run_main

    raise SystemExit(run_main(main))
