"""Scripted teachers: a stand-in for a VLM that needs no model, the offline default.

Each env has a reference policy and progress rater that read what a VLM is given (the frame and
the context quoted in the prompt) and answer every task in the prompt's format, as text that goes
through the same parsers as a real VLM's. They are deliberately imperfect: with probability
1 - reliability an answer is replaced by one of the failure kinds of hybrid VLM-PPO table 1 (noisy
floats, box / format collapse, stuck multiple-choice answers) or an out-of-range or wrong-arity
action. This is NOT a VLM: figures obtained with it say nothing about any real model.
"""

from __future__ import annotations

import io
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
from PIL import Image

from pipeline.teach.labels.schema import EnvLabelSchema, label_schema
from pipeline.teach.labels.tasks import Prompt, format_action
from pipeline.teach.teachers.base import Reply, prompt_rng

SCRIPTED_VERSION = 2  # bump when a reference policy or failure injection changes


# ---- reference answers per env: action vector (or choice index) and milestone ----------------


def _mountaincar(ctx: dict[str, Any], frame: np.ndarray) -> tuple[float, str]:
    """Energy pumping: push in the direction of motion. Milestones from the position."""
    position, velocity = ctx["position"], ctx["velocity"]
    push = 1.0 if velocity > 0 or (velocity == 0 and position < -0.52) else -1.0
    if position >= 0.5:
        milestone = "GOAL"
    elif position > -0.3:
        milestone = "RIGHT_SLOPE"
    elif position < -0.9:
        milestone = "LEFT_PEAK"
    elif position < -0.65:
        milestone = "LEFT_SLOPE"
    else:
        milestone = "BOTTOM"
    return push, milestone


def _is_road(frame: np.ndarray) -> np.ndarray:
    rgb = frame.astype(np.int16)
    grey = (np.abs(rgb[..., 0] - rgb[..., 1]) < 12) & (np.abs(rgb[..., 1] - rgb[..., 2]) < 12)
    return grey & (rgb[..., 0] > 80) & (rgb[..., 0] < 130)  # (H, W) road-grey pixels


def _carracing(ctx: dict[str, Any], frame: np.ndarray) -> tuple[list[float], str]:
    """Steer toward the road pixels in a band ahead of the car (the car sits at ~70 % height)."""
    h, w = frame.shape[:2]
    road = _is_road(frame)
    band = road[int(0.35 * h) : int(0.65 * h)]  # (rows ahead, W)
    near = road[int(0.62 * h) : int(0.80 * h), int(0.4 * w) : int(0.6 * w)]
    if band.any():
        centre = np.nonzero(band)[1].mean() / (w - 1) * 2 - 1  # -1 left .. 1 right
        steer = float(np.clip(2.0 * centre, -1, 1))
    else:
        steer = 0.0
    on_track = near.mean() > 0.3
    speed = ctx["speed"]
    gas = 0.0 if speed > 60 else (0.5 if on_track else 0.2)
    brake = 0.0 if on_track or speed < 20 else 0.3
    milestone = (
        "OFF_TRACK" if not on_track else ("ON_TRACK_FAST" if speed > 30 else "ON_TRACK_SLOW")
    )
    return [steer, gas, brake], milestone


# LQR gains of the upright cart-pole, u = -K [x, theta, x_dot, theta_dot]: dm_control's
# cartpole linearised by finite differences over one agent step (action repeat 8, 0.08 s, the
# force held) and solved as a discrete Riccati equation with Q = diag(1, 10, 1, 1), R = 1.
_CARTPOLE_LQR = np.array([-0.399, -5.339, -0.711, -1.415])
# Pole energy over m g l_c, zero upright at rest: E = c theta_dot^2 / 2 + cos(theta) - 1 with
# c = I / (m g l_c) for the 1 m pole about its hinge (I = m L^2 / 3, l_c = L / 2).
_CARTPOLE_ENERGY_C = (1.0 / 3.0) / (9.81 * 0.5)


def _cartpole(ctx: dict[str, Any], frame: np.ndarray) -> tuple[list[float], str]:
    """Energy-based swing-up (Astrom & Furuta 2000) far from upright, LQR balance near it.

    Pumping: pushing the cart against sign(theta_dot cos(theta)) feeds the pole energy; the push
    shrinks as the energy reaches the upright's, and a weak spring keeps the cart on the rail.
    Asked at every agent step this script returns about 800 (uniform random: about 120); held for
    10 steps, as RAE acts and labels are carried, about 150 (tests/teach/test_teacher_eval.py)."""
    x, cos, sin = ctx["position"]
    cart_v, ang_v = ctx["velocity"]
    theta = float(np.arctan2(sin, cos))  # 0 upright; qpos[1] of the hinge
    if cos > 0.7:
        u = -float(_CARTPOLE_LQR @ np.array([x, theta, cart_v, ang_v]))
    else:
        energy = 0.5 * _CARTPOLE_ENERGY_C * ang_v**2 + cos - 1.0
        pump = 1.0 if ang_v * cos > 0 else -1.0
        u = -pump * float(np.clip(3.0 * (0.0 - energy), -1.0, 1.0)) - 0.3 * x
    if cos > 0.98 and abs(ang_v) < 1.0:
        milestone = "BALANCED"
    elif cos > 0.85:
        milestone = "POLE_UP"
    elif abs(ang_v) > 1.0:
        milestone = "SWINGING"
    else:
        milestone = "POLE_DOWN"
    return [float(np.clip(u, -1, 1))], milestone


