"""Scripted masks that need no model (the offline default): colour keys for CarRacing and
MountainCar, MuJoCo segmentation rendering for dm_control. Phrases are matched to the env's
object groups by words ("the red car" -> car); an unmatched phrase gets an empty mask."""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np

from pipeline.core.envs.gl import prepare_headless_gl
from pipeline.teach.masks.base import MaskRequest

SCRIPTED_MASKS_VERSION = 1


def _word_match(phrase: str, names: Sequence[str]) -> str | None:
    words = set(re.findall(r"[a-z]+", phrase.lower()))
    for name in names:
        if name in words or name.rstrip("s") in words or f"{name}s" in words:
            return name
    return None


# ---- colour keys ------------------------------------------------------------------------------


def _carracing(frame: np.ndarray, group: str) -> np.ndarray:
    rgb = frame.astype(np.int16)
    r, g, b = rgb[..., 0], rgb[..., 1], rgb[..., 2]
    h, w = r.shape
    playfield = np.zeros((h, w), bool)
    playfield[: int(0.88 * h)] = True  # the bottom strip is the dashboard
    if group in ("road", "curve"):
        mask = (np.abs(r - g) < 12) & (np.abs(g - b) < 12) & (r > 80) & (r < 130)
    elif group == "grass":
        mask = (g > r + 30) & (g > b + 30)
    else:  # car: red, in the fixed box where the car is drawn (curbs are red too)
        box = np.zeros((h, w), bool)
        box[int(0.62 * h) : int(0.82 * h), int(0.40 * w) : int(0.60 * w)] = True
        mask = (r > 150) & (g < 90) & (b < 90) & box
    return (mask & playfield).astype(np.float32)


def _mountaincar(frame: np.ndarray, group: str) -> np.ndarray:
    rgb = frame.astype(np.int16)
    r, g, b = rgb[..., 0], rgb[..., 1], rgb[..., 2]
    if group == "car":
        mask = rgb.max(axis=-1) < 110  # the car is drawn black; the track line is light grey
    elif group == "flag":
        mask = (r > 150) & (g > 150) & (b < 110)
    else:  # hill: the grey track line
        grey = (np.abs(r - g) < 10) & (np.abs(g - b) < 10)
        mask = grey & (r >= 110) & (r < 250)
    return mask.astype(np.float32)


def _highway(frame: np.ndarray, group: str) -> np.ndarray:
    """HighwayEnv's top-down view: grey ground, white lane lines, the ego in light blue and the
    other vehicles in yellow; the road is the band between the outermost lane lines."""
    rgb = frame.astype(np.int16)
    r, g, b = rgb[..., 0], rgb[..., 1], rgb[..., 2]
    grey = (np.abs(r - g) < 8) & (np.abs(g - b) < 8)
    lines = grey & (r > 108)  # white lines, grey once a frame is shrunk; the ground is 100
    if group == "lane":
        return lines.astype(np.float32)
    cars = ((r > 150) & (g > 150) & (b < 80)) | ((b > 200) & (g > 150) & (r < 180))
    if group == "car":
        return cars.astype(np.float32)
    rows = np.flatnonzero(lines.mean(axis=1) > 0.2)  # lane lines run across the whole frame
    road = np.zeros(r.shape, bool)
    if rows.size:
        road[rows[0] : rows[-1] + 1] = True
    return (road & ~lines & ~cars).astype(np.float32)


_COLOUR_KEYS = {
    "highway-hw": (_highway, ("car", "road", "lane")),
    "CarRacing-v3": (_carracing, ("car", "road", "grass", "curve")),
    "MountainCar-v0": (_mountaincar, ("car", "hill", "flag")),
    "MountainCarContinuous-v0": (_mountaincar, ("car", "hill", "flag")),
}

# ---- dm_control: render the segmentation of the recorded physics state -------------------------

