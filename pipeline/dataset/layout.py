"""The one definition of the shareable dataset's layout (what `dataset@<env>` writes and every
reader of it reads). Light on purpose: no webdataset, no `datasets` import, so stage two can
read it without the builder's dependencies.

    data/datasets/<env>/
      README.md                         the dataset card (YAML header: `load_dataset(dir)` reads it)
      meta/info.json                    format version, sources and their hashes, teachers, counts
      data/train-0000i-of-0000N.parquet Hugging Face dataset, one file per rollout shard: frames
                                        and the eq. 4 mask as `Image`, labels as columns. What
                                        stage two reads (pipeline.dataset.transitions).
      wds/shard-00000i.tar              webdataset training shards for streaming readers outside
                                        this repo: the same samples plus per-phrase masks
                                        (`masks.npz`), which the parquet does not carry.
"""

from __future__ import annotations

import fnmatch
import json
import posixpath
import re
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import yaml

from pipeline.core.errors import PipelineError
from pipeline.core.io import sha256_file

# 2: meta/info.json records every file's sha256 (`files`); format 1 datasets may not, and are
# refused by read_info with the rebuild command, never read unverified.
# 3: a shard's `labels.json` holds the sample's label columns under the parquet's names (`a_v`,
# `a_v_status`, `milestone`, ...), where format 2 nested them by task (`action.action`).
DATASET_FORMAT_VERSION = 3
CARD_NAME = "README.md"
INFO_PATH = "meta/info.json"
PARQUET_DIR = "data"
PARQUET_PATTERN = "train-%05d-of-%05d.parquet"
PARQUET_GLOB = f"{PARQUET_DIR}/train-*.parquet"
WDS_DIR = "wds"
# The card's YAML header as the Hub and `datasets` find it (huggingface_hub's REGEX_YAML_BLOCK).
_CARD_HEADER = re.compile(r"^(\s*---(?:\r\n|\r|\n))([\S\s]*?)((?:\r\n|\r|\n)---[ \t]*(\r\n|\n|$))")
_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")

# Label columns per task, as the label table names them (the dataset's parquet and shards name
# the action label `a_v` / `a_v_index`: `action` is the action taken).
LABEL_COLUMNS: dict[str, list[str]] = {
    "action": ["action", "action_index"],
    "milestone": ["milestone", "potential"],
    "objects": ["objects"],
    "judge": ["judge"],
}
# The prefix of each task's columns in the parquet (`<prefix>_status`, provenance below).
TASK_PREFIX: dict[str, str] = {
    "action": "a_v",
    "milestone": "milestone",
    "objects": "objects",
    "judge": "judge",
}
# Provenance of each task's label, so that whoever gets the dataset can tell queried frames from
# carried ones and re-audit the answers: `<prefix>_<field>`.
PROVENANCE_FIELDS = ("queried", "source_key", "teacher_id", "raw_text", "parse_detail")
# Parquet columns of the observations stage two reads, by the agent's `obs` kind.
OBS_COLUMN: dict[str, str] = {"pixels": "image", "state": "state"}
# Per-step parquet columns every transition reader needs (RLDS-style episodes, ERPv's a_v).
STEP_COLUMNS = ("episode", "t", "action", "reward", "terminated", "is_first", "is_last")
ACTION_LABEL_COLUMNS = ("a_v", "a_v_status")  # continuous action spaces (a_v_index if discrete)
MASK_COLUMN = "mask"  # Semore eq. 4's combined mask (8-bit PNG), null where there is none
# The parquet's columns of the sample itself; every other column is a label column, and a
# shard's `labels.json` holds exactly those, under the same names.
SAMPLE_COLUMNS = (
    "key", "episode", "t", "image", "state", "action", "reward", "terminated", "truncated",
    "is_first", "is_last", "behaviour", "context", MASK_COLUMN,
)  # fmt: skip
JUDGE_COLUMNS = ("judge", "judge_status")


class DatasetError(PipelineError, ValueError):
    """A dataset cannot be read as asked; the message names the file and the fix."""


