"""Labelled transitions read from the shareable dataset's parquet files (pipeline.dataset.layout):
how stage two's SAC-family agents get the cached labels (ERPv sec. 3.2: tau_t = {o_t, a_t, r_t,
o_{t+1}, d_t, a_v,t}), without asking a VLM while training. The replay buffer
(pipeline.learn.agents.replay) holds them as its offline part; C_V's pre-training reads them alone.

Conventions of the dataset (pipeline.teach.rollouts.format, RLDS style): an episode of T steps has T + 1
samples; sample t holds o_t, the action a_t taken there, the reward r_t it earned and the end flags
that followed it; the last sample (`is_last`) holds o_T with null action and reward. So transition
t is (sample t's obs, action, reward, terminated; sample t+1's obs). `done` is `terminated` only: a
truncated episode's last state still bootstraps. A label counts (`has_label`) when `a_v` is present
and `a_v_status` is one of LABELLED_STATUSES; `next_a_v` is the label of sample t+1 (the VLM
policy at the next state, which C_V's pre-training bootstraps from without calling the VLM).

Labels are *declared fields* (`FieldSpec`): per observation (Semore's mask, has_mask) or per
transition (ERPv's a_v, has_label, next_a_v, has_next_label; Semore's judge), each with the fill
value that rows without it (online transitions) carry. A reader asks for the label groups it
needs (`LABELS`); the replay buffer carries whatever fields the data declares without knowing
which method reads them (DrQ-v2's ReplayBufferStorage(data_specs)).
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal

import numpy as np
import polars as pl
from PIL import Image

from pipeline.core.envs.wrappers import resize_frame
from pipeline.dataset.layout import (
    ACTION_LABEL_COLUMNS,
    JUDGE_COLUMNS,
    MASK_COLUMN,
    OBS_COLUMN,
    STEP_COLUMNS,
    DatasetError,
    parquet_files,
)
from pipeline.teach.labels.status import LABELLED_STATUSES

ObsKind = Literal["pixels", "state"]
Per = Literal["observation", "transition"]


@dataclass(frozen=True)
class FieldSpec:
    """One declared field: its name, whether it has a row per observation or per transition, the
    shape and dtype of one row, and the value of rows that lack it (online transitions)."""

    name: str
    per: Per
    shape: tuple[int, ...]
    dtype: str
    fill: float | int | bool

    def empty(self, n: int) -> np.ndarray:
        """`n` rows of the fill value."""
        return np.full((n, *self.shape), self.fill, dtype=self.dtype)


def action_label_specs(action_dim: int) -> tuple[FieldSpec, ...]:
    """ERPv's labels: a_v of o_t and of o_{t+1} in env units, each with its presence flag."""
    return (
        FieldSpec("a_v", "transition", (action_dim,), "float32", 0.0),
        FieldSpec("has_label", "transition", (), "bool", False),
        FieldSpec("next_a_v", "transition", (action_dim,), "float32", 0.0),
        FieldSpec("has_next_label", "transition", (), "bool", False),
    )


def mask_specs(frame_hw: tuple[int, int]) -> tuple[FieldSpec, ...]:
    """Semore's eq. 4 mask map M of each observation (uint8 0..255, (1, H, W): it broadcasts over
    a frame's RGB channels) and whether the frame has one (its `objects` label parsed)."""
    return (
        FieldSpec("mask", "observation", (1, *frame_hw), "uint8", 0),
        FieldSpec("has_mask", "observation", (), "bool", False),
    )


JUDGE_SPEC = FieldSpec("judge", "transition", (), "int8", -1)  # 1 reasonable, 0 not, -1 unknown

Label = Literal["action", "mask", "judge"]
LABELS: tuple[Label, ...] = ("action", "mask", "judge")  # the label groups a reader may ask for


