import numpy as np
import polars as pl
import pytest

from pipeline.core.config import ClipDenseConfig, ClipSegConfig, EnvConfig, MasksConfig
from pipeline.core.envs import CONTEXT, PIXELS, make_env
from pipeline.teach.labelling.label import label_rollouts
from pipeline.teach.masks import MaskRequest, decode_mask, make_mask_backend
from pipeline.teach.masks.compute import compute_masks
from pipeline.teach.rollouts.collect import collect
from pipeline.teach.teachers.scripted import ScriptedTeacher
from tests.conftest import collect_cfg, env_cfg, label_cfg
from tests.factories import build_tiny_clipseg, build_tiny_open_clip

SCRIPTED = MasksConfig(backend="scripted", batch_size=8)


def _frame(env_id, size=84, steps=0, seed=0, action=None):
    env = make_env(
        env_id,
        EnvConfig(image_size=size, action_repeat=1, max_episode_steps=None, include_state=False),
    )
    obs, info = env.reset(seed=seed)
    for _ in range(steps):
        obs, _, _, _, info = env.step(env.action_space.sample() if action is None else action)
    env.close()
    return obs[PIXELS], info[CONTEXT]


def _centroid_x(mask):
    _, xs = np.nonzero(mask > 0.5)
    assert xs.size, "empty mask"
    return xs.mean()


def test_scripted_mountaincar_car_mask_follows_the_car_position():
    backend = make_mask_backend(SCRIPTED)
    for steps, action in ((0, None), (60, 2), (60, 0)):
        frame, ctx = _frame("MountainCar-v0", steps=steps, action=action)
        (masks,) = backend.masks(
            [MaskRequest(frame, ("the car", "flag", "hill", "sky"), "MountainCar-v0", ctx)]
        )
        # gym's renderer maps position [-1.2, 0.6] linearly onto the image width
        expected_x = (ctx["position"] + 1.2) / 1.8 * 84
        assert abs(_centroid_x(masks[0]) - expected_x) < 6
        assert _centroid_x(masks[1]) > 70  # the flag stands at the right edge
        assert masks[2].sum() > masks[0].sum()  # the hill line is longer than the car
        assert masks[3].sum() == 0  # no "sky" object in MountainCar: an empty mask, not a guess


def test_scripted_carracing_masks_partition_the_playfield():
    frame, ctx = _frame(
        "CarRacing-v3", steps=60, seed=1, action=np.array([0.0, 0.3, 0.0], np.float32)
    )
    (masks,) = make_mask_backend(SCRIPTED).masks(
        [MaskRequest(frame, ("car", "road", "grass"), "CarRacing-v3", ctx)]
    )
    car, road, grass = masks
    assert 0.4 < _centroid_x(car) / 84 < 0.6  # the car is drawn at the horizontal centre
    assert not (road.astype(bool) & grass.astype(bool)).any()
    assert road.mean() > 0.05 and grass.mean() > 0.05


def test_scripted_dmc_masks_render_the_recorded_state():
    backend = make_mask_backend(SCRIPTED)
    xs = []
    for push in (1.0, -1.0):
        frame, ctx = _frame("cartpole-swingup", steps=25, action=np.array([push], np.float32))
        (masks,) = backend.masks(
            [MaskRequest(frame, ("cart", "pole", "rail"), "cartpole-swingup", ctx)]
        )
        cart, pole, rail = masks
        assert cart.sum() > 0 and pole.sum() > 0 and rail.sum() > 0
        xs.append(_centroid_x(cart))
        # the mask lies where the frame shows the (orange) cart, not elsewhere
        assert frame[cart > 0.5][:, 0].mean() > frame[cart < 0.5][:, 0].mean()
    assert xs[0] > xs[1]  # pushed right vs pushed left (camera looks along -y)