class DatasetIntegrityError(DatasetError):
    """A dataset file does not match the checksum meta/info.json records for it."""


def verify_dataset(dataset_dir: str | Path) -> list[str]:
    """Problems of a dataset directory against its meta/info.json, one line each with the fix
    (empty: every file it records is there with its checksum, and no parquet is unrecorded)."""
    dataset_dir = Path(dataset_dir)
    fix = f"restore it with `dvc checkout {dataset_dir}` or rebuild it (`dvc repro dataset@<env>`)"
    try:
        recorded = read_info(dataset_dir).get("files")
    except (FileNotFoundError, ValueError) as exc:
        return [f"{exc}"]
    if not isinstance(recorded, dict):
        return [f"{dataset_dir / INFO_PATH} has no `files` checksums (damaged or edited); {fix}"]
    problems = []
    for name, sha in sorted(recorded.items()):
        path = dataset_dir / name
        if not path.exists():
            problems.append(f"{path} is missing; {fix}")
        elif sha256_file(path) != sha:
            problems.append(f"{path} is damaged: its sha256 does not match {INFO_PATH}; {fix}")
    for path in sorted(dataset_dir.glob(PARQUET_GLOB)):
        if str(path.relative_to(dataset_dir)) not in recorded:
            problems.append(f"{path} is not part of this dataset ({INFO_PATH}); remove it")
    return problems + _card_problems(dataset_dir, recorded, fix)


def _data_file_patterns(data_files: Any) -> list[str]:
    """The patterns of a card config's `data_files`, in every form `datasets` accepts (its
    `sanitize_patterns`: a string, a list, `{split: path(s)}`, `[{split, path}]`)."""
    if isinstance(data_files, str):
        return [data_files]
    if isinstance(data_files, dict):
        return [p for value in data_files.values() for p in _data_file_patterns(value)]
    if isinstance(data_files, list):
        out = []
        for entry in data_files:
            out += _data_file_patterns(entry["path"] if isinstance(entry, dict) else entry)
        return out
    raise ValueError(f"unreadable data_files {data_files!r}")


def _matches(pattern: str, relpath: str) -> bool:
    # fnmatch's `*` also crosses `/`, so it matches at least what datasets' glob does; `**/`
    # may also match no folder at all, as in fsspec
    return any(fnmatch.fnmatchcase(relpath, p) for p in {pattern, pattern.replace("**/", "")})


def _card_problems(dataset_dir: Path, recorded: dict[str, str], fix: str) -> list[str]:
    """The card's `configs` (what `load_dataset(dir)` reads) may name only files that
    meta/info.json records: a card edited to point at another parquet would otherwise be served
    by `load_dataset` while every recorded file still matches its checksum."""
    card = dataset_dir / CARD_NAME
    if not card.exists():
        return []
    try:
        match = _CARD_HEADER.search(card.read_text())
        header = yaml.safe_load(match.group(2)) if match else None
    except (UnicodeDecodeError, yaml.YAMLError) as exc:
        return [f"{card}: its YAML header is unreadable ({type(exc).__name__}); {fix}"]
    configs = header.get("configs") if isinstance(header, dict) else None
    if not isinstance(configs, list) or not configs:
        return [
            f"{card} has no `configs` naming the dataset's parquet files (`load_dataset` would "
            f"guess which files to read); {fix}"
        ]
    present = [
        p.relative_to(dataset_dir).as_posix() for p in sorted(dataset_dir.rglob("*")) if p.is_file()
    ]
    problems = []
    for config in configs:
        name = config.get("config_name", "?") if isinstance(config, dict) else "?"
        try:
            if not isinstance(config, dict):
                raise ValueError(f"a config is {config!r}")
            data_dir = config.get("data_dir") or ""
            if config.get("data_files") is None:  # datasets infers them from the folder
                patterns = [posixpath.join(data_dir, "**")]
            else:
                patterns = [
                    posixpath.join(data_dir, p) for p in _data_file_patterns(config["data_files"])
                ]
        except (ValueError, KeyError, TypeError) as exc:
            problems.append(f"{card}: config {name!r} is malformed ({exc}); {fix}")
            continue
        for pattern in patterns:
            if not isinstance(pattern, str):
                problems.append(f"{card}: config {name!r} names {pattern!r}; {fix}")
                continue
            normal = posixpath.normpath(pattern)
            if _URL.match(pattern) or normal.startswith(("/", "..")) or Path(pattern).is_absolute():
                problems.append(
                    f"{card}: config {name!r} reads {pattern!r}, outside the dataset (only files "
                    f"{INFO_PATH} records may be read); {fix}"
                )
                continue
            for relpath in present:
                if (
                    relpath not in recorded
                    and relpath not in (CARD_NAME, INFO_PATH)
                    and _matches(normal, relpath)
                ):
                    problems.append(
                        f"{card}: config {name!r} makes `load_dataset` read {relpath}, which is "
                        f"not recorded in {INFO_PATH}; {fix}"
                    )
    return problems