@dataclass(frozen=True, eq=False)
class OfflineTransitions:
    """Transitions of a dataset, observations stored once per sample (N_obs >= N + episodes), and
    the declared label fields (`specs`, arrays in `fields`: (N_obs, *shape) per observation,
    (N, *shape) per transition); `data["a_v"]` reads one."""

    obs: np.ndarray  # (N_obs, H, W, 3) uint8 frames or (N_obs, D) float32 states
    episode_start: np.ndarray  # (N_obs,) int64: index in `obs` of its episode's first observation
    obs_index: np.ndarray  # (N,) int64: transition i goes from obs[obs_index[i]] to the next one
    action: np.ndarray  # (N, A) float32, in the env's action units
    reward: np.ndarray  # (N,) float32
    terminated: np.ndarray  # (N,) bool
    specs: tuple[FieldSpec, ...] = ()
    fields: dict[str, np.ndarray] = field(default_factory=dict)
    # (N,) int64: which directory of `load_offline_transitions` the transition came from (0 the
    # dataset, k its k-th `also`: a labelling round's part); all 0 when not given
    part: np.ndarray | None = None
    # (N_obs,) int64 each: the dataset sample (`episode`, `t`) an observation is, which names
    # its frame (`sample_key`); None when not read from a dataset
    episode: np.ndarray | None = None
    t: np.ndarray | None = None

    def __post_init__(self) -> None:
        n, n_obs = len(self.obs_index), len(self.obs)
        if self.part is None:
            object.__setattr__(self, "part", np.zeros(n, np.int64))  # frozen: set once, here
        for name in ("episode", "t"):
            values = getattr(self, name)
            if values is not None and len(values) != n_obs:
                raise ValueError(f"{name} has {len(values)} rows, obs {n_obs}")
        if len(self.episode_start) != n_obs:
            raise ValueError(f"episode_start has {len(self.episode_start)} rows, obs {n_obs}")
        for name in _PER_TRANSITION:
            if len(getattr(self, name)) != n:
                raise ValueError(f"{name} has {len(getattr(self, name))} rows, obs_index {n}")
        if n and (self.obs_index.min() < 0 or self.obs_index.max() + 1 >= n_obs):
            raise ValueError("obs_index points outside obs (o_{t+1} must be stored too)")
        if sorted(s.name for s in self.specs) != sorted(self.fields):
            raise ValueError(
                f"declared fields {sorted(s.name for s in self.specs)} but arrays for "
                f"{sorted(self.fields)}"
            )
        for spec in self.specs:
            values, rows = self.fields[spec.name], n_obs if spec.per == "observation" else n
            if values.shape != (rows, *spec.shape) or values.dtype != np.dtype(spec.dtype):
                raise ValueError(
                    f"field {spec.name}: {values.dtype} {values.shape}, declared {spec.dtype} "
                    f"{(rows, *spec.shape)} (one row per {spec.per})"
                )

    def __len__(self) -> int:
        return len(self.obs_index)

    def sample_key(self, index: int) -> str | None:
        """The dataset's key of observation `index` (`<episode>/<t>`, as in its `key` column and
        the label table's `sample_key`); None when the transitions carry no keys."""
        if self.episode is None or self.t is None:
            return None
        return f"{int(self.episode[index]):06d}/{int(self.t[index]):06d}"

    def __getitem__(self, name: str) -> np.ndarray:
        if name not in self.fields:
            raise KeyError(f"no field {name!r}; this data declares {sorted(self.fields)}")
        return self.fields[name]

    @property
    def action_dim(self) -> int:
        return self.action.shape[1]

    def select(self, mask: np.ndarray) -> OfflineTransitions:
        """The transitions where `mask` holds; the observations stay shared."""
        per_transition = {name: getattr(self, name)[mask] for name in _PER_TRANSITION}
        fields = {
            s.name: self.fields[s.name][mask] if s.per == "transition" else self.fields[s.name]
            for s in self.specs
        }
        return replace(self, **per_transition, fields=fields)


_PER_TRANSITION = ("obs_index", "action", "reward", "terminated", "part")


def _decode_png(data: bytes) -> np.ndarray:
    with Image.open(io.BytesIO(data)) as image:
        return np.asarray(image.convert("RGB"))


