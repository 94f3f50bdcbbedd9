"""How fast each run's temperature moved, in units of the optimiser's step: from a table's
results.json (`vlmrl-sweep report`), each run's `alpha` curve (one point per `log_every` steps,
the mean over that interval's updates) gives the change of log alpha per alpha update between
consecutive points, divided by `alpha_lr`. Adam moves a parameter by about its learning rate per
update whenever the gradient keeps one sign, however large, so a run near +1 (or -1) throughout
had its alpha pushed one way at every update: its path then says how long it trained, not what
pushed it (docs/results/2026-12-07-frames-cartpole-alpha-path.md).

    python -m benchmarks.alpha_rate benchmarks/results/frames_cartpole/results.json
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
from pathlib import Path
from typing import Any

from benchmarks import run_main


def alpha_rates(curve: list[list[float]], alpha_lr: float, updates_per_step: float) -> list[float]:
    """Per interval between consecutive (step, alpha) points: d log alpha / (updates x lr)."""
    return [
        math.log(a1 / a0) / ((s1 - s0) * updates_per_step) / alpha_lr
        for (s0, a0), (s1, a1) in itertools.pairwise(curve)
    ]


def table_rates(results: dict[str, Any], alpha_lr: float, updates_per_step: float) -> list[dict]:
    """One row per run that logged alpha: its cell, seed, rates, and alpha at the last point."""
    rows = []
    for run in results["experiments"]:
        curve = (run.get("curves") or {}).get("alpha")
        if not curve or len(curve) < 2:
            continue
        rates = alpha_rates(curve, alpha_lr, updates_per_step)
        rows.append({"run": run["name"], "cell": run["cell"], "seed": run["seed"],
                     "rates": rates, "last_alpha": curve[-1][1], "last_step": curve[-1][0]})  # fmt: skip
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("results", type=Path, help="a table's results.json")
    parser.add_argument("--alpha-lr", type=float, default=1e-4, help="the runs' alpha_lr")
    parser.add_argument(
        "--updates-per-step",
        type=float,
        default=0.5,
        help="alpha updates per agent step (1 / actor_update_freq with update_every 1)",
    )
    args = parser.parse_args(argv)
    rows = table_rates(json.loads(args.results.read_text()), args.alpha_lr, args.updates_per_step)
    if not rows:
        raise SystemExit(f"{args.results}: no run logged an alpha curve")
    print("| run | d log alpha per update / alpha_lr, each interval | alpha at the last point |")
    print("|---|---|---|")
    for r in rows:
        rates = " ".join(f"{x:+.2f}" for x in r["rates"])
        print(f"| {r['run']} | {rates} | {r['last_alpha']:.4f} at {r['last_step']:g} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(run_main(main))