def _reacher(ctx: dict[str, Any], frame: np.ndarray) -> tuple[list[float], str]:
    """Jacobian-transpose control of the two-link arm toward the target."""
    shoulder, wrist = ctx["position"]
    dx, dy = ctx["to_target"]
    l1 = l2 = 0.12
    jac = np.array(
        [
            [
                -l1 * np.sin(shoulder) - l2 * np.sin(shoulder + wrist),
                -l2 * np.sin(shoulder + wrist),
            ],
            [l1 * np.cos(shoulder) + l2 * np.cos(shoulder + wrist), l2 * np.cos(shoulder + wrist)],
        ]
    )
    torque = jac.T @ np.array([dx, dy]) * 60.0 - 0.05 * np.asarray(ctx["velocity"])
    dist = float(np.hypot(dx, dy))
    milestone = "AT_TARGET" if dist < 0.03 else ("APPROACHING" if dist < 0.1 else "FAR")
    return np.clip(torque, -1, 1).tolist(), milestone


def _ball_in_cup(ctx: dict[str, Any], frame: np.ndarray) -> tuple[list[float], str]:
    cup_x, cup_z, ball_x, ball_z = ctx["position"]
    ball_speed = float(np.hypot(*ctx["velocity"][2:]))
    action = np.clip([3.0 * (ball_x - cup_x), 3.0 * (ball_z - cup_z) + 0.5], -1, 1)
    if abs(ball_x - cup_x) < 0.05 and abs(ball_z - cup_z) < 0.05:
        milestone = "BALL_IN_CUP"
    elif ball_z > cup_z:
        milestone = "BALL_ABOVE_CUP"
    elif ball_speed > 1.0:
        milestone = "BALL_SWINGING"
    else:
        milestone = "BALL_BELOW"
    return action.tolist(), milestone


def _locomotion(ctx: dict[str, Any], frame: np.ndarray, env_id: str) -> tuple[list[float], str]:
    """Cheetah / walker: a damped hold of a neutral pose. A poor teacher for running, as the
    paper's VLMs were on these tasks (ERPv sec. 4: VBE performed poorly on DMControl)."""
    qpos, qvel = np.asarray(ctx["qpos"]), np.asarray(ctx["qvel"])
    joints, joint_v = qpos[3:], qvel[3:]  # the root has 3 planar dofs, the 6 actuated joints follow
    action = np.clip(-1.0 * joints - 0.1 * joint_v, -1, 1)
    forward = float(qvel[0])
    if env_id == "walker-walk":
        height = float(ctx["height"][0] if isinstance(ctx["height"], list) else ctx["height"])
        milestone = (
            "FALLEN"
            if height < 0.8
            else ("WALKING" if forward > 0.5 else ("UPRIGHT" if height > 1.1 else "RISING"))
        )
    else:
        milestone = (
            "FALLEN"
            if abs(qpos[2]) > 1.2
            else ("RUNNING" if forward > 3 else ("MOVING" if forward > 0.5 else "STANDING"))
        )
    return action.tolist(), milestone


def _highway(ctx: dict[str, Any], frame: np.ndarray) -> tuple[list[float], str]:
    """Lane and gap keeping from the context: steer back to the lane centre and along it, full
    throttle with a clear lane, ease off then brake as the gap to the car ahead closes."""
    steer = float(np.clip(-0.15 * ctx["lane_offset"] - 1.0 * ctx["yaw"], -1.0, 1.0))
    headway = ctx["gap_ahead"] / max(ctx["speed"], 1.0)  # seconds to the car ahead
    throttle = 1.0 if headway > 2.5 else (0.0 if headway > 1.5 else -1.0)
    if ctx["crashed"]:
        milestone = "CRASHED"
    elif headway < 1.5:
        milestone = "CLOSE_BEHIND"
    elif ctx["speed"] < 25:
        milestone = "CRUISING"
    else:
        milestone = "FAST_CLEAR"
    return [steer, throttle], milestone