def _list_column(df: pl.DataFrame, name: str, width: int, path: Path) -> np.ndarray:
    """A list[f32] column of equal-length rows -> (N, width) float32."""
    lengths = df[name].list.len()
    if (lengths != width).any():
        bad = df.filter(lengths != width).row(0, named=True)
        raise DatasetError(
            f"{path}: {name} of episode {bad['episode']} t {bad['t']} has "
            f"{len(bad[name])} values, expected {width}"
        )
    return df[name].list.to_array(width).to_numpy().astype(np.float32, copy=False)


def _check_episodes(df: pl.DataFrame, path: Path) -> None:
    """Sorted rows must form whole RLDS episodes: t = 0..T, is_first at 0, is_last (and only it
    with null action and reward) at T."""
    episode, t = df["episode"].to_numpy(), df["t"].to_numpy()
    new = np.r_[True, episode[1:] != episode[:-1]]
    last = np.r_[new[1:], True]
    problems = {
        "t does not count 0, 1, 2, ...": np.where(new, t != 0, t != np.r_[-1, t[:-1]] + 1),
        "is_first is not set exactly on t = 0": df["is_first"].to_numpy() != new,
        "is_last is not set exactly on the final sample": df["is_last"].to_numpy() != last,
        "action is null on a step (or set on the final sample)": df["action"].is_null().to_numpy()
        != last,
        "reward is null on a step (or set on the final sample)": df["reward"].is_null().to_numpy()
        != last,
    }
    for what, bad in problems.items():
        if bad.any():
            row = int(np.argmax(bad))
            raise DatasetError(
                f"{path}: episode {episode[row]} (t {t[row]}): {what}; expected whole episodes "
                f"of T + 1 samples as the collect stage writes them"
            )


def _read_file(path: Path, obs: ObsKind, labels: tuple[Label, ...]) -> pl.DataFrame:
    schema = pl.read_parquet_schema(path)
    if obs == "state" and "state" not in schema and "image" in schema:
        raise DatasetError(
            f"{path}: no `state` column (collected without include_state); use obs='pixels'"
        )
    if "a_v" not in schema and "a_v_index" in schema:
        raise DatasetError(
            f"{path}: a discrete-action dataset (labels in `a_v_index`); the SAC family needs a "
            f"continuous (Box) action space"
        )
    wanted = [*STEP_COLUMNS, OBS_COLUMN[obs]]
    wanted += [*ACTION_LABEL_COLUMNS] if "action" in labels else []
    wanted += [MASK_COLUMN] if "mask" in labels else []
    wanted += [*JUDGE_COLUMNS] if "judge" in labels else []
    missing = [c for c in wanted if c not in schema]
    if missing:
        raise DatasetError(
            f"{path}: missing column(s) {', '.join(missing)}; expected the columns that "
            f"pipeline.dataset.build writes ({', '.join(wanted)})"
        )
    return pl.read_parquet(path, columns=wanted).sort("episode", "t")


def _action_labels(
    df: pl.DataFrame, index: np.ndarray, action_dim: int, path: Path
) -> dict[str, np.ndarray]:
    """a_v at o_t and o_{t+1} of the transitions at rows `index`, with their presence flags."""
    labelled = (
        (df["a_v"].is_not_null() & df["a_v_status"].is_in(LABELLED_STATUSES))
        .fill_null(False)
        .to_numpy()
    )
    a_v = np.zeros((df.height, action_dim), dtype=np.float32)
    if labelled.any():
        a_v[labelled] = _list_column(df.filter(pl.Series(labelled)), "a_v", action_dim, path)
    if not np.isfinite(a_v).all():
        raise DatasetError(f"{path}: a labelled a_v holds nan or inf (its status says it parsed)")
    return {
        "a_v": a_v[index],
        "has_label": labelled[index],
        "next_a_v": a_v[index + 1],
        "has_next_label": labelled[index + 1],
    }


def _masks(df: pl.DataFrame, frame_hw: tuple[int, ...], path: Path) -> dict[str, np.ndarray]:
    """The mask map of every observation (zeros where there is none), (N_obs, 1, H, W) uint8."""
    mask = np.zeros((df.height, 1, *frame_hw), dtype=np.uint8)
    has_mask = df[MASK_COLUMN].is_not_null().to_numpy()
    for row in np.flatnonzero(has_mask):
        with Image.open(io.BytesIO(df[MASK_COLUMN][int(row)]["bytes"])) as image:
            decoded = np.asarray(image.convert("L"))
        if decoded.shape != mask.shape[2:]:
            raise DatasetError(
                f"{path}: the mask of row {row} is {decoded.shape}, its frame {mask.shape[2:]}"
            )
        mask[row, 0] = decoded
    return {"mask": mask, "has_mask": has_mask}


