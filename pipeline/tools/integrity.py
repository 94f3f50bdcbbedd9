"""`vlmrl-verify`: one command that checks everything stage one stores, and says what to do about
each problem: rollout directories (against their manifests), label and mask caches (every segment
against the checksum in its name; no two segments answering one key differently) and shareable
datasets (every file against meta/info.json, the card's `configs` against the files it records,
and, inside a DVC repository, every file against the hashes DVC recorded for it).

    vlmrl-verify data/rollouts/* --caches data/label_cache/* data/mask_cache/* \\
        --datasets data/datasets/* --models models/* models/critics/*

meta/info.json travels beside the data, so whoever can rewrite the data (e.g. with write access to
a DVC remote only) can rewrite it too. `dvc.lock` is in git: the md5 of the dataset folder's file
listing it records, and through that listing every file's md5 (the card included), say what was
shared, whatever the remote or the local DVC cache now hold. Agent and critic checkpoints
(`--models`) are checked the same way against dvc.lock, and their agent.json against the sha256
their weights carry.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from dataclasses import dataclass
from pathlib import Path

import yaml
from dvc.config import Config, ConfigError  # DVC reads its config levels itself

from pipeline.core.segments import verify_store
from pipeline.dataset.layout import verify_dataset
from pipeline.teach.rollouts.verify import main as verify_rollouts_main

LOCK_NAME = "dvc.lock"


@dataclass(frozen=True)
class _RecordedOut:
    """A DVC output that holds a directory to check: where it is recorded and its listing's md5."""

    path: Path  # the output's folder (absolute)
    record: Path  # the dvc.lock or .dvc file that records it
    md5: str  # `<md5>.dir`: the md5 of the listing of its files
    hash_name: str | None  # `md5` (DVC 3); None: DVC 2's md5-dos2unix (not checked here)


def _md5(path: Path, chunk: int = 1 << 20) -> str:
    h = hashlib.md5()  # DVC's content address, not a security choice of ours
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def _repo_root(path: Path) -> Path | None:
    return next((p for p in (path, *path.parents) if (p / ".dvc").is_dir()), None)


def _recorded_outs(record: Path, base: Path) -> list[_RecordedOut]:
    """The directory outputs a dvc.lock (`stages.*.outs`) or .dvc file (`outs`) records."""
    try:
        data = yaml.safe_load(record.read_text())
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return []  # DVC itself reports an unreadable record on its next command
    if not isinstance(data, dict):
        return []
    stages = data.get("stages") if record.name == LOCK_NAME else {"": data}
    outs = []
    for stage in stages.values() if isinstance(stages, dict) else []:
        for out in stage.get("outs") or [] if isinstance(stage, dict) else []:
            if not isinstance(out, dict) or not isinstance(out.get("path"), str):
                continue
            md5 = out.get("md5")
            if isinstance(md5, str) and md5.endswith(".dir"):
                path = (base / out["path"]).resolve()
                outs.append(_RecordedOut(path, record, md5, out.get("hash")))
    return outs


def _dvc_record(directory: Path, root: Path) -> _RecordedOut | None:
    """The output recording `directory` (itself or a folder above it): from the dvc.lock files
    of the repository root and of the folders between it and `directory`, and from `<folder>.dvc`
    files; the nearest wins."""
    chain = [directory, *directory.parents[: len(directory.parents) - len(root.parents)]]
    candidates = []
    for folder in chain:
        if (folder / LOCK_NAME).is_file():
            candidates += _recorded_outs(folder / LOCK_NAME, folder)
        dvc_file = folder.with_name(folder.name + ".dvc")
        if folder != root and dvc_file.is_file():
            candidates += _recorded_outs(dvc_file, folder.parent)
    inside = [c for c in candidates if c.path == directory or c.path in directory.parents]
    return max(inside, key=lambda c: len(c.path.parts), default=None)


def _cache_dir(root: Path) -> Path:
    configured = Config(dvc_dir=str(root / ".dvc"))["cache"].get("dir")
    return Path(configured) if configured else root / ".dvc" / "cache"


def unverified_remotes(directory: str | Path) -> list[str]:
    """Names of the DVC remotes of the repository holding `directory` whose downloads `dvc pull`
    does not check against their content address (`verify` false, DVC's default)."""
    root = _repo_root(Path(directory).resolve())
    if root is None:
        return []
    try:
        remotes = Config(dvc_dir=str(root / ".dvc"))["remote"]
    except ConfigError:
        return []  # verify_against_dvc reports it
    return sorted(name for name, conf in remotes.items() if not conf.get("verify"))