def reference_answer(env_id: str, ctx: dict[str, Any], frame: np.ndarray) -> tuple[Any, str]:
    """(action as a list or a choice index, milestone label): what the script believes is right."""
    if env_id == "MountainCar-v0":
        push, milestone = _mountaincar(ctx, frame)
        return (2 if push > 0 else 0), milestone
    if env_id == "MountainCarContinuous-v0":
        push, milestone = _mountaincar(ctx, frame)
        return [push], milestone
    if env_id == "CarRacing-v3":
        return _carracing(ctx, frame)
    if env_id == "cartpole-swingup":
        return _cartpole(ctx, frame)
    if env_id == "reacher-easy":
        return _reacher(ctx, frame)
    if env_id == "ball_in_cup-catch":
        return _ball_in_cup(ctx, frame)
    if env_id in ("cheetah-run", "walker-walk"):
        return _locomotion(ctx, frame, env_id)
    if env_id == "highway-hw":
        return _highway(ctx, frame)
    if env_id.startswith("carla-"):
        raise ValueError(
            f"no scripted teacher for {env_id}: a CARLA frame's ground truth (lanes, other "
            "actors) lives in the server, not in the recorded context; label CARLA rollouts "
            "with a VLM (teacher backend hf or openai)"
        )
    raise ValueError(f"no scripted teacher for env {env_id!r}")


def has_script(env_id: str) -> bool:
    """Whether the scripted teacher can answer for `env_id`: every shipped env but CARLA's (a
    brought env has none)."""
    from pipeline.core.env_registry import KNOWN_ENVS

    return env_id in KNOWN_ENVS and not env_id.startswith("carla-")


# ---- answer text, with injected failures ------------------------------------------------------


def _action_text(schema: EnvLabelSchema, action: Any, space: dict[str, Any]) -> str:
    body = format_action(action, schema, space).replace(", ", "\n")
    return f"Describe: scripted reference answer.\n{body}"


def _failed_answer(prompt: Prompt, schema: EnvLabelSchema, rng: np.random.Generator) -> str:
    space = prompt.action_space
    if prompt.task == "action":
        kind = rng.integers(4)
        if kind == 0:  # table 1 I: plausible-looking noisy floats (parses, but is wrong)
            if schema.action_choices is not None:
                return _action_text(schema, int(rng.integers(len(schema.action_choices))), space)
            return _action_text(schema, rng.uniform(space["low"], space["high"]).tolist(), space)
        if kind == 1:  # table 1 II: box grounding / format collapse
            return rng.choice(
                ["Box [450, 210, 480, 230]", "Error [0, 0, 0, 0]", "I see a simulation."]
            )
        if kind == 2 and schema.action_choices is None:  # out of range: kept raw by the parser
            lines = [
                f"{n}: {3.0 * float(rng.uniform(lo, hi)) + 2.0:.3f}"
                for n, lo, hi in zip(schema.action_names, space["low"], space["high"], strict=True)
            ]
            return "Describe: pushing hard.\n" + "\n".join(lines)
        return (
            f"Describe: unsure.\n{schema.action_names[0]}: 0.1 or 0.2"  # two values for one field
        )
    if prompt.task == "milestone":
        kind = rng.integers(3)
        if kind == 0:  # table 1 III: stuck on the first (lowest) label
            return f"milestone: {next(iter(schema.milestones))}"
        if kind == 1:
            return "milestone: UNKNOWN"
        return f"{rng.uniform(0, 1):.3f}"  # table 1 I: a float where a label was asked
    if prompt.task == "objects":
        return rng.choice(
            ["objects:", "objects: the whole scene is a rendered image of a simulation"]
        )
    return rng.choice(["reasonable: maybe", "Yes and no."])  # judge


class ScriptedTeacher:
    def __init__(self, reliability: float, seed: int) -> None:
        if not 0.0 <= reliability <= 1.0:
            raise ValueError(f"reliability must be in [0, 1], got {reliability}")
        self.reliability, self.seed = reliability, seed
        self.teacher_id = f"scripted:v{SCRIPTED_VERSION}:reliability={reliability:g}:seed={seed}"
        self.decoding: dict[str, Any] = {}

    def correct_text(self, prompt: Prompt) -> str:
        schema = label_schema(prompt.env_id)
        with Image.open(io.BytesIO(prompt.frame_png)) as image:
            frame = np.asarray(image.convert("RGB"))
        action, milestone = reference_answer(prompt.env_id, prompt.context, frame)
        if prompt.task == "action":
            return _action_text(schema, action, prompt.action_space)
        if prompt.task == "milestone":
            return f"milestone: {milestone}"
        if prompt.task == "objects":
            return "objects: " + ", ".join(schema.objects)
        # judge: agree when the stored action is close to the reference one
        stored = prompt.stored_action
        if schema.action_choices is not None:
            ok = stored == action
        else:
            span = np.asarray(prompt.action_space["high"]) - np.asarray(prompt.action_space["low"])
            ok = float(np.mean(np.abs(np.asarray(stored) - np.asarray(action)) / span)) < 0.25
        return f"reasonable: {'yes' if ok else 'no'}"

    def answer(self, prompts: Sequence[Prompt]) -> list[Reply]:
        replies = []
        for prompt in prompts:
            started = time.perf_counter()
            rng = prompt_rng(prompt, self.seed)
            if rng.uniform() >= self.reliability:
                text = _failed_answer(prompt, label_schema(prompt.env_id), rng)
            else:
                text = self.correct_text(prompt)
            replies.append(Reply(text=text, latency_s=time.perf_counter() - started))
        return replies