def _judge(df: pl.DataFrame, index: np.ndarray) -> dict[str, np.ndarray]:
    """The judgement of each transition's (o_t, a_t) at rows `index`: 1, 0, or -1 (none)."""
    judged = (
        (df["judge"].is_not_null() & df["judge_status"].is_in(LABELLED_STATUSES))
        .fill_null(False)
        .to_numpy()
    )
    judge = np.where(judged, df["judge"].fill_null(False).to_numpy().astype(np.int8), -1)
    return {"judge": judge[index].astype(np.int8)}


def with_frame_size(data: OfflineTransitions, size: int) -> OfflineTransitions:
    """`data` with its frames resized to (size, size) as an env's frames are (`resize_frame`),
    and Semore's masks with them: what a run with its own `image_size` reads. Unchanged when the
    frames already have that size."""
    if data.obs.ndim != 4:
        raise ValueError("with_frame_size resizes frames; these transitions hold states")
    if data.obs.shape[1:3] == (size, size):
        return data
    fields, specs = dict(data.fields), []
    for spec in data.specs:
        if spec.name == "mask":  # (N_obs, 1, H, W) uint8
            fields["mask"] = np.stack([_resize_mask(m[0], size) for m in data.fields["mask"]])[
                :, None
            ]
            spec = replace(spec, shape=(1, size, size))
        specs.append(spec)
    obs = np.stack([resize_frame(frame, size) for frame in data.obs])
    return replace(data, obs=obs, specs=tuple(specs), fields=fields)


def _resize_mask(mask: np.ndarray, size: int) -> np.ndarray:
    return np.asarray(Image.fromarray(mask).resize((size, size), Image.Resampling.BILINEAR))


