"""Build the default pipeline at other seeds: the input of `benchmarks.return_spread`, whose std
over seeds sets the cross-machine return tolerance (pipeline/tools/reproducibility.py).

Seed k sets every `train.<run>.seed` and `critic.seed` to k and each round's seed to its value
+ 10 k, everything else as in params.yaml, and runs `dvc repro` in a clone of the commit checked
out here (sharing this checkout's DVC cache: the data stages are restored, not rebuilt). Its
`metrics/{train,eval,rounds,critic}` land in `OUT/seed<k>/` once the build has finished (a seed
whose directory exists is skipped: rerun the command after a stop and it goes on). Background
work: one seed at a time, one thread (params' `threads: 1`), at `--nice`.

    python -m benchmarks.seed_builds --seeds 0 1 2 3 4 5 6 7 8 9 \\
        --out benchmarks/results/reproducibility/seeds-<commit> --work ../seed-builds
    python -m benchmarks.return_spread --seeds benchmarks/results/reproducibility/seeds-<commit>/*
"""

from __future__ import annotations

import argparse
import copy
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

ROUND_SEED_STRIDE = 10  # round seeds: their value + 10 k, so that no two seeds share one
METRICS = ("train", "eval", "rounds", "critic")


def shifted_params(params: dict[str, Any], seed: int) -> dict[str, Any]:
    """params.yaml for seed `seed`: every train run's and C_V's seed set to it, each round's
    seed moved by ROUND_SEED_STRIDE * seed."""
    out = copy.deepcopy(params)
    for run in (out.get("train") or {}).values():
        run["seed"] = seed
    if "critic" in out:
        out["critic"]["seed"] = seed
    for spec in (out.get("rounds") or {}).values():
        spec["seed"] = int(spec.get("seed", 0)) + ROUND_SEED_STRIDE * seed
    return out


def build(seed: int, repo: Path, work: Path, out: Path) -> Path:
    """One seed's build (see the module's doc); returns its metrics directory under `out`."""
    done = out / f"seed{seed}"
    if done.exists():
        print(f"seed {seed}: {done} exists, skipped", flush=True)
        return done
    clone = work / f"seed{seed}"
    if not clone.exists():
        subprocess.run(["git", "clone", "-q", str(repo), str(clone)], check=True)
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True,
                              text=True, check=True).stdout.strip()  # fmt: skip
        subprocess.run(["git", "checkout", "-q", head], cwd=clone, check=True)
        cache = (repo / ".dvc" / "cache").resolve()
        subprocess.run(["dvc", "cache", "dir", "--local", str(cache)], cwd=clone, check=True)
    committed = subprocess.run(["git", "show", "HEAD:params.yaml"], cwd=clone,
                               capture_output=True, text=True, check=True).stdout  # fmt: skip
    params = yaml.safe_load(committed)
    (clone / "params.yaml").write_text(yaml.safe_dump(shifted_params(params, seed)))
    print(f"seed {seed}: dvc repro in {clone}", flush=True)
    subprocess.run(["dvc", "repro"], cwd=clone, check=True)  # DVC resumes what it had built
    partial = out / f".seed{seed}.partial"
    shutil.rmtree(partial, ignore_errors=True)
    for group in METRICS:
        if (clone / "metrics" / group).is_dir():
            shutil.copytree(clone / "metrics" / group, partial / group)
    partial.rename(done)  # whole or absent
    print(f"seed {seed}: metrics in {done}", flush=True)
    return done


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seeds", nargs="+", type=int, required=True)
    parser.add_argument("--out", type=Path, required=True, help="metrics per seed land here")
    parser.add_argument("--work", type=Path, required=True, help="the clones, one per seed")
    parser.add_argument("--repo", type=Path, default=Path("."), help="the checkout to clone")
    parser.add_argument("--nice", type=int, default=19)
    args = parser.parse_args(argv)
    repo = args.repo.resolve()
    if not (repo / ".dvc" / "cache").is_dir():
        raise SystemExit(f"{repo}: no DVC cache; run `dvc repro` there first (./setup.sh)")
    os.nice(max(0, args.nice - os.nice(0)))
    os.environ["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
    args.out.mkdir(parents=True, exist_ok=True)
    args.work.mkdir(parents=True, exist_ok=True)
    for seed in args.seeds:
        build(seed, repo, args.work.resolve(), args.out.resolve())


if __name__ == "__main__":
    from benchmarks import run_main

    raise SystemExit(run_main(main))
