"""Labelled transitions read from the shareable dataset's parquet files (pipeline.dataset.layout):
how stage two's SAC-family agents get the cached labels (ERPv sec. 3.2: tau_t = {o_t, a_t, r_t,
o_{t+1}, d_t, a_v,t}), without asking a VLM while training. The replay buffer
(pipeline.agents.replay) holds them as its offline part; C_V's pre-training reads them alone.

Conventions of the dataset (pipeline.rollouts.format, RLDS style): an episode of T steps has T + 1
samples; sample t holds o_t, the action a_t taken there, the reward r_t it earned and the end flags
that followed it; the last sample (`is_last`) holds o_T with null action and reward. So transition
t is (sample t's obs, action, reward, terminated; sample t+1's obs). `done` is `terminated` only: a
truncated episode's last state still bootstraps. A label counts (`has_label`) when `a_v` is present
and `a_v_status` is one of LABELLED_STATUSES; `next_a_v` is the label of sample t+1 (the VLM
policy at the next state, which C_V's pre-training bootstraps from without calling the VLM).
"""

from __future__ import annotations

import io
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Literal

import numpy as np
import polars as pl
from PIL import Image

from pipeline.dataset.layout import (
    ACTION_LABEL_COLUMNS,
    JUDGE_COLUMNS,
    MASK_COLUMN,
    OBS_COLUMN,
    STEP_COLUMNS,
    parquet_files,
)
from pipeline.labels.status import LABELLED_STATUSES

ObsKind = Literal["pixels", "state"]


@dataclass(frozen=True)
class SemanticLabels:
    """Semore's cached labels: the mask map M of each observation (eq. 4's sum over the phrases
    the VLM named, as the masks stage stored it) and the judgement of each transition's
    (o_t, a_t) pair (the selective replay buffer). Dataset frames only: nothing is asked online."""

    mask: np.ndarray  # (N_obs, H, W) uint8 0..255; zeros where the frame has no mask
    has_mask: np.ndarray  # (N_obs,) bool: the frame has a mask (its `objects` label parsed)
    judge: np.ndarray  # (N,) int8: 1 reasonable, 0 not reasonable, -1 not judged


@dataclass(frozen=True)
class OfflineTransitions:
    """Transitions of a dataset, observations stored once per sample (N_obs >= N + episodes)."""

    obs: np.ndarray  # (N_obs, H, W, 3) uint8 frames or (N_obs, D) float32 states
    episode_start: np.ndarray  # (N_obs,) int64: index in `obs` of its episode's first observation
    obs_index: np.ndarray  # (N,) int64: transition i goes from obs[obs_index[i]] to the next one
    action: np.ndarray  # (N, A) float32, in the env's action units
    reward: np.ndarray  # (N,) float32
    terminated: np.ndarray  # (N,) bool
    a_v: np.ndarray  # (N, A) float32, zero where there is no label
    has_label: np.ndarray  # (N,) bool
    next_a_v: np.ndarray  # (N, A) float32: the label at o_{t+1}, zero where none
    has_next_label: np.ndarray  # (N,) bool
    semantics: SemanticLabels | None = None  # Semore's masks and judge labels, when read

    def __post_init__(self) -> None:
        n, n_obs = len(self.obs_index), len(self.obs)
        if len(self.episode_start) != n_obs:
            raise ValueError(f"episode_start has {len(self.episode_start)} rows, obs {n_obs}")
        for name in _PER_TRANSITION:
            if len(getattr(self, name)) != n:
                raise ValueError(f"{name} has {len(getattr(self, name))} rows, obs_index {n}")
        if n and (self.obs_index.min() < 0 or self.obs_index.max() + 1 >= n_obs):
            raise ValueError("obs_index points outside obs (o_{t+1} must be stored too)")
        if self.semantics is not None:
            sem = self.semantics
            if len(sem.mask) != n_obs or len(sem.has_mask) != n_obs or len(sem.judge) != n:
                raise ValueError(
                    f"semantics: masks for {len(sem.mask)} observations and judgements for "
                    f"{len(sem.judge)} transitions; expected {n_obs} and {n}"
                )

    def __len__(self) -> int:
        return len(self.obs_index)

    @property
    def action_dim(self) -> int:
        return self.action.shape[1]

    def select(self, mask: np.ndarray) -> OfflineTransitions:
        """The transitions where `mask` holds; the observations stay shared."""
        semantics = self.semantics
        if semantics is not None:
            semantics = replace(semantics, judge=semantics.judge[mask])
        per_transition = {name: getattr(self, name)[mask] for name in _PER_TRANSITION}
        return replace(self, **per_transition, semantics=semantics)