def parquet_files(dataset_dir: str | Path) -> list[Path]:
    """The dataset's parquet files in order, each verified against the checksum meta/info.json
    records, so that no damaged file reaches the parquet reader (or training)."""
    dataset_dir = Path(dataset_dir)
    files = sorted(dataset_dir.glob(PARQUET_GLOB))
    if not files:
        raise FileNotFoundError(
            f"no parquet files ({PARQUET_GLOB}) in {dataset_dir}: build the dataset first "
            f"(`dvc repro dataset@<env>`)"
        )
    problems = verify_dataset(dataset_dir)
    if problems:
        raise DatasetIntegrityError("\n".join(problems))
    return files


def dataset_hashes(dataset_dir: str | Path) -> dict[str, str]:
    """sha256 of each (verified) parquet file, keyed `dataset/data/<name>`: what a model trained
    on it records as its data."""
    dataset_dir = Path(dataset_dir)
    recorded = read_info(dataset_dir)["files"]
    return {
        f"dataset/{name}": recorded[name]
        for name in (str(p.relative_to(dataset_dir)) for p in parquet_files(dataset_dir))
    }


def read_info(dataset_dir: str | Path) -> dict[str, Any]:
    path = Path(dataset_dir) / INFO_PATH
    if not path.exists():
        raise FileNotFoundError(
            f"{path} not found: not a dataset built by the dataset stage; build it with "
            f"`dvc repro dataset@<env>` (or restore it: `dvc checkout {Path(dataset_dir)}`)"
        )
    try:
        info = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as exc:
        raise DatasetError(
            f"{path} is not valid JSON ({exc}); restore it with `dvc checkout {Path(dataset_dir)}` "
            f"or rebuild the dataset (`dvc repro dataset@<env>`)"
        ) from None
    if not isinstance(info, dict):
        raise DatasetError(f"{path}: expected a JSON object; rebuild the dataset (`dvc repro dataset@<env>`)")  # fmt: skip
    if info.get("format_version") != DATASET_FORMAT_VERSION:
        raise DatasetError(
            f"{path}: dataset format {info.get('format_version')}, this code reads "
            f"{DATASET_FORMAT_VERSION}; rebuild it (`dvc repro dataset@<env>`)"
        )
    return info


def dataset_action_space(dataset_dir: str | Path) -> gym.spaces.Box:
    """The Box action space recorded in a dataset's meta/info.json (for stages without an env)."""
    space = read_info(dataset_dir)["action_space"]
    if space["type"] != "box":
        raise DatasetError(
            f"{Path(dataset_dir) / INFO_PATH}: action space is {space['type']}; SAC-family "
            f"agents need a Box"
        )
    shape = tuple(space["shape"])
    low = np.asarray(space["low"], dtype=np.float32).reshape(shape)
    high = np.asarray(space["high"], dtype=np.float32).reshape(shape)
    return gym.spaces.Box(low, high, dtype=np.float32)