def load_offline_transitions(
    dataset_dir: str | Path,
    obs: ObsKind,
    labels: Iterable[Label] = (),
    also: Sequence[str | Path] = (),
) -> OfflineTransitions:
    """Read `<dataset_dir>/data/train-*.parquet` (the HF dataset of the dataset stage) into
    transitions. `obs`: "state" reads the `state` column, "pixels" decodes `image` to (H, W, 3)
    uint8 frames. `labels`, the label groups to declare as fields: "action" (ERPv's a_v,
    `action_label_specs`), "mask" (Semore's masks, pixels only, `mask_specs`), "judge" (Semore's
    judge labels, `JUDGE_SPEC`). `also`: more dataset directories read after it, as one (a run's
    labelling rounds: episode numbers are unique within each directory); `part` says which
    directory each transition came from. Errors name the file:
    missing columns, a discrete-action dataset, broken episodes, labels of the wrong length, an
    empty dataset."""
    labels = tuple(labels)
    unknown = [label for label in labels if label not in LABELS]
    if unknown:
        raise ValueError(f"unknown label group(s) {unknown}; known: {', '.join(LABELS)}")
    if "mask" in labels and obs != "pixels":
        raise ValueError("masks belong to frames: the `mask` labels need obs='pixels'")
    if obs not in OBS_COLUMN:
        raise ValueError(f"obs must be 'pixels' or 'state', got {obs!r}")
    files = [(k, d, path) for k, d in enumerate((dataset_dir, *also)) for path in parquet_files(d)]
    chunks: list[dict[str, np.ndarray]] = []
    offset, seen_episodes, current = 0, set[int](), None
    for part, directory, path in files:
        if directory != current:  # episodes are numbered per dataset
            seen_episodes, current = set(), directory
        df = _read_file(path, obs, labels)
        if df.height == 0:
            continue
        _check_episodes(df, path)
        episodes = set(df["episode"].unique().to_list())
        if episodes & seen_episodes:
            raise DatasetError(
                f"{path}: episode(s) {sorted(episodes & seen_episodes)[:5]} also in an earlier file"
            )
        seen_episodes |= episodes
        steps = ~df["is_last"].to_numpy()
        if not steps.any():
            raise DatasetError(f"{path}: no steps, only final samples (episodes of length 0)")
        action_dim = len(df["action"].drop_nulls()[0])
        if chunks and action_dim != chunks[0]["action"].shape[1]:
            raise DatasetError(
                f"{path}: actions have {action_dim} dimensions, earlier files {chunks[0]['action'].shape[1]}"
            )
        if obs == "state":
            width = len(df["state"][0])
            observations = _list_column(df, "state", width, path)
        else:
            frames = [_decode_png(row["bytes"]) for row in df["image"].to_list()]
            shapes = {f.shape for f in frames}
            if len(shapes) != 1:
                raise DatasetError(f"{path}: frames of different shapes {sorted(shapes)}")
            observations = np.stack(frames)
        new = np.r_[True, df["episode"].to_numpy()[1:] != df["episode"].to_numpy()[:-1]]
        rows = np.arange(df.height)
        start = np.maximum.accumulate(np.where(new, rows, 0))
        index = rows[steps]
        chunk = {
            "obs": observations,
            "episode_start": start + offset,
            "obs_index": index + offset,
            "action": _list_column(df.filter(pl.Series(steps)), "action", action_dim, path),
            "reward": df["reward"].to_numpy()[steps].astype(np.float32),
            "terminated": df["terminated"].to_numpy()[steps],
            "part": np.full(len(index), part, np.int64),
            "episode": df["episode"].to_numpy().astype(np.int64),
            "t": df["t"].to_numpy().astype(np.int64),
        }
        if "action" in labels:
            chunk |= _action_labels(df, index, action_dim, path)
        if "mask" in labels:
            chunk |= _masks(df, observations.shape[1:3], path)
        if "judge" in labels:
            chunk |= _judge(df, index)
        chunks.append(chunk)
        offset += df.height
    if not chunks:
        raise DatasetError(
            f"the dataset in {dataset_dir} is empty ({len(files)} parquet files, no rows)"
        )
    joined = {k: np.concatenate([c[k] for c in chunks]) for k in chunks[0]}
    specs: tuple[FieldSpec, ...] = ()
    if "action" in labels:
        specs += action_label_specs(joined["action"].shape[1])
    if "mask" in labels:
        specs += mask_specs(joined["obs"].shape[1:3])
    if "judge" in labels:
        specs += (JUDGE_SPEC,)
    fields = {spec.name: joined.pop(spec.name) for spec in specs}
    return OfflineTransitions(**joined, specs=specs, fields=fields)


@dataclass(frozen=True)
class LabelledMilestones:
    """The frames whose `milestone` the teacher was asked and answered (carried rows left out),
    in the dataset's order: hybrid VLM-PPO's prototypes (3.2)."""

    frames_png: list[bytes]
    potentials: np.ndarray  # (N,) float32 Phi_raw of each frame's milestone
    positions: list[float | None]  # the context's `position` (MountainCar), None where none


def labelled_milestones(dataset_dir: str | Path) -> LabelledMilestones:
    """Read `<dataset_dir>`'s milestone labels (`LabelledMilestones`); errors name the file."""
    wanted = ["image", "context", "potential", "milestone_status", "milestone_queried"]
    frames, potentials, positions = [], [], []
    for path in parquet_files(dataset_dir):
        missing = [c for c in wanted if c not in pl.read_parquet_schema(path)]
        if missing:
            raise DatasetError(
                f"{path}: missing column(s) {', '.join(missing)}; expected the columns that "
                f"pipeline.dataset.build writes ({', '.join(wanted)})"
            )
        df = pl.read_parquet(path, columns=wanted).filter(
            pl.col("milestone_queried").fill_null(False)
            & pl.col("milestone_status").is_in(LABELLED_STATUSES)
        )
        frames += [row["bytes"] for row in df["image"].to_list()]
        potentials += df["potential"].to_list()
        positions += [json.loads(c).get("position") for c in df["context"].to_list()]
    return LabelledMilestones(frames, np.asarray(potentials, np.float32), positions)