def verify_against_dvc(directory: str | Path) -> tuple[str, list[str]]:
    """(what `directory`'s files were checked against, their problems, one line each with the
    fix): inside a DVC repository whose dvc.lock (or a .dvc file) records the folder, every file
    against the md5 in the file listing that record names."""
    given, directory = Path(directory), Path(directory).resolve()
    root = _repo_root(directory)
    out = None if root is None else _dvc_record(directory, root)
    if out is None:
        return "meta/info.json only (not a DVC output of a repository here)", []
    shown = out.path.relative_to(root) if root in out.path.parents else out.path
    record = out.record.relative_to(root) if root in out.record.parents else out.record
    checked = f"meta/info.json and {record} ({shown})"
    if out.hash_name != "md5":
        return f"meta/info.json only ({record} records {shown} with DVC 2 hashes)", []
    try:
        objects = _cache_dir(root) / "files" / "md5"
    except ConfigError as exc:
        return checked, [f"{root / '.dvc'}: DVC cannot read its config ({exc}); fix it first"]
    listing = objects / out.md5[:2] / out.md5[2:]
    if not listing.is_file():
        return checked, [
            f"{directory}: {record} records {shown} as {out.md5}, whose file listing is not in "
            f"the DVC cache ({listing}); fetch it with `dvc fetch {shown}` (`dvc pull {shown}`) "
            f"so that the files can be checked"
        ]
    if _md5(listing) != out.md5.removesuffix(".dir"):
        return checked, [
            f"{listing}: the DVC cache's file listing of {shown} does not match its name (damaged "
            f"or tampered); remove it (`rm -f {listing}`), set `verify = true` on the remote "
            f"(`dvc remote modify <name> verify true`) and `dvc pull --force {shown}`"
        ]
    try:
        entries = {e["relpath"]: e["md5"] for e in json.loads(listing.read_bytes())}
    except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError) as exc:
        return checked, [f"{listing}: unreadable file listing ({exc}); `dvc pull --force {shown}`"]
    prefix = directory.relative_to(out.path).as_posix()
    prefix = "" if prefix == "." else prefix + "/"
    problems = []
    for relpath, md5 in sorted(entries.items()):
        if not relpath.startswith(prefix):
            continue
        path = given / relpath.removeprefix(prefix)  # as the user named the folder
        if not path.is_file():
            problems.append(f"{path} is missing ({record} records it); `dvc checkout {shown}`")
            continue
        if _md5(path) == md5:
            continue
        # DVC trusts its own record of a file it checked out (inode, size, mtime): a tampered
        # copy it wrote itself stays through `dvc checkout --force`, so the fixes remove it first
        cached = objects / md5[:2] / md5[2:]
        if not cached.is_file():
            fix = f"restore it: `rm {path} && dvc pull {shown}`"
        elif _md5(cached) != md5:
            fix = (
                f"the DVC cache holds a changed copy too ({cached}), e.g. pulled from a remote "
                f"without `verify`: `rm -f {cached} {path}`, set `verify = true` on the remote "
                f"(`dvc remote modify <name> verify true`) and `dvc pull {shown}`"
            )
        else:
            fix = f"restore it: `rm {path} && dvc checkout --force {shown}`"
        problems.append(
            f"{path} does not match the md5 {record} records for it (changed after DVC wrote it, "
            f"or a tampered copy was pulled); {fix}"
        )
    recorded = {r.removeprefix(prefix) for r in entries if r.startswith(prefix)}
    for path in sorted(p for p in given.rglob("*") if p.is_file()):
        if path.relative_to(given).as_posix() not in recorded:
            problems.append(f"{path} is not part of {shown} as {record} records it; remove it")
    return checked, problems


def _check_dataset(directory: str) -> tuple[str, list[str]]:
    checked, problems = verify_against_dvc(directory)
    return checked, verify_dataset(directory) + problems


def _check_model(directory: str) -> tuple[str, list[str]]:
    """An agent or critic checkpoint: its agent.json against the sha256 its weights carry, and
    every file against the md5 dvc.lock records (a checkpoint that reached you through a DVC
    remote is the one the commit built)."""
    from pipeline.learn.agents.checkpoint import CheckpointError, read_meta

    checked, problems = verify_against_dvc(directory)
    checked = checked.replace("meta/info.json", "the sha256 in its weights", 1)
    try:
        read_meta(directory)
    except CheckpointError as exc:
        problems.insert(0, str(exc))
    return checked, problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("rollout_dirs", nargs="*", help="directories written by collect")
    parser.add_argument("--caches", nargs="+", default=[], help="label / mask cache directories")
    parser.add_argument("--datasets", nargs="+", default=[], help="dataset directories")
    parser.add_argument(
        "--models", nargs="+", default=[], help="agent / critic checkpoint directories"
    )
    parser.add_argument("--json", help="write the rollout reports to this file")
    parser.add_argument("--no-frames", action="store_true", help="skip decoding every PNG")
    args = parser.parse_args(argv)
    if not (args.rollout_dirs or args.caches or args.datasets or args.models):
        parser.error("give rollout directories, --caches, --datasets and/or --models")
    ok = True
    for kind, directories, check in (
        ("cache", args.caches, lambda d: ("", verify_store(d))),
        ("dataset", args.datasets, _check_dataset),
        ("model", args.models, _check_model),
    ):
        for directory in directories:
            checked, problems = check(directory)
            ok &= not problems
            status = "ok" if not problems else f"{len(problems)} problem(s)"
            print(
                f"{directory} ({kind}): {status}"
                + (f"; checked against {checked}" if checked else "")
            )
            for problem in problems:
                print(f"  {problem}")
    remotes = {name for directory in args.datasets for name in unverified_remotes(directory)}
    for name in sorted(remotes):
        print(
            f"note: DVC remote '{name}' does not verify what `dvc pull` downloads, so a tampered "
            f"file in it is taken silently: `dvc remote modify {name} verify true`"
        )
    if args.rollout_dirs:
        extra = [*(["--json", args.json] if args.json else []), *(["--no-frames"] * args.no_frames)]
        ok &= verify_rollouts_main([*args.rollout_dirs, *extra]) == 0
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
