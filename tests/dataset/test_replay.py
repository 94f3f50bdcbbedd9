import io
import json

import numpy as np
import polars as pl
import pytest
from PIL import Image

from pipeline.core.io import sha256_file
from pipeline.core.stacking import FrameStacker
from pipeline.dataset.layout import (
    DATASET_FORMAT_VERSION,
    INFO_PATH,
    DatasetError,
    DatasetIntegrityError,
    dataset_action_space,
    verify_dataset,
)
from pipeline.dataset.transitions import (
    JUDGE_SPEC,
    OfflineTransitions,
    action_label_specs,
    load_offline_transitions,
    mask_specs,
)
from pipeline.learn.agents.replay import ReplayBuffer
from pipeline.teach.labels.status import LABELLED_STATUSES
from pipeline.teach.rollouts.reader import iter_rollouts

# --- factories ----------------------------------------------------------------------------------


def frame(value: int) -> np.ndarray:
    """A 2x2 RGB frame whose pixels all hold `value`: stacks can be read back as numbers."""
    return np.full((2, 2, 3), value, dtype=np.uint8)


def offline_states(n_episodes: int = 3, steps: int = 4, label_every: int = 2) -> OfflineTransitions:
    """State episodes with obs = [100 * episode + t]; a_v = [t / 10] on every `label_every`-th
    sample (a_v status otherwise absent)."""
    obs, start, index, act, rew, term, a_v, has = [], [], [], [], [], [], [], []
    for e in range(n_episodes):
        first = len(obs)
        for t in range(steps + 1):
            obs.append([100.0 * e + t])
            start.append(first)
            a_v.append([t / 10])
            has.append(t % label_every == 0)
        for t in range(steps):
            index.append(first + t)
            act.append([0.5])
            rew.append(float(t))
            term.append(t == steps - 1 and e == 0)  # episode 0 terminates, the others truncate
    a_v, has, index = np.asarray(a_v, np.float32), np.asarray(has), np.asarray(index)
    return OfflineTransitions(
        obs=np.asarray(obs, np.float32),
        episode_start=np.asarray(start),
        obs_index=index,
        action=np.asarray(act, np.float32),
        reward=np.asarray(rew, np.float32),
        terminated=np.asarray(term),
        specs=action_label_specs(1),
        fields={
            "a_v": np.where(has[index, None], a_v[index], 0.0).astype(np.float32),
            "has_label": has[index],
            "next_a_v": np.where(has[index + 1, None], a_v[index + 1], 0.0).astype(np.float32),
            "has_next_label": has[index + 1],
        },
    )


def fill_online(buffer: ReplayBuffer, episodes: int, steps: int, base: float = 1000.0) -> None:
    for e in range(episodes):
        buffer.begin_episode(np.array([base + 100 * e], np.float32))
        for t in range(1, steps + 1):
            buffer.add(np.array([-0.5]), 1.0, np.array([base + 100 * e + t], np.float32), False)


# --- mixing -------------------------------------------------------------------------------------


@pytest.mark.parametrize("fraction, expected", [(0.0, 0), (0.25, 100), (1.0, 400)])
def test_offline_fraction_sets_the_mix(fraction, expected):
    buffer = ReplayBuffer(
        "state", (1,), 1, 100, offline=offline_states(), offline_fraction=fraction
    )
    fill_online(buffer, episodes=2, steps=5)
    batch = buffer.sample(400, np.random.default_rng(0))
    offline = batch["offline"].numpy()
    assert offline.sum() == expected and len(offline) == 400
    # the flag tells the truth: offline states are < 1000, online ones >= 1000
    np.testing.assert_array_equal(batch["obs"][:, 0].numpy() < 1000, offline)
    assert (batch["action"][offline].numpy() == 0.5).all()
    assert (batch["action"][~offline].numpy() == -0.5).all()


def test_one_empty_part_gives_every_row_to_the_other():
    rng = np.random.default_rng(0)
    online_only = ReplayBuffer("state", (1,), 1, 100, offline_fraction=1.0)
    fill_online(online_only, 1, 5)
    assert not online_only.sample(64, rng)["offline"].any()
    offline_only = ReplayBuffer("state", (1,), 1, 100, offline=offline_states())
    assert offline_only.offline_fraction == 0.0
    assert offline_only.sample(64, rng)["offline"].all()
    with pytest.raises(ValueError, match="empty"):
        ReplayBuffer("state", (1,), 1, 100, offline_fraction=0.5).sample(8, rng)
    with pytest.raises(ValueError, match="offline_fraction"):  # fixed at construction now
        ReplayBuffer("state", (1,), 1, 100, offline=offline_states(), offline_fraction=1.5)


