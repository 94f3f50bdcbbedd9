"""The reproducibility policy, and the check that a rebuild keeps it.

1. **Data outputs are the same bytes on every x86-64 machine.** Rollouts, label and mask tables,
   caches, datasets and the teacher's competence are computed by numpy code from the params
   (pipeline/core/kernels.py pins numpy's kernels for this): their hashes in dvc.lock are exact.
2. **What a network computes is the same bytes on one machine**: reruns and resumes of a
   training, a critic, an evaluation or a labelling round rebuild the same files (fixed threads,
   MKL's run-to-run branch; the resume tests and the slow two-directory build check it).
3. **Across machines, a network's outputs may differ in their bytes; their metrics agree within
   `RETURN_TOLERANCE`.** torch runs each CPU's own kernels (1.6-2.1x the pinned ones' training
   rate on an AMD EPYC, 2-3x on an Intel machine; the pinned ones did not make an Intel machine
   agree with an AMD one either), and a training run amplifies a last-bit difference into another
   trajectory: its returns then differ as another seed's would. Network stages are
   `NETWORK_STAGES` and every stage that reads one of their outputs (an evaluation, a round, a
   policy teacher).

`check_rebuild` compares a rebuilt workspace with the commit it came from: every stage's
command, params and data deps, and every data output, exactly; each network metric file's
structure and settings exactly, its returns within the tolerance, and prints every difference it
allowed. `vlmrl-lockcheck` runs it; CI runs it after the quick start.

What the check guarantees, and what it does not:
- Every output on disk is the one its stage wrote: `dvc status` must report no output changed
  against the workspace's dvc.lock (a file edited after `dvc repro`, a model or a report).
- On a machine whose kernel fingerprint (`machine_fingerprint`: CPU model and vector
  extensions, torch's build and CPU capability, numpy, core count) equals the one recorded with
  the committed build (`LOCK_MACHINE`), network outputs must be the same bytes too: nothing is
  allowed to differ.
- On another machine, a network output may differ in its bytes; each evaluation's mean return
  is held to that run's own tolerance (`RUN_RETURN_TOLERANCE`: the t bound of two reseeded
  draws, from the run's returns over three seeds), else its env's (`RETURN_TOLERANCE`). There,
  a tampered network output whose return stays within that spread (a model changed and
  re-committed with `dvc commit`) is not caught: the check is for reproducibility, not a
  signature; what must resist tampering is checked against a trusted commit's dvc.lock
  (`vlmrl-verify --datasets ... --models ...`).
- What a machine paid (`MACHINE_DEPENDENT`: the label stages' cost metrics, seconds and tokens)
  may differ everywhere; only the prompts a fresh build asks, in them, are compared. A round's
  calls follow the frames its agent visited (`AGENT_COST_KEYS`): on another machine, listed.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

# the foreach stages of dvc.yaml whose outputs torch's kernels compute
NETWORK_STAGES = frozenset({"train", "pretrain_critic", "round"})
# outputs that record what this machine paid (seconds, tokens, calls this run): they differ
# between machines and between a run that called the teacher and one the cache answered, on
# any machine; allowed to differ, listed (the prompts a fresh build asks, in them, are data)
MACHINE_DEPENDENT = ("costs/",)
# the keys of a cost file (costs/label/, costs/rounds/) that are data, the same on every machine:
# what a fresh build asks and sends, and its price at the paper's rate
PURE_COST_KEYS = (
    "env", "prompts_fresh_build", "prompts_by_task", "teacher_calls_fresh_build",
    "teacher_calls_by_task", "round", "teacher_calls", "seconds_at_erpv_rate",
)  # fmt: skip
# ...but a round asks about the frames its last agent (a network output) visited: its calls and
# their price move with that agent's kernels (r2: 81 -> 80 calls, Intel against AMD); listed
AGENT_COST_KEYS: dict[str, tuple[str, ...]] = {
    "costs/rounds/": ("teacher_calls", "seconds_at_erpv_rate"),
}
# metric keys that are settings or counts fixed by the params: equal on every machine
EXACT_KEYS = frozenset(
    {"env", "method", "step", "steps", "train_steps", "episodes", "eval_episodes", "round",
     "seed", "std_ddof", "dataset_parts", "policy"}
)  # fmt: skip
# metric keys compared within RETURN_TOLERANCE: an evaluation's mean return (evaluate@<run>,
# evaluate_round@<name>, over `evaluate.episodes`); the training curves' one-episode returns
# (`last_episode_return`, `last_eval_return`) are listed, not checked
RETURN_KEYS = frozenset({"return_mean"})
# |return on another machine - committed return| allowed per env, in the env's return units: the
# bound two draws of a run's return leave with probability 0.001 (t(0.9995, n - 1) * sqrt(2) * s,
# s the std, ddof 1, of the default runs' returns over seeds 0-2), the largest over the env's
# runs and their evaluation, training and round returns (benchmarks.return_spread;
# docs/results/2026-12-06-reproducibility-tolerance.md). A last-bit kernel difference changes a
# run as another seed does, and at the default's smoke-sized budgets that is most of a return;
# with three seeds the bound is 44.7 s wide, so the check catches broken structure, settings and
# numbers, not regressions (the benchmarks measure those, with 5 seeds; more seeds here narrow
# it: 6.8 s with ten). Envs without an entry (added by a user): DEFAULT_RETURN_TOLERANCE.
RETURN_TOLERANCE: dict[str, float] = {
    "CarRacing-v3": 509.3,
    "MountainCar-v0": 1959.3,
    "MountainCarContinuous-v0": 498.4,
    "cartpole-swingup": 7112.3,
    "highway-hw": 27571.0,
}
DEFAULT_RETURN_TOLERANCE = math.inf  # an env nobody measured: structure and finiteness only
# The same, per evaluation, from the run's own return_mean over seeds 0-2
# (benchmarks/results/reproducibility/spread.txt); a run without an entry takes its env's.
# Measured changes of kernels: at most 38.8 (cartpole-swingup-erpv, pinned against native, AMD)
# and 58.7 (cartpole-swingup-sac, an Intel AVX-512 build against the AMD one; 4 s, the rule
# before, allowed 57.5).
RUN_RETURN_TOLERANCE: dict[str, float] = {
    "metrics/eval/CarRacing-v3-semore.json": 509.3,
    "metrics/eval/MountainCar-v0-hybrid_ppo.json": 304.6,
    "metrics/eval/MountainCar-v0-ppo.json": 65.9,
    "metrics/eval/MountainCarContinuous-v0-erpv.json": 498.4,
    "metrics/eval/MountainCarContinuous-v0-sac.json": 7.3,
    "metrics/eval/cartpole-swingup-erpv.json": 1842.8,
    "metrics/eval/cartpole-swingup-sac.json": 642.8,
    "metrics/eval/highway-hw-erpv.json": 27443.9,
    "metrics/eval/highway-hw-semore.json": 24485.8,
}
# The kernel fingerprint of the machine that built the committed dvc.lock (`--record-machine`)
LOCK_MACHINE = "dvc.lock.machine.json"
_KERNEL_FLAGS = ("sse4_2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl",
                 "avx512_vnni", "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16")  # fmt: skip


@dataclass
class Report:
    """What a rebuild changed: `problems` break the policy; `allowed` are network differences."""

    problems: list[str] = field(default_factory=list)
    allowed: list[str] = field(default_factory=list)
    machine: list[str] = field(default_factory=list)  # MACHINE_DEPENDENT differences: costs


def _under(path: str, out: str) -> bool:
    """`path` is `out`, inside it, or a directory holding it."""
    return path == out or path.startswith(out + "/") or out.startswith(path + "/")


def network_stages(stages: Mapping[str, Any]) -> set[str]:
    """The stages whose outputs a network computed: `NETWORK_STAGES` and, transitively, every
    stage with a dep inside one of their outputs."""
    outs = {name: [o["path"] for o in stage.get("outs", [])] for name, stage in stages.items()}
    found = {name for name in stages if name.split("@")[0] in NETWORK_STAGES}
    grew = True
    while grew:
        network_outs = [path for name in found for path in outs[name]]
        new = {
            name
            for name, stage in stages.items()
            if name not in found
            and any(_under(d["path"], o) for d in stage.get("deps", []) for o in network_outs)
        }
        found |= new
        grew = bool(new)
    return found


def _hashes(entries: Iterable[Mapping[str, Any]]) -> dict[str, str | None]:
    return {e["path"]: e.get("md5") or e.get("hash") for e in entries}


def compare_locks(
    committed: Mapping[str, Any], rebuilt: Mapping[str, Any], report: Report
) -> set[str]:
    """Check dvc.lock's stages against the committed ones; return the network stages."""
    before, after = committed.get("stages", {}), rebuilt.get("stages", {})
    for name in sorted(set(before) ^ set(after)):
        side = "only in the committed dvc.lock" if name in before else "not in the committed one"
        report.problems.append(f"stage {name}: {side}")
    network = network_stages(before)
    network_outs = [o["path"] for n in network for o in before[n].get("outs", [])]
    for name in sorted(set(before) & set(after)):
        old, new = before[name], after[name]
        for key in ("cmd", "params"):
            if old.get(key) != new.get(key):
                report.problems.append(f"stage {name}: its {key} differs from the committed one")
        for kind in ("deps", "outs"):
            old_hashes, new_hashes = _hashes(old.get(kind, [])), _hashes(new.get(kind, []))
            for path in sorted(set(old_hashes) | set(new_hashes)):
                if old_hashes.get(path) == new_hashes.get(path):
                    continue
                line = f"{name}: {path} {old_hashes.get(path)} -> {new_hashes.get(path)}"
                if path.startswith(MACHINE_DEPENDENT):
                    report.machine.append(line)
                    continue
                is_network = (
                    name in network
                    if kind == "outs"
                    else any(_under(path, out) for out in network_outs)
                )
                (report.allowed if is_network else report.problems).append(line)
    return network