_PER_TRANSITION = tuple(
    f.name
    for f in fields(OfflineTransitions)
    if f.name not in ("obs", "episode_start", "semantics")
)


def _decode_png(data: bytes) -> np.ndarray:
    with Image.open(io.BytesIO(data)) as image:
        return np.asarray(image.convert("RGB"))


def _list_column(df: pl.DataFrame, name: str, width: int, path: Path) -> np.ndarray:
    """A list[f32] column of equal-length rows -> (N, width) float32."""
    lengths = df[name].list.len()
    if (lengths != width).any():
        bad = df.filter(lengths != width).row(0, named=True)
        raise ValueError(
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
            raise ValueError(
                f"{path}: episode {episode[row]} (t {t[row]}): {what}; expected whole episodes "
                f"of T + 1 samples as the collect stage writes them"
            )


def _read_file(path: Path, obs: ObsKind, semantics: bool = False) -> pl.DataFrame:
    schema = pl.read_parquet_schema(path)
    if obs == "state" and "state" not in schema and "image" in schema:
        raise ValueError(
            f"{path}: no `state` column (collected without include_state); use obs='pixels'"
        )
    if "a_v" not in schema and "a_v_index" in schema:
        raise ValueError(
            f"{path}: a discrete-action dataset (labels in `a_v_index`); SAC and ERPv need a "
            f"continuous (Box) action space"
        )
    wanted = [*STEP_COLUMNS, *ACTION_LABEL_COLUMNS, OBS_COLUMN[obs]]
    if semantics:
        wanted += [MASK_COLUMN, *JUDGE_COLUMNS]
    missing = [c for c in wanted if c not in schema]
    if missing:
        raise ValueError(
            f"{path}: missing column(s) {', '.join(missing)}; expected the columns that "
            f"pipeline.dataset.build writes ({', '.join(wanted)})"
        )
    return pl.read_parquet(path, columns=wanted).sort("episode", "t")


def _semantics(df: pl.DataFrame, index: np.ndarray, frame_shape: tuple[int, ...], path: Path):
    """Masks per observation and judgements per transition (rows `index`) of one file."""
    mask = np.zeros((df.height, *frame_shape[:2]), dtype=np.uint8)
    has_mask = df[MASK_COLUMN].is_not_null().to_numpy()
    for row in np.flatnonzero(has_mask):
        with Image.open(io.BytesIO(df[MASK_COLUMN][int(row)]["bytes"])) as image:
            decoded = np.asarray(image.convert("L"))
        if decoded.shape != mask.shape[1:]:
            raise ValueError(
                f"{path}: the mask of row {row} is {decoded.shape}, its frame {mask.shape[1:]}"
            )
        mask[row] = decoded
    judged = (
        (df["judge"].is_not_null() & df["judge_status"].is_in(LABELLED_STATUSES))
        .fill_null(False)
        .to_numpy()
    )
    judge = np.where(judged, df["judge"].fill_null(False).to_numpy().astype(np.int8), -1)
    return mask, has_mask, judge[index].astype(np.int8)


def load_offline_transitions(
    dataset_dir: str | Path, obs: ObsKind, semantics: bool = False
) -> OfflineTransitions:
    """Read `<dataset_dir>/data/train-*.parquet` (the HF dataset of the dataset stage) into
    transitions with labels. `obs`: "state" reads the `state` column, "pixels" decodes `image`
    to (H, W, 3) uint8 frames. `semantics` (pixels only): also Semore's masks and judge labels
    (`SemanticLabels`). Errors name the file: missing columns, a discrete-action dataset,
    broken episodes, labels of the wrong length, an empty dataset."""
    if semantics and obs != "pixels":
        raise ValueError("masks belong to frames: semantics=True needs obs='pixels'")
    if obs not in OBS_COLUMN:
        raise ValueError(f"obs must be 'pixels' or 'state', got {obs!r}")
    files = parquet_files(dataset_dir)
    chunks: list[dict[str, np.ndarray]] = []
    offset, seen_episodes = 0, set[int]()
    for path in files:
        df = _read_file(path, obs, semantics)
        if df.height == 0:
            continue
        _check_episodes(df, path)
        episodes = set(df["episode"].unique().to_list())
        if episodes & seen_episodes:
            raise ValueError(
                f"{path}: episode(s) {sorted(episodes & seen_episodes)[:5]} also in an earlier file"
            )
        seen_episodes |= episodes
        steps = ~df["is_last"].to_numpy()
        if not steps.any():
            raise ValueError(f"{path}: no steps, only final samples (episodes of length 0)")
        action_dim = len(df["action"].drop_nulls()[0])
        if chunks and action_dim != chunks[0]["action"].shape[1]:
            raise ValueError(
                f"{path}: actions have {action_dim} dimensions, earlier files {chunks[0]['action'].shape[1]}"
            )
        if obs == "state":
            width = len(df["state"][0])
            observations = _list_column(df, "state", width, path)
        else:
            frames = [_decode_png(row["bytes"]) for row in df["image"].to_list()]
            shapes = {f.shape for f in frames}
            if len(shapes) != 1:
                raise ValueError(f"{path}: frames of different shapes {sorted(shapes)}")
            observations = np.stack(frames)
        labelled = (
            (df["a_v"].is_not_null() & df["a_v_status"].is_in(LABELLED_STATUSES))
            .fill_null(False)
            .to_numpy()
        )
        a_v = np.zeros((df.height, action_dim), dtype=np.float32)
        if labelled.any():
            a_v[labelled] = _list_column(df.filter(pl.Series(labelled)), "a_v", action_dim, path)
        if not np.isfinite(a_v).all():
            raise ValueError(f"{path}: a labelled a_v holds nan or inf (its status says it parsed)")
        new = np.r_[True, df["episode"].to_numpy()[1:] != df["episode"].to_numpy()[:-1]]
        rows = np.arange(df.height)
        start = np.maximum.accumulate(np.where(new, rows, 0))
        index = rows[steps]
        chunks.append(
            {
                "obs": observations,
                "episode_start": start + offset,
                "obs_index": index + offset,
                "action": _list_column(df.filter(pl.Series(steps)), "action", action_dim, path),
                "reward": df["reward"].to_numpy()[steps].astype(np.float32),
                "terminated": df["terminated"].to_numpy()[steps],
                "a_v": a_v[index],
                "has_label": labelled[index],
                "next_a_v": a_v[index + 1],
                "has_next_label": labelled[index + 1],
            }
        )
        if semantics:
            mask, has_mask, judge = _semantics(df, index, observations.shape[1:], path)
            chunks[-1] |= {"mask": mask, "has_mask": has_mask, "judge": judge}
        offset += df.height
    if not chunks:
        raise ValueError(
            f"the dataset in {dataset_dir} is empty ({len(files)} parquet files, no rows)"
        )
    joined = {k: np.concatenate([c[k] for c in chunks]) for k in chunks[0]}
    sem = None
    if semantics:
        sem = SemanticLabels(joined.pop("mask"), joined.pop("has_mask"), joined.pop("judge"))
    return OfflineTransitions(**joined, semantics=sem)