# --- stacking -----------------------------------------------------------------------------------


def expected_stack(values: list[int]) -> np.ndarray:
    return np.concatenate([np.moveaxis(frame(v), -1, 0) for v in values])  # (3k, 2, 2)


def test_frames_are_stacked_at_sample_time_and_padded_at_episode_starts():
    buffer = ReplayBuffer("pixels", (2, 2, 3), 1, 100, frame_stack=3)
    for e in (0, 1):  # frame value 10 * episode + t
        buffer.begin_episode(frame(10 * e))
        for t in range(1, 4):
            buffer.add(np.zeros(1), 0.0, frame(10 * e + t), terminated=t == 3)
    batch = buffer.sample(200, np.random.default_rng(0))
    assert batch["obs"].shape == (200, 9, 2, 2) and batch["obs"].dtype.is_floating_point is False
    seen = set()
    for obs, next_obs in zip(batch["obs"].numpy(), batch["next_obs"].numpy(), strict=True):
        value = int(obs[-1, 0, 0])  # the newest frame
        e, t = divmod(value, 10)
        seen.add((e, t))
        # never a frame of the other episode: the first frame repeats at the start
        np.testing.assert_array_equal(
            obs, expected_stack([10 * e + max(t - k, 0) for k in (2, 1, 0)])
        )
        np.testing.assert_array_equal(
            next_obs, expected_stack([10 * e + max(t + 1 - k, 0) for k in (2, 1, 0)])
        )
    assert seen == {(e, t) for e in (0, 1) for t in range(3)}  # final frames are never o_t
    # the acting-time stacker builds the same input
    stacker = FrameStacker(3, "pixels")
    stacker.reset(frame(10))
    np.testing.assert_array_equal(stacker.step(frame(11)), expected_stack([10, 10, 11]))


def test_offline_pixels_stack_the_same_way():
    frames = np.stack([frame(v) for v in (0, 1, 2, 10, 11)])  # episodes of 2 and 1 steps
    data = OfflineTransitions(
        obs=frames,
        episode_start=np.array([0, 0, 0, 3, 3]),
        obs_index=np.array([0, 1, 3]),
        action=np.zeros((3, 1), np.float32),
        reward=np.zeros(3, np.float32),
        terminated=np.array([False, True, False]),
    )
    buffer = ReplayBuffer(
        "pixels", (2, 2, 3), 1, 10, frame_stack=2, offline=data, offline_fraction=1.0
    )
    batch = buffer.sample(100, np.random.default_rng(1))
    stacks = {tuple(o[::3, 0, 0]) for o in batch["obs"].numpy()}
    assert stacks == {(0, 0), (0, 1), (10, 10)}
    next_stacks = {tuple(o[::3, 0, 0]) for o in batch["next_obs"].numpy()}
    assert next_stacks == {(0, 1), (1, 2), (10, 11)}


def test_ring_overwrites_old_steps_and_never_serves_a_broken_stack():
    buffer = ReplayBuffer("pixels", (2, 2, 3), 1, capacity=8, frame_stack=3)
    for e in range(4):  # 4 episodes of 5 steps = 24 observations through a ring of 8
        buffer.begin_episode(frame(10 * e))
        for t in range(1, 6):
            buffer.add(np.zeros(1), 0.0, frame(10 * e + t), False)
    # the ring holds observations 16..23: episode 2's last step would need frames 14 and 15
    assert buffer.online_size == 5
    batch = buffer.sample(300, np.random.default_rng(0))
    newest = set()
    for obs in batch["obs"].numpy():
        values = obs[::3, 0, 0].astype(int)
        e, t = divmod(int(values[-1]), 10)
        newest.add((e, t))
        np.testing.assert_array_equal(values, [10 * e + max(t - k, 0) for k in (2, 1, 0)])
    assert newest == {(3, t) for t in range(5)}


def test_state_observations_are_not_stacked():
    buffer = ReplayBuffer("state", (1,), 1, 50, frame_stack=3)
    fill_online(buffer, 1, 4)
    batch = buffer.sample(32, np.random.default_rng(0))
    assert batch["obs"].shape == (32, 1)
    np.testing.assert_array_equal(batch["next_obs"].numpy(), batch["obs"].numpy() + 1)


