"""`highway-hw`: a stand-in for ERPv's CARLA #HW that runs on this machine, built on Farama's
HighwayEnv (pure Python): a 3-lane highway with traffic, seen top-down (not an ego camera).

Same action semantics as the CARLA adapter (a = [steer, throttle] in [-1, 1], throttle <= 0
brakes; pipeline.core.envs.driving), reward eq. 15 from the simulator's kinematics and crash flag, and
the context the #HW prompt quotes (speed, yaw) plus lane, lateral offset, gap to the vehicle
ahead and crashed, so the ERPv #HW prompt family applies.

Cost: HighwayEnv steps every vehicle in Python. `highway-fast-v0` (5 Hz simulation) with 15
vehicles, rendered at 192x192 and shrunk, is what keeps collection usable here; see the README for
the measured steps/s.
"""

from __future__ import annotations

import os
from typing import Any

import gymnasium as gym
import numpy as np

from pipeline.core.envs.driving import HighwayReward, control_from_action

POLICY_FREQUENCY = 5  # agent steps per simulated second (highway-fast-v0's 5 Hz simulation)
CONFIG: dict[str, Any] = {
    "action": {"type": "ContinuousAction"},  # [acceleration, steering] in [-1, 1]
    "lanes_count": 3,
    "vehicles_count": 15,
    "duration": 40,  # seconds: 200 agent steps
    "policy_frequency": POLICY_FREQUENCY,
    "simulation_frequency": POLICY_FREQUENCY,
    "offscreen_rendering": True,
    "screen_width": 192,
    "screen_height": 192,
    "scaling": 3.5,  # px per m: 55 m of road in view
    "centering_position": [0.3, 0.5],  # the ego a third from the left: more road ahead
    # HighwayEnv computes its observation at every step, and the pipeline reads none of it (the
    # state is `highway_state`'s, from the simulator; the frame is rendered): its default
    # Kinematics table of 5 vehicles (pandas, normalised) was half of every step's time, the
    # ego's presence alone is next to free (benchmarks/highway_throughput.py)
    "observation": {
        "type": "Kinematics",
        "vehicles_count": 1,
        "features": ["presence"],
        "normalize": False,
        "clip": False,
    },
}
EGO_MASS_KG = 1500.0  # a crash's collision intensity: the ego's momentum, as an impulse (N s)
GAP_CAP_M = 100.0  # gap reported when no vehicle is ahead in the lane


class HighwayStandIn(gym.Wrapper):
    """HighwayEnv with ERPv's action order and reward eq. 15 (see the module doc)."""

    def __init__(self, max_episode_steps: int | None = None, reward: HighwayReward | None = None):
        import highway_env  # noqa: F401  (registers the envs)

        config = dict(CONFIG)
        # episodes are counted in steps here (HighwayEnv's float clock can miss its duration)
        self.max_steps = max_episode_steps or int(CONFIG["duration"] * POLICY_FREQUENCY)
        config["duration"] = self.max_steps / POLICY_FREQUENCY + 1.0
        self._steps = 0
        super().__init__(gym.make("highway-fast-v0", render_mode="rgb_array", config=config))
        self.reward_fn = reward or HighwayReward()
        self.action_space = gym.spaces.Box(-1.0, 1.0, (2,), dtype=np.float32)  # [steer, throttle]

    def step(self, action):
        control = control_from_action(action)
        # HighwayEnv's ContinuousAction is [acceleration, steering]; braking is a negative
        # acceleration: throttle - brake is ERPv's throttle clipped to [-1, 1]
        native = np.array([control.throttle - control.brake, control.steer], dtype=np.float32)
        obs, _, terminated, truncated, info = self.env.step(native)
        self._steps += 1
        truncated = truncated or self._steps >= self.max_steps
        vehicle = self.env.unwrapped.vehicle
        collision = EGO_MASS_KG * float(vehicle.speed) if vehicle.crashed else 0.0
        reward = self.reward_fn(
            float(vehicle.speed), 1 / POLICY_FREQUENCY, collision, control.steer
        )
        info = {**info, "collision": collision}
        return obs, reward, terminated, truncated, info

    def reset(self, **kwargs):
        self._steps = 0
        return self.env.reset(**kwargs)

    def render(self):
        frame = self.env.render()
        viewer = self.env.unwrapped.viewer
        if viewer is not None and not viewer.enabled:
            # HighwayEnv turns its viewer off when SDL_VIDEODRIVER=dummy (which the other pygame
            # envs of this process set) and returns black frames; it renders off-screen anyway
            viewer.enabled = True
            frame = self.env.render()
        return frame


def highway_frame(env: gym.Env, obs: Any) -> np.ndarray:
    return env.render()


def highway_context(env: gym.Env, obs: Any) -> dict[str, Any]:
    base = env.unwrapped
    vehicle = base.vehicle
    if vehicle is None:  # before the first reset
        return {"speed": 0.0, "yaw": 0.0, "lane": 0, "lane_offset": 0.0, "gap_ahead": GAP_CAP_M,
                "crashed": False}  # fmt: skip
    lane = base.road.network.get_lane(vehicle.lane_index)
    _, lateral = lane.local_coordinates(vehicle.position)
    front, _ = base.road.neighbour_vehicles(vehicle, vehicle.lane_index)
    gap = GAP_CAP_M
    if front is not None:
        gap = min(GAP_CAP_M, float(lane.local_coordinates(front.position)[0]
                                   - lane.local_coordinates(vehicle.position)[0] - vehicle.LENGTH))  # fmt: skip
    return {
        "speed": float(vehicle.speed),
        "yaw": float(
            vehicle.heading - lane.heading_at(lane.local_coordinates(vehicle.position)[0])
        ),
        "lane": int(vehicle.lane_index[2]),
        "lane_offset": float(lateral),
        "gap_ahead": round(gap, 3),
        "crashed": bool(vehicle.crashed),
    }


def highway_state_from_context(ctx: dict[str, Any]) -> np.ndarray:
    return np.array(
        [ctx["speed"], ctx["yaw"], ctx["lane_offset"], ctx["gap_ahead"]], dtype=np.float32
    )


def highway_state(env: gym.Env, obs: Any) -> np.ndarray:
    return highway_state_from_context(highway_context(env, obs))


def make_highway_base(max_episode_steps: int | None) -> gym.Env:
    # pygame: no window, no sound (HighwayEnv renders off-screen; see HighwayStandIn.render)
    os.environ.setdefault("SDL_AUDIODRIVER", "dummy")
    os.environ.setdefault("SDL_NO_SIGNAL_HANDLERS", "1")  # SIGTERM stops it (see gym_envs.py)
    return HighwayStandIn(max_episode_steps)