_DMC_GROUPS = {
    "cartpole-swingup": {"cart": ["cart"], "pole": ["pole_1"], "rail": ["rail1", "rail2"]},
    "cheetah-run": {
        "cheetah": ["torso", "head", "bthigh", "bshin", "bfoot", "fthigh", "fshin", "ffoot"],
        "leg": ["bthigh", "bshin", "bfoot", "fthigh", "fshin", "ffoot"],
        "ground": ["ground"],
    },
    "walker-walk": {
        "walker": ["torso", "right_thigh", "right_leg", "right_foot", "left_thigh", "left_leg", "left_foot"],
        "leg": ["right_thigh", "right_leg", "right_foot", "left_thigh", "left_leg", "left_foot"],
        "torso": ["torso"],
        "ground": ["floor"],
    },
    "ball_in_cup-catch": {"cup": [f"cup_part_{i}" for i in range(5)], "ball": ["ball"], "string": []},
    "reacher-easy": {"arm": ["root", "arm", "hand", "finger"], "target": ["target"]},
}  # fmt: skip


class _DMCRenderer:
    """Re-renders a dm_control frame's segmentation from the qpos / qvel kept in its context."""

    def __init__(self, env_id: str, size: int) -> None:
        prepare_headless_gl()
        from dm_control import suite

        domain, task = env_id.split("-", 1)
        self.env = suite.load(domain, task)
        self.env.reset()
        self.size, self.env_id = size, env_id
        self.camera = 2 if domain == "quadruped" else 0
        model = self.env.physics.model
        self.geom_ids = {model.id2name(i, "geom"): i for i in range(model.ngeom)}

    def segment(self, context: dict) -> np.ndarray:
        physics = self.env.physics
        with physics.reset_context():
            physics.data.qpos[:] = context["qpos"]
            physics.data.qvel[:] = context["qvel"]
            if self.env_id == "reacher-easy":
                # the target is placed through the model, not qpos: finger + to_target
                finger = physics.named.data.geom_xpos["finger", :2]
                physics.named.model.geom_pos["target", :2] = finger + np.asarray(
                    context["to_target"]
                )
        seg = physics.render(self.size, self.size, camera_id=self.camera, segmentation=True)
        geom_type = 5  # mujoco.mjtObj.mjOBJ_GEOM
        return np.where(seg[..., 1] == geom_type, seg[..., 0], -1)  # (H, W) geom id or -1


class ScriptedMasks:
    backend_id = f"scripted:v{SCRIPTED_MASKS_VERSION}"

    def __init__(self) -> None:
        self._renderers: dict[tuple[str, int], _DMCRenderer] = {}

    def covers(self, env_id: str) -> bool:
        """The shipped envs with colour keys or MuJoCo groups (not CARLA, nor brought envs)."""
        return env_id in _COLOUR_KEYS or env_id in _DMC_GROUPS or env_id.startswith("carla-")

    def _one(self, request: MaskRequest) -> np.ndarray:
        h, w = request.frame.shape[:2]
        out = np.zeros((len(request.phrases), h, w), np.float32)
        if request.env_id in _COLOUR_KEYS:
            key_fn, groups = _COLOUR_KEYS[request.env_id]
            for i, phrase in enumerate(request.phrases):
                group = _word_match(phrase, groups)
                if group is not None:
                    out[i] = key_fn(request.frame, group)
            return out
        if request.env_id.startswith("carla-"):
            raise ValueError(
                f"no scripted masks for {request.env_id}: CARLA's ground-truth segmentation "
                "needs the server's semantic camera at collection time; use masks backend "
                "clip_dense or clipseg"
            )
        if request.env_id not in _DMC_GROUPS:
            raise ValueError(f"no scripted masks for env {request.env_id!r}")
        groups = _DMC_GROUPS[request.env_id]
        renderer = self._renderers.get((request.env_id, h))
        if renderer is None:
            renderer = self._renderers[(request.env_id, h)] = _DMCRenderer(request.env_id, h)
        geoms = renderer.segment(request.context)
        for i, phrase in enumerate(request.phrases):
            group = _word_match(phrase, list(groups))
            if group is not None:
                ids = [renderer.geom_ids[name] for name in groups[group]]
                out[i] = np.isin(geoms, ids).astype(np.float32)
        return out

    def masks(self, requests: Sequence[MaskRequest]) -> list[np.ndarray]:
        return [self._one(r) for r in requests]