# --- labels -------------------------------------------------------------------------------------


def test_labels_travel_with_their_transitions():
    data = offline_states(label_every=2)
    buffer = ReplayBuffer("state", (1,), 1, 100, offline=data, offline_fraction=0.8)
    buffer.begin_episode(np.array([5000.0], np.float32))
    buffer.add(
        np.array([0.1]), 0.0, np.array([5001.0], np.float32), False,
        a_v=np.array([0.9]), has_label=True,
    )  # fmt: skip
    buffer.add(np.array([0.1]), 0.0, np.array([5002.0], np.float32), False)
    with pytest.raises(ValueError, match="per-transition fields"):  # masks are per observation
        buffer.add(np.array([0.1]), 0.0, np.array([5003.0], np.float32), False, mask=1)
    batch = buffer.sample(500, np.random.default_rng(0))
    obs = batch["obs"][:, 0].numpy()
    offline = batch["offline"].numpy()
    t = obs % 100
    has, has_next = batch["has_label"].numpy(), batch["has_next_label"].numpy()
    np.testing.assert_array_equal(has[offline], t[offline] % 2 == 0)
    np.testing.assert_array_equal(has_next[offline], (t[offline] + 1) % 2 == 0)
    np.testing.assert_allclose(
        batch["a_v"][offline, 0].numpy(), np.where(has[offline], t[offline] / 10, 0)
    )
    np.testing.assert_allclose(
        batch["next_a_v"][offline, 0].numpy(), np.where(has_next[offline], (t[offline] + 1) / 10, 0)
    )
    online_first = obs == 5000.0
    assert online_first.any() and has[online_first].all()
    np.testing.assert_allclose(batch["a_v"][online_first, 0].numpy(), 0.9)
    assert not has[(obs == 5001.0)].any() and not has_next[~offline].any()
    # done is `terminated`: only episode 0's last step; truncated ends are not done
    done = batch["done"].numpy().astype(bool)
    np.testing.assert_array_equal(done, offline & (obs == 3.0))
    # without offline data the fields are declared by the caller; undeclared ones are refused
    online = ReplayBuffer("state", (1,), 1, 10, fields=action_label_specs(1))
    online.begin_episode(np.array([0.0], np.float32))
    online.add(np.array([0.1]), 0.0, np.array([1.0], np.float32), False, a_v=[0.9], has_label=True)
    batch = online.sample(4, np.random.default_rng(0))
    assert batch["has_label"].all() and not batch["has_next_label"].any()
    np.testing.assert_allclose(batch["a_v"][:, 0].numpy(), 0.9)
    bare = ReplayBuffer("state", (1,), 1, 10)
    bare.begin_episode(np.array([0.0], np.float32))
    with pytest.raises(ValueError, match="per-transition fields"):
        bare.add(np.array([0.1]), 0.0, np.array([1.0], np.float32), False, a_v=[0.9])


# --- the dataset loader -------------------------------------------------------------------------


def png(value: int, size: int = 4) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(np.full((size, size, 3), value, np.uint8)).save(buf, format="PNG")
    return buf.getvalue()


def dataset_rows(episodes: dict[int, int], statuses: dict[tuple[int, int], str]) -> list[dict]:
    """Rows as pipeline.dataset.build writes them (RLDS: T + 1 samples per episode)."""
    rows = []
    for e, steps in episodes.items():
        for t in range(steps + 1):
            last = t == steps
            status = statuses.get((e, t), "ok")
            rows.append(
                {
                    "key": f"{e:06d}/{t:06d}",
                    "episode": e,
                    "t": t,
                    "image": {"bytes": png(10 * e + t), "path": None},
                    "action": None if last else [t / 10, -t / 10],
                    "reward": None if last else float(t),
                    # sample t holds the flags that followed a_t; the final sample repeats them
                    "terminated": t >= steps - 1 and e == 0,
                    "truncated": t >= steps - 1 and e != 0,
                    "is_first": t == 0,
                    "is_last": last,
                    "state": [float(e), float(t)],
                    "a_v": None if status == "wrong_arity" else [0.5, 0.25 * t if t < 4 else 1.0],
                    "a_v_status": status,
                }
            )
    return rows


