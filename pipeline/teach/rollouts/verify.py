"""Integrity check of a rollout directory (in the spirit of Minari's dataset checks).

Checks the manifest against the files (names, sha256, counts) and every sample against the format:
keys, members, frame shape, record fields, contiguous steps per episode with one first and one
last sample, actions inside the action space. Every problem is reported with the shard it is in;
nothing is skipped silently.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tarfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from pipeline.core.io import atomic_write_json, sha256_file
from pipeline.teach.rollouts.format import (
    FORMAT_VERSION,
    JOURNAL_NAME,
    MANIFEST_NAME,
    RECORD_FIELDS,
    SHARD_GLOB,
    action_problem,
)
from pipeline.teach.rollouts.reader import iter_shard

MAX_PROBLEMS_PER_SHARD = 20


@dataclass
class VerifyReport:
    rollout_dir: str
    problems: list[str] = field(default_factory=list)
    shards: int = 0
    episodes: int = 0
    samples: int = 0
    steps: int = 0

    @property
    def ok(self) -> bool:
        return not self.problems


@dataclass
class _EpisodeSeen:
    shard: str
    steps: set[int] = field(default_factory=set)
    first: list[int] = field(default_factory=list)
    last: list[int] = field(default_factory=list)
    ended_at: list[int] = field(default_factory=list)  # t of records with terminated/truncated


def _check_record(
    record: dict[str, Any], episode: int, t: int, manifest: dict[str, Any]
) -> list[str]:
    problems = []
    missing = RECORD_FIELDS - record.keys()
    if missing:
        return [f"record lacks fields {sorted(missing)}"]
    if (record["episode"], record["t"]) != (episode, t):
        problems.append(f"record says episode {record['episode']} t {record['t']}")
    if record["is_last"]:
        if record["action"] is not None or record["reward"] is not None:
            problems.append("final record carries an action or reward")
    else:
        why = action_problem(record["action"], manifest["action_space"])
        if why:
            problems.append(why)
        if not isinstance(record["reward"], int | float):
            problems.append(f"reward {record['reward']!r} is not a number")
        elif not math.isfinite(record["reward"]):  # a NaN / Infinity token: not JSON
            problems.append(f"reward {record['reward']!r} is not finite")
    state_shape = manifest["observation"].get("state")
    if state_shape is not None and (
        not isinstance(record["state"], list) or len(record["state"]) != state_shape[0]
    ):
        problems.append(f"state is not a list of {state_shape[0]} floats")
    elif isinstance(record["state"], list) and not all(
        isinstance(v, int | float) and math.isfinite(v) for v in record["state"]
    ):
        problems.append(f"state {str(record['state'])[:120]} holds a non-finite value")
    if not isinstance(record["context"], dict):
        problems.append("context is not a mapping")
    return problems


def _scan_shard(
    path: Path, manifest: dict[str, Any], seen: dict[int, _EpisodeSeen], check_frames: bool
) -> tuple[int, list[str]]:
    """Read every sample of one shard; return (samples read, problems)."""
    problems: list[str] = []
    count = 0
    pixels_shape = tuple(manifest["observation"]["pixels"])
    try:
        for sample in iter_shard(path):
            count += 1
            where = f"sample {sample.key}"
            ep = seen.setdefault(sample.episode, _EpisodeSeen(path.name))
            if ep.shard != path.name:
                problems.append(f"{where}: episode {sample.episode} also appears in {ep.shard}")
            if sample.t in ep.steps:
                problems.append(f"{where}: duplicate step")
            ep.steps.add(sample.t)
            record = sample.record
            problems += [
                f"{where}: {p}" for p in _check_record(record, sample.episode, sample.t, manifest)
            ]
            if record.get("is_first"):
                ep.first.append(sample.t)
            if record.get("is_last"):
                ep.last.append(sample.t)
            elif record.get("terminated") or record.get("truncated"):
                ep.ended_at.append(sample.t)
            if check_frames:
                try:
                    shape = sample.frame().shape
                except OSError as exc:
                    problems.append(f"{where}: frame is not a readable PNG ({exc})")
                else:
                    if shape != pixels_shape:
                        problems.append(
                            f"{where}: frame shape {shape}, manifest says {pixels_shape}"
                        )
    except (tarfile.TarError, OSError, ValueError, json.JSONDecodeError) as exc:
        problems.append(f"unreadable after {count} samples, truncated or corrupt ({exc})")
    return count, problems


def verify_rollouts(rollout_dir: str | Path, *, check_frames: bool = True) -> VerifyReport:
    rollout_dir = Path(rollout_dir)
    report = VerifyReport(str(rollout_dir))
    problems = report.problems
    manifest_path = rollout_dir / MANIFEST_NAME
    if not manifest_path.exists():
        hint = (
            " (a collection was interrupted: rerun collect)"
            if (rollout_dir / JOURNAL_NAME).exists()
            else ""
        )
        problems.append(f"{MANIFEST_NAME}: missing{hint}")
        return report
    try:
        manifest = json.loads(manifest_path.read_text())
        version, shards, episodes, totals = (
            manifest["format_version"], manifest["shards"], manifest["episodes"], manifest["totals"]
        )  # fmt: skip
        manifest["observation"]["pixels"], manifest["action_space"]["type"]
    except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError, RecursionError) as exc:
        problems.append(f"{MANIFEST_NAME}: unreadable or incomplete ({type(exc).__name__}: {exc})")
        return report
    if version != FORMAT_VERSION:
        problems.append(
            f"{MANIFEST_NAME}: format_version {version}, this code reads {FORMAT_VERSION}"
        )
        return report

    listed = {s["name"] for s in shards}
    for extra in sorted(p.name for p in rollout_dir.glob(SHARD_GLOB) if p.name not in listed):
        problems.append(f"{extra}: shard file not listed in {MANIFEST_NAME}")

    seen: dict[int, _EpisodeSeen] = {}
    for shard in shards:
        path = rollout_dir / shard["name"]
        if not path.exists():
            problems.append(f"{shard['name']}: listed in {MANIFEST_NAME} but missing")
            continue
        shard_problems = []
        if path.stat().st_size != shard["bytes"]:
            shard_problems.append(
                f"size {path.stat().st_size} bytes, manifest says {shard['bytes']}"
            )
        if sha256_file(path) != shard["sha256"]:
            shard_problems.append("sha256 does not match the manifest")
        count, scan_problems = _scan_shard(path, manifest, seen, check_frames)
        shard_problems += scan_problems
        if count != shard["samples"]:
            shard_problems.append(f"{count} samples, manifest says {shard['samples']}")
        first, last = shard["episodes"]
        in_shard = sorted(e for e, s in seen.items() if s.shard == shard["name"])
        if in_shard != list(range(first, last + 1)):
            shard_problems.append(f"holds episodes {in_shard}, manifest says {first}..{last}")
        if len(shard_problems) > MAX_PROBLEMS_PER_SHARD:
            more = len(shard_problems) - MAX_PROBLEMS_PER_SHARD
            shard_problems = [*shard_problems[:MAX_PROBLEMS_PER_SHARD], f"... and {more} more"]
        problems += [f"{shard['name']}: {p}" for p in shard_problems]
        report.shards += 1
        report.samples += count

    for entry in episodes:
        ep = seen.get(entry["episode"])
        name = f"episode {entry['episode']}"
        if ep is None:
            problems.append(
                f"{entry['shard']}: {name} listed in {MANIFEST_NAME} but has no samples"
            )
            continue
        expected = set(range(entry["steps"] + 1))
        if ep.steps != expected:
            gaps = sorted(expected - ep.steps)[:5]
            problems.append(
                f"{ep.shard}: {name} steps are not 0..{entry['steps']} contiguous"
                + (f" (missing t={gaps}...)" if gaps else f" (has t up to {max(ep.steps)})")
            )
        if ep.first != [0]:
            problems.append(f"{ep.shard}: {name} has is_first at t={ep.first}, expected [0]")
        if ep.last != [entry["steps"]]:
            problems.append(
                f"{ep.shard}: {name} has is_last at t={ep.last}, expected [{entry['steps']}]"
            )
        if ep.ended_at not in ([], [entry["steps"] - 1]):
            problems.append(f"{ep.shard}: {name} ends (terminated/truncated) at t={ep.ended_at}")
        report.episodes += 1
        report.steps += len(ep.steps) - 1
    for episode in sorted(set(seen) - {e["episode"] for e in episodes}):
        problems.append(f"{seen[episode].shard}: episode {episode} not listed in {MANIFEST_NAME}")

    for key, value in (("shards", report.shards), ("episodes", report.episodes),
                       ("samples", report.samples), ("steps", report.steps)):  # fmt: skip
        if totals.get(key) != value:
            problems.append(f"{MANIFEST_NAME}: totals.{key} = {totals.get(key)}, found {value}")
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Check rollout directories for integrity.")
    parser.add_argument("rollout_dirs", nargs="+", help="directories written by collect")
    parser.add_argument("--json", help="write the reports (counts and problems) to this file")
    parser.add_argument("--no-frames", action="store_true", help="skip decoding every PNG")
    args = parser.parse_args(argv)
    reports = [verify_rollouts(d, check_frames=not args.no_frames) for d in args.rollout_dirs]
    for report in reports:
        status = "ok" if report.ok else f"{len(report.problems)} problem(s)"
        print(
            f"{report.rollout_dir}: {status}: {report.shards} shards, {report.episodes} episodes, "
            f"{report.steps} steps, {report.samples} samples"
        )
        for problem in report.problems:
            print(f"  {problem}")
    if args.json:
        out = {r.rollout_dir: {**asdict(r), "ok": r.ok} for r in reports}
        atomic_write_json(args.json, out if len(reports) > 1 else next(iter(out.values())))
    return 0 if all(r.ok for r in reports) else 1


if __name__ == "__main__":
    sys.exit(main())