@pytest.fixture(scope="module")
def labelled(tmp_path_factory):
    root = tmp_path_factory.mktemp("m")
    collect(
        "CarRacing-v3",
        env_cfg(max_episode_steps=40),
        collect_cfg(episodes=1),
        root / "r",
        progress=False,
    )
    label_rollouts(
        root / "r",
        label_cfg(tasks={"objects": 3}),
        ScriptedTeacher(0.7, 0),
        root / "lc",
        root / "labels.parquet",
        progress=False,
    )
    return root


def test_mask_table_and_cache(labelled, tmp_path):
    backend = make_mask_backend(SCRIPTED)
    first = compute_masks(
        labelled / "r",
        labelled / "labels.parquet",
        backend,
        tmp_path / "mc",
        tmp_path / "m.parquet",
        batch_size=4,
        progress=False,
    )
    table = pl.read_parquet(tmp_path / "m.parquet")
    labels = pl.read_parquet(labelled / "labels.parquet")
    usable = labels.filter(pl.col("parse_status").is_in(["ok", "regex_fallback"]))
    assert (
        table.height == first.samples == 41
        and first.statuses["ok"] == table.filter(pl.col("status") == "ok").height == usable.height
    )
    assert first.statuses["no_objects"] > 0  # the unreliable teacher failed some objects answers
    row = table.filter(pl.col("status") == "ok").row(0, named=True)
    masks = [decode_mask(m) for m in row["masks"]]
    assert len(masks) == len(row["phrases"]) and masks[0].shape == (32, 32)
    np.testing.assert_allclose(
        decode_mask(row["combined"]), np.clip(sum(masks), 0, 1), atol=1 / 255 + 1e-6
    )
    second = compute_masks(
        labelled / "r",
        labelled / "labels.parquet",
        backend,
        tmp_path / "mc",
        tmp_path / "m2.parquet",
        batch_size=4,
        progress=False,
    )
    assert second.computed == 0 and pl.read_parquet(tmp_path / "m2.parquet").equals(table)


def test_clipseg_on_a_tiny_random_model(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    path = build_tiny_clipseg(tmp_path / "clipseg")
    backend = make_mask_backend(
        MasksConfig(backend="clipseg", batch_size=4, clipseg=ClipSegConfig(model=str(path)))
    )
    frame = np.random.default_rng(0).integers(0, 255, (40, 56, 3), dtype=np.uint8)
    out = backend.masks(
        [
            MaskRequest(frame, ("red car", "road"), "CarRacing-v3", {}),
            MaskRequest(frame, ("grass",), "CarRacing-v3", {}),
        ]
    )
    assert [m.shape for m in out] == [(2, 40, 56), (1, 40, 56)]
    assert all(((m >= 0) & (m <= 1)).all() for m in out)
    assert not np.allclose(out[0][0], out[0][1])  # different phrases, different maps
    assert backend.backend_id.startswith(f"clipseg:{path}")


def test_clip_dense_on_a_tiny_random_open_clip(tmp_path):
    name, config_file, checkpoint = build_tiny_open_clip(tmp_path / "oc")
    cfg = ClipDenseConfig(
        model=name, pretrained=str(checkpoint), model_config_file=str(config_file)
    )
    backend = make_mask_backend(MasksConfig(backend="clip_dense", batch_size=4, clip_dense=cfg))
    frames = np.random.default_rng(0).integers(0, 255, (2, 48, 48, 3), dtype=np.uint8)
    out = backend.masks(
        [
            MaskRequest(frames[0], ("cart", "pole"), "x", {}),
            MaskRequest(frames[1], ("pole",), "x", {}),
        ]
    )
    assert [m.shape for m in out] == [(2, 48, 48), (1, 48, 48)]
    assert all(((m >= 0) & (m <= 1)).all() for m in out)
    # the same phrase gets the same map whichever batch it is in
    again = backend.masks([MaskRequest(frames[1], ("pole",), "x", {})])
    np.testing.assert_allclose(again[0], out[1], atol=1e-5)
    assert "file-" in backend.backend_id  # weights identified by content, not by path