SCHEMA = {
    "key": pl.String, "episode": pl.Int64, "t": pl.Int64,
    "image": pl.Struct({"bytes": pl.Binary, "path": pl.String}),
    "action": pl.List(pl.Float32), "reward": pl.Float32, "terminated": pl.Boolean,
    "truncated": pl.Boolean, "is_first": pl.Boolean, "is_last": pl.Boolean,
    "state": pl.List(pl.Float32), "a_v": pl.List(pl.Float32), "a_v_status": pl.String,
}  # fmt: skip


def write_dataset(root, files: list[list[dict]], drop: tuple[str, ...] = ()) -> None:
    """Parquet files and the meta/info.json (format version, file checksums) readers verify."""
    (root / "data").mkdir(parents=True, exist_ok=True)
    names = []
    for i, rows in enumerate(files):
        df = pl.DataFrame(rows, schema=SCHEMA).drop(list(drop))
        names.append(f"data/train-{i:05d}-of-{len(files):05d}.parquet")
        df.write_parquet(root / names[-1])
    (root / "meta").mkdir(exist_ok=True)
    info = {
        "format_version": DATASET_FORMAT_VERSION,
        "files": {name: sha256_file(root / name) for name in names},
    }
    (root / INFO_PATH).write_text(json.dumps(info))