def _env_of(stage_name: str, stage: Mapping[str, Any]) -> str:
    for keys in stage.get("params", {}).values():
        for key in keys:
            if key.startswith("env."):
                return key.removeprefix("env.")
    return stage_name.partition("@")[2]


def compare_metrics(
    where: str, before: Any, after: Any, tolerance: float, report: Report, key: str = ""
) -> None:
    """One network metric file: the same keys and settings, finite numbers, returns within
    `tolerance`; every other numeric change is allowed and listed."""
    label = f"{where}:{key}" if key else where
    if isinstance(before, dict) and isinstance(after, dict):
        if set(before) != set(after):
            report.problems.append(f"{label}: keys {sorted(before)} -> {sorted(after)}")
        for k in sorted(set(before) & set(after)):
            compare_metrics(
                where, before[k], after[k], tolerance, report, f"{key}.{k}" if key else k
            )
        return
    if isinstance(before, list) and isinstance(after, list):
        if len(before) != len(after):
            report.problems.append(f"{label}: {len(before)} entries -> {len(after)}")
        for i, (b, a) in enumerate(zip(before, after, strict=False)):
            compare_metrics(where, b, a, tolerance, report, f"{key}[{i}]")
        return
    numbers = (int, float)
    is_number = isinstance(before, numbers) and isinstance(after, numbers)
    if not is_number or isinstance(before, bool) or isinstance(after, bool):
        if before != after:
            report.problems.append(f"{label}: {before!r} -> {after!r}")
        return
    if before == after:
        return
    leaf = key.rpartition(".")[2].partition("[")[0]
    if not math.isfinite(after):
        report.problems.append(f"{label}: {before!r} -> {after!r} (not finite)")
    elif leaf in EXACT_KEYS:
        report.problems.append(f"{label}: {before!r} -> {after!r} (a setting: equal everywhere)")
    elif leaf in RETURN_KEYS and abs(after - before) > tolerance:
        report.problems.append(
            f"{label}: {before:.4g} -> {after:.4g}, |difference| {abs(after - before):.4g} > "
            f"the tolerance {tolerance:.4g}"
        )
    else:
        within = f" (tolerance {tolerance:.4g})" if leaf in RETURN_KEYS else ""
        report.allowed.append(f"{label}: {before:.6g} -> {after:.6g}{within}")


