"""What a run still training has logged: its periodic evaluations and diagnostics, read from the
resume state it saves every `resume_every` steps (under VLMRL_RESUME_ROOT, default
~/.cache/vlmrl/resume/<run>/<fingerprint>/). A table's report reads a run's curves only once it
is done; this is the interim look, for runs that take hours.

    python -m benchmarks.resume_curves frames-cartpole-sac-offline frames-cartpole-erpv-policy1 \\
        --out benchmarks/results/frames_cartpole_interim/curves_s0.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from pipeline.learn.agents.resume import read_plain
from pipeline.tools.sweeps.status import resume_root

KEYS = ("eval_return", "vpg/gate_open", "vpg/zeros/gate_open", "vpg/own/gate_open",
        "vpg/dist_pi_a_v", "guidance/ratio", "encoder_spread", "action_spread", "alpha",
        "critic_loss", "q")  # fmt: skip


def curves(root: Path, run: str) -> dict[str, dict]:
    """Per resume state of `run` (one per fingerprint: its settings and data), the step it
    holds and the logged rows' KEYS."""
    out = {}
    for state in sorted((root / run).glob("*/state.json")):
        plain = read_plain(state.parent)
        rows = [{k: row[k] for k in ("step", *KEYS) if k in row}
                for row in plain["logs"] if isinstance(row, dict)]  # fmt: skip
        out[state.parent.name] = {"step": plain["step"], "logs": rows}
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("runs", nargs="+", help="run names (a table's `<table>-<cell>`)")
    parser.add_argument("--root", type=Path, default=None, help="default: VLMRL_RESUME_ROOT")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    root = args.root or resume_root()
    found = {run: curves(root, run) for run in args.runs}
    missing = [run for run, states in found.items() if not states]
    if missing:
        raise SystemExit(f"{root}: no resume state for {', '.join(missing)}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(found, indent=1, sort_keys=True) + "\n")
    for run, states in found.items():
        for fingerprint, state in states.items():
            evals = [(int(r["step"]), round(r["eval_return"], 1))
                     for r in state["logs"] if "eval_return" in r]  # fmt: skip
            print(f"{run} ({fingerprint}) at step {state['step']}: eval {evals}")


if __name__ == "__main__":
    from benchmarks import run_main

    raise SystemExit(run_main(main))