def test_a_damaged_or_cut_parquet_is_never_trained_on(tmp_path):
    """Stage two verifies the files it reads against meta/info.json and names the file."""
    write_dataset(tmp_path, [dataset_rows({0: 3}, {})])
    (path,) = (tmp_path / "data").glob("*.parquet")
    data = path.read_bytes()
    for damaged, what in [
        (data[: len(data) // 2], "damaged"),
        (data[:-20] + b"\0" * 20, "damaged"),
    ]:
        path.write_bytes(damaged)
        with pytest.raises(DatasetIntegrityError, match=f"{path} is {what}.*dvc checkout"):
            load_offline_transitions(tmp_path, "state")
        assert verify_dataset(tmp_path)
    path.write_bytes(data)
    assert verify_dataset(tmp_path) == []
    (tmp_path / "data" / "train-00009-of-00010.parquet").write_bytes(data)
    assert "is not part of this dataset" in verify_dataset(tmp_path)[0]


def test_load_offline_transitions_follows_the_rlds_conventions(tmp_path):
    statuses = {(0, 1): "regex_fallback", (0, 2): "out_of_range", (1, 0): "wrong_arity"}
    write_dataset(tmp_path, [dataset_rows({0: 3}, statuses), dataset_rows({1: 2}, statuses)])
    data = load_offline_transitions(tmp_path, "state", labels=("action",))
    assert len(data) == 5 and data.obs.shape == (7, 2)  # 3 + 2 steps, 4 + 3 samples
    obs, next_obs = data.obs[data.obs_index], data.obs[data.obs_index + 1]
    np.testing.assert_array_equal(obs, [[0, 0], [0, 1], [0, 2], [1, 0], [1, 1]])
    np.testing.assert_array_equal(next_obs[:, 1], obs[:, 1] + 1)
    np.testing.assert_allclose(data.reward, [0, 1, 2, 0, 1])  # r_t lives on sample t
    np.testing.assert_allclose(data.action[:, 1], -obs[:, 1] / 10)
    np.testing.assert_array_equal(data.terminated, [False, False, True, False, False])
    # labelled: status in LABELLED_STATUSES and a value present
    assert {"ok", "regex_fallback"} <= set(
        LABELLED_STATUSES
    ) and "out_of_range" not in LABELLED_STATUSES
    np.testing.assert_array_equal(data["has_label"], [True, True, False, False, True])
    np.testing.assert_array_equal(data["has_next_label"], [True, False, True, True, True])
    np.testing.assert_allclose(data["a_v"][:, 1], [0.0, 0.25, 0.0, 0.0, 0.25])
    np.testing.assert_allclose(data["next_a_v"][:, 1], [0.25, 0.0, 0.75, 0.25, 0.5])
    np.testing.assert_array_equal(data.episode_start, [0, 0, 0, 0, 4, 4, 4])

    pixels = load_offline_transitions(tmp_path, "pixels")
    assert pixels.obs.shape == (7, 4, 4, 3) and pixels.obs.dtype == np.uint8
    np.testing.assert_array_equal(pixels.obs[:, 0, 0, 0], [0, 1, 2, 3, 10, 11, 12])
    # label groups are read on request only
    assert pixels.specs == () and pixels.fields == {}
    with pytest.raises(KeyError, match="a_v"):
        pixels["a_v"]


def test_loader_errors_name_the_file(tmp_path):
    write_dataset(tmp_path / "a", [dataset_rows({0: 2}, {})], drop=("a_v_status",))
    with pytest.raises(
        DatasetError, match=r"train-00000-of-00001\.parquet: missing column\(s\) a_v_status"
    ):
        load_offline_transitions(tmp_path / "a", "state", labels=("action",))
    assert len(load_offline_transitions(tmp_path / "a", "state")) == 2  # labels not asked for
    rows = dataset_rows({0: 3}, {})
    del rows[2]  # a hole in the episode
    write_dataset(tmp_path / "b", [rows])
    with pytest.raises(
        DatasetError, match=r"train-00000-of-00001\.parquet: episode 0 \(t 3\): t does not count"
    ):
        load_offline_transitions(tmp_path / "b", "pixels")
    write_dataset(tmp_path / "c", [[]])
    with pytest.raises(DatasetError, match="is empty"):
        load_offline_transitions(tmp_path / "c", "state")
    with pytest.raises(FileNotFoundError, match="no parquet files"):
        load_offline_transitions(tmp_path / "nowhere", "state")


def _pipeline_dataset(tmp_path):
    """collect -> label -> masks -> dataset on a tiny continuous env."""
    from pipeline.core.config import MasksConfig
    from pipeline.dataset.build import build_dataset
    from pipeline.teach.labelling.label import label_rollouts
    from pipeline.teach.masks import make_mask_backend
    from pipeline.teach.masks.compute import compute_masks
    from pipeline.teach.rollouts.collect import collect
    from pipeline.teach.teachers.scripted import ScriptedTeacher
    from tests.conftest import collect_cfg, env_cfg, label_cfg

    collect("MountainCarContinuous-v0", env_cfg(image_size=16, max_episode_steps=6),
            collect_cfg(episodes=2), tmp_path / "r", progress=False)  # fmt: skip
    label_rollouts(tmp_path / "r", label_cfg(), ScriptedTeacher(0.8, 0), tmp_path / "lc",
                   tmp_path / "labels.parquet", progress=False)  # fmt: skip
    compute_masks(tmp_path / "r", tmp_path / "labels.parquet",
                  make_mask_backend(MasksConfig(backend="scripted", batch_size=8)),
                  tmp_path / "mc", tmp_path / "masks.parquet", batch_size=8, progress=False)  # fmt: skip
    build_dataset(tmp_path / "r", tmp_path / "labels.parquet", tmp_path / "masks.parquet",
                  tmp_path / "ds", shard_max_samples=100)  # fmt: skip


def test_loader_reads_a_dataset_built_by_the_pipeline(tmp_path):
    """collect -> label -> masks -> dataset on a tiny continuous env, then the loader."""
    _pipeline_dataset(tmp_path)
    data = load_offline_transitions(tmp_path / "ds", "pixels", labels=("action",))
    samples = list(iter_rollouts(tmp_path / "r"))
    steps = [s for s in samples if not s.record["is_last"]]
    assert len(data) == len(steps) == 12 and len(data.obs) == len(samples) == 14
    for i, s in enumerate(steps):
        np.testing.assert_array_equal(data.obs[data.obs_index[i]], s.frame())
        np.testing.assert_allclose(data.reward[i], s.record["reward"], rtol=1e-6)
        np.testing.assert_allclose(data.action[i], s.record["action"], rtol=1e-6)
    labels = pl.read_parquet(tmp_path / "labels.parquet").filter(pl.col("task") == "action")
    ok = {
        r["sample_key"]
        for r in labels.iter_rows(named=True)
        if r["parse_status"] in LABELLED_STATUSES and r["action"] is not None
    }
    np.testing.assert_array_equal(data["has_label"], [s.key in ok for s in steps])
    space = dataset_action_space(tmp_path / "ds")
    assert space.shape == (1,) and space.low[0] == -1.0


def test_semore_masks_and_judge_labels_reach_the_replay_buffer(tmp_path):
    """The dataset's masks (per frame) and judge labels (per transition) come back as stored;
    online rows have none; an offline pool restricts the offline rows."""
    from dataclasses import replace

    import torch

    from pipeline.teach.masks.base import decode_mask

    _pipeline_dataset(tmp_path)
    data = load_offline_transitions(tmp_path / "ds", "pixels", labels=("mask", "judge"))
    h, w = data.obs.shape[1:3]
    assert data.specs == (*mask_specs((h, w)), JUDGE_SPEC)
    masks = pl.read_parquet(tmp_path / "masks.parquet").filter(pl.col("status") == "ok")
    mask_of = {r["sample_key"]: r["combined"] for r in masks.iter_rows(named=True)}
    samples = list(iter_rollouts(tmp_path / "r"))
    assert data["has_mask"].tolist() == [s.key in mask_of for s in samples]
    assert data["mask"].shape == (len(samples), 1, h, w) and data["mask"].dtype == np.uint8
    for i, s in enumerate(samples):
        if s.key in mask_of:
            expected = np.round(decode_mask(mask_of[s.key]) * 255).astype(np.uint8)
            np.testing.assert_array_equal(data["mask"][i, 0], expected)
    judged = pl.read_parquet(tmp_path / "labels.parquet").filter(
        (pl.col("task") == "judge") & pl.col("parse_status").is_in(LABELLED_STATUSES)
    )
    judge_of = {r["sample_key"]: int(r["judge"]) for r in judged.iter_rows(named=True)}
    steps = [s for s in samples if not s.record["is_last"]]
    assert data["judge"].tolist() == [judge_of.get(s.key, -1) for s in steps]
    assert (data["judge"] >= 0).any()

    buffer = ReplayBuffer("pixels", data.obs.shape[1:], 1, 50, offline=data, offline_fraction=0.5)
    frame = data.obs[0]
    buffer.begin_episode(frame)
    buffer.add(np.zeros(1, np.float32), 0.0, frame, False)
    rng = np.random.default_rng(0)
    batch = buffer.sample(64, rng)
    assert batch["mask"].shape == (64, 1, h, w) and batch["mask"].dtype == torch.uint8
    online = ~batch["offline"]
    assert online.any() and batch["offline"].any()
    assert not batch["has_mask"][online].any() and (batch["judge"][online] == -1).all()
    pool = np.flatnonzero(data["judge"] == 1)
    if len(pool):
        updates = []

        def offline_pool(update, rng):
            updates.append(update)
            return pool

        pooled_buffer = ReplayBuffer(
            "pixels", data.obs.shape[1:], 1, 50, offline=data, offline_fraction=1.0,
            offline_pool=offline_pool,
        )  # fmt: skip
        pooled_buffer.begin_episode(frame)
        pooled_buffer.add(np.zeros(1, np.float32), 0.0, frame, False)
        pooled = pooled_buffer.sample(32, rng, update=7)
        assert pooled["offline"].all() and (pooled["judge"] == 1).all()
        assert updates == [7]  # the pool is asked with the update's index
    # the declared fields must all be there: no mask data, no mask fields
    with pytest.raises(ValueError, match="declared fields"):
        replace(data, fields={"judge": data["judge"]})
    # fields come from the offline data; a buffer with offline data declares no others
    with pytest.raises(ValueError, match="fields come from the offline data"):
        ReplayBuffer(
            "pixels", data.obs.shape[1:], 1, 50, offline=data, fields=mask_specs((h, w)),
        )  # fmt: skip


def test_online_state_keeps_only_written_slots_and_restores_the_same_buffer():
    """A checkpoint of a barely used pixel buffer is small; loaded into a fresh buffer it samples
    the same batches; before and after the ring wraps."""
    rng = np.random.default_rng(0)
    for steps in (5, 30):  # capacity 12: the second wraps the ring
        buffer = ReplayBuffer("pixels", (8, 8, 3), 2, capacity=12, frame_stack=3)
        buffer.begin_episode(rng.integers(0, 256, (8, 8, 3), dtype=np.uint8))
        for t in range(steps):
            if t == 17:
                buffer.begin_episode(rng.integers(0, 256, (8, 8, 3), dtype=np.uint8))
            buffer.add(
                rng.uniform(-1, 1, 2), 1.0, rng.integers(0, 256, (8, 8, 3), dtype=np.uint8), False
            )
        state = buffer.online_state()
        assert len(state["obs"]) == min(steps + 1 + (steps > 17), 12)
        fresh = ReplayBuffer("pixels", (8, 8, 3), 2, capacity=12, frame_stack=3)
        fresh.load_online_state(state)
        a = buffer.sample(6, np.random.default_rng(1))
        b = fresh.sample(6, np.random.default_rng(1))
        assert a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)
    with pytest.raises(ValueError, match="saved replay holds observations"):
        ReplayBuffer("pixels", (8, 8, 3), 2, capacity=20, frame_stack=3).load_online_state(state)