def machine_fingerprint() -> dict[str, Any]:
    """What decides the bytes a network computes on this machine: the CPU's model and the vector
    extensions the kernels choose by, torch's build and the CPU capability it dispatches to,
    numpy's version and the core count."""
    import hashlib
    import os
    import platform

    import numpy
    import torch

    cpuinfo = Path("/proc/cpuinfo")
    first: dict[str, str] = {}  # the first processor's fields (a virtual machine's model name
    for line in (cpuinfo.read_text() if cpuinfo.exists() else "").splitlines():  # can be vague:
        key, _, value = line.partition(":")  # vendor, family and model say which generation)
        first.setdefault(key.strip(), value.strip())
    cpu_keys = ("vendor_id", "cpu family", "model", "model name")
    return {
        "cpu": " / ".join(first.get(k, "?") for k in cpu_keys) if first else platform.processor(),
        "cpu_flags": sorted(set(first.get("flags", "").split()) & set(_KERNEL_FLAGS)),
        "cores": os.cpu_count(),
        "machine": platform.machine(),
        "torch": torch.__version__,
        "torch_cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "torch_build_sha256": hashlib.sha256(torch.__config__.show().encode()).hexdigest(),
        "numpy": numpy.__version__,
    }


def modified_outputs(status: Mapping[str, Any]) -> list[str]:
    """The outputs `dvc status --json` reports changed on disk against the workspace's
    dvc.lock, `path (what)` each."""
    found = []
    for entries in status.values():
        for entry in entries if isinstance(entries, list) else []:
            changed = entry.get("changed outs") if isinstance(entry, dict) else None
            for path, what in (changed or {}).items():
                found.append(f"{path} ({what})")
    return sorted(found)


def check_rebuild(
    committed_lock: str,
    rebuilt_lock: str,
    changed: Iterable[str],
    committed_text: Callable[[str], str],
    read_text: Callable[[str], str],
    modified: Iterable[str] = (),
    exact: bool = False,
) -> Report:
    """The policy applied to a rebuild: `changed` are the paths git reports modified or new,
    `committed_text(path)` a file's committed text, `read_text(path)` the workspace's;
    `modified`: outputs that differ from what the workspace's dvc.lock records for them
    (`modified_outputs`); `exact`: this machine's kernels are the committed build's, so network
    outputs must be the same bytes as well."""
    report = Report()
    for line in modified:
        report.problems.append(
            f"{line}: not what its stage wrote (dvc status); restore it with `dvc checkout` "
            "or rerun its stage"
        )
    before = yaml.safe_load(committed_lock) or {}
    network = compare_locks(before, yaml.safe_load(rebuilt_lock) or {}, report)
    stages = before.get("stages", {})
    env_of_file = {
        o["path"]: _env_of(name, stages[name])
        for name in network
        for o in stages[name].get("outs", [])
    }
    for path in sorted(changed):
        if path == "dvc.lock":
            continue
        if path.startswith(MACHINE_DEPENDENT):
            _compare_costs(path, committed_text, read_text, report)
            continue
        if path not in env_of_file or not path.endswith(".json"):
            report.problems.append(f"{path}: changed, and it is not a network stage's metrics")
            continue
        tolerance = RUN_RETURN_TOLERANCE.get(
            path, RETURN_TOLERANCE.get(env_of_file[path], DEFAULT_RETURN_TOLERANCE)
        )
        try:
            old, new = json.loads(committed_text(path)), json.loads(read_text(path))
        except (json.JSONDecodeError, OSError, subprocess.CalledProcessError) as exc:
            report.problems.append(f"{path}: unreadable ({exc})")
            continue
        compare_metrics(path, old, new, tolerance, report)
    if exact:  # the committed build's kernels: every network difference breaks the policy
        report.problems += [f"{line} (this machine's kernels are the committed build's: "
                            "network outputs must be the same bytes)" for line in report.allowed]  # fmt: skip
        report.allowed = []
    return report


def _compare_costs(
    path: str, committed_text: Callable[[str], str], read_text: Callable[[str], str], report: Report
) -> None:
    """A cost file: the same keys and the same prompts a fresh build asks (data); its seconds,
    tokens and calls are this machine's, listed."""
    try:
        old, new = json.loads(committed_text(path)), json.loads(read_text(path))
    except (json.JSONDecodeError, OSError, subprocess.CalledProcessError) as exc:
        report.problems.append(f"{path}: unreadable ({exc})")
        return
    agent = next((keys for prefix, keys in AGENT_COST_KEYS.items() if path.startswith(prefix)), ())
    for key in PURE_COST_KEYS:
        if old.get(key) == new.get(key):
            continue
        change = f"{path}:{key}: {old.get(key)!r} -> {new.get(key)!r}"
        if key in agent and _number(old.get(key)) and _number(new.get(key)):
            report.allowed.append(f"{change} (the frames a network agent visited)")
        else:
            report.problems.append(change)
    if set(old) != set(new):
        report.problems.append(f"{path}: keys {sorted(old)} -> {sorted(new)}")
    report.machine.append(f"{path}: this machine's costs (calls, seconds, tokens)")


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], capture_output=True, text=True, check=True).stdout


def _committed(rev: str) -> bool:
    """Whether `rev` holds LOCK_MACHINE."""
    found = subprocess.run(["git", "cat-file", "-e", f"{rev}:{LOCK_MACHINE}"], capture_output=True)
    return found.returncode == 0


def _dvc_status() -> dict[str, Any]:
    # this interpreter's DVC: `.venv/bin/vlmrl-lockcheck` runs with no venv on PATH (.ci/run)
    command = [sys.executable, "-m", "dvc", "status", "--json"]
    out = subprocess.run(command, capture_output=True, text=True, check=True)
    return json.loads(out.stdout or "{}")


def changed_paths() -> list[str]:
    """Tracked files modified and files git does not ignore, as `git status` lists them."""
    lines = _git("status", "--porcelain", "--untracked-files=all").splitlines()
    return [line[3:].split(" -> ")[-1].strip('"') for line in lines if line.strip()]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="vlmrl-lockcheck",
        description="Check a rebuilt workspace against the commit it came from, by the "
        "reproducibility policy (pipeline/tools/reproducibility.py): data outputs, deps and params "
        "exactly; network outputs by their metrics, returns within the stated tolerance. Run "
        "from the repository root after `dvc repro`.",
    )
    parser.add_argument("--rev", default="HEAD", help="the commit to compare with (HEAD)")
    parser.add_argument("--quiet", action="store_true", help="do not list allowed differences")
    parser.add_argument(
        "--record-machine",
        action="store_true",
        help=f"write this machine's kernel fingerprint to {LOCK_MACHINE} (after a full `dvc "
        "repro`, to commit with dvc.lock) and check nothing",
    )
    args = parser.parse_args(argv)
    if args.record_machine:
        Path(LOCK_MACHINE).write_text(json.dumps(machine_fingerprint(), indent=2) + "\n")
        print(f"wrote {LOCK_MACHINE}: commit it with dvc.lock")
        return 0
    try:
        committed_lock = _git("show", f"{args.rev}:dvc.lock")
        changed = changed_paths()
        recorded = _git("show", f"{args.rev}:{LOCK_MACHINE}") if _committed(args.rev) else None
    except subprocess.CalledProcessError as exc:
        print(f"error: git failed ({exc.stderr.strip()}): run from a git checkout", file=sys.stderr)
        return 2
    exact = recorded is not None and json.loads(recorded) == machine_fingerprint()
    try:
        modified = modified_outputs(_dvc_status()) if Path(".dvc").is_dir() else []
    except (subprocess.CalledProcessError, json.JSONDecodeError) as exc:
        print(f"error: dvc status failed ({exc}): run from the repository root", file=sys.stderr)
        return 2
    print(
        f"{'exact' if exact else 'tolerance'} check: this machine's kernels "
        + ("are" if exact else "are not known to be")
        + f" those of {args.rev}'s build ({LOCK_MACHINE})"
    )
    report = check_rebuild(
        committed_lock,
        Path("dvc.lock").read_text(),
        [path for path in changed if path != LOCK_MACHINE],
        lambda path: _git("show", f"{args.rev}:{path}"),
        lambda path: Path(path).read_text(),
        modified,
        exact,
    )
    if not args.quiet:
        for line in report.allowed:
            print(f"  allowed (network): {line}")
        for line in report.machine:
            print(f"  allowed (this machine's costs): {line}")
    for line in report.problems:
        print(f"  problem: {line}")
    print(
        f"{len(report.allowed)} network differences allowed, {len(report.machine)} of this "
        f"machine's costs, {len(report.problems)} problems "
        f"against {args.rev}'s dvc.lock (policy: pipeline/tools/reproducibility.py)"
    )
    return 1 if report.problems else 0


if __name__ == "__main__":
    sys.exit(main())
