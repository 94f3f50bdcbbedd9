"""What the driving scenes share, as pure functions (no simulator): ERPv's rewards (eq. 15 #HW,
eq. 16 #JW), the action semantics of its driving tasks (fig. 15: a = [steer, throttle] in
[-1, 1], throttle <= 0 brakes) mapped to a vehicle control, the seeded spawn plans of the
scenarios, the bookkeeping of collision and lane-invasion sensor events between two ticks, and
table 5's camera. The CARLA adapter and the highway stand-in both use them, so the unit tests of
this module cover what needs no server."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

Scenario = Literal["hw", "jw"]

# ERPv table 5: the front RGB camera of the CARLA scenes, as CARLA blueprint attributes.
CAMERA_ATTRIBUTES = {
    "image_size_x": "128",
    "image_size_y": "128",
    "fov": "60",
    "gamma": "2.2",
    "iso": "100",
    "exposure_min_bright": "10",
    "exposure_max_bright": "12",
    "motion_blur_intensity": "0.45",
}
FIXED_DELTA_SECONDS = 0.05  # table 5's 20 Hz synchronous tick
MAX_EPISODE_STEPS = 1000


@dataclass(frozen=True)
class HighwayReward:
    """ERPv eq. 15 (#HW): r = l1 * v * dt - l2 * collision - l3 * |steer|, with l1 = 1,
    l2 = 1e-4, l3 = 1 (appendix C.1). `collision` is the collision sensor's intensity (the norm of
    the normal impulse, N s)."""

    l1: float = 1.0
    l2: float = 1e-4
    l3: float = 1.0

    def __call__(self, speed: float, dt: float, collision: float, steer: float) -> float:
        return self.l1 * speed * dt - self.l2 * collision - self.l3 * abs(steer)


@dataclass(frozen=True)
class JaywalkReward:
    """ERPv eq. 16 (#JW): r = l1 * v * dt - l2 * collision - l3 * lane_invasion - l4 * |steer|,
    with l1 = 1, l2 = 1e-3, l3 = 1e-2, l4 = 0.1 (appendix C.1)."""

    l1: float = 1.0
    l2: float = 1e-3
    l3: float = 1e-2
    l4: float = 0.1

    def __call__(
        self, speed: float, dt: float, collision: float, lane_invasion: float, steer: float
    ) -> float:
        return (
            self.l1 * speed * dt
            - self.l2 * collision
            - self.l3 * lane_invasion
            - self.l4 * abs(steer)
        )


@dataclass(frozen=True)
class Control:
    steer: float  # [-1, 1], > 0 turns right
    throttle: float  # [0, 1]
    brake: float  # [0, 1]


def control_from_action(action: np.ndarray) -> Control:
    """ERPv's a = [steer, throttle] in [-1, 1] (throttle <= 0 slows down) as a vehicle control:
    a positive throttle accelerates, a negative one brakes with its magnitude. Out-of-range values
    are clipped (the policy's tanh keeps them in range; a VLM's answer may not)."""
    action = np.asarray(action, dtype=np.float64)
    if action.shape != (2,) or not np.all(np.isfinite(action)):
        raise ValueError(f"a driving action is [steer, throttle] in [-1, 1], got {action!r}")
    steer, throttle = np.clip(action, -1.0, 1.0)
    if throttle > 0:
        return Control(float(steer), float(throttle), 0.0)
    return Control(float(steer), 0.0, float(-throttle))


@dataclass(frozen=True)
class Spawn:
    """Where the scenario's other actors start: spawn-point indices for vehicles (#HW), or for
    pedestrians (#JW) the distance ahead of the ego (m), the side they cross from (-1 left, +1
    right) and the tick at which they start crossing."""

    vehicles: tuple[int, ...] = ()
    pedestrians: tuple[tuple[float, int, int], ...] = ()


def spawn_plan(
    scenario: Scenario, seed: int, n_spawn_points: int, ego_index: int, *, count: int | None = None
) -> Spawn:
    """The seeded placement of a scenario's actors (a pure function of its arguments): #HW four
    vehicles on distinct spawn points other than the ego's (ERPv: "four randomly placed
    vehicles"); #JW three pedestrians crossing at random places ahead ("three pedestrians who are
    crossing randomly in different locations"), 20-120 m apart, starting within the first 10 s."""
    rng = np.random.default_rng(seed)
    if scenario == "hw":
        count = 4 if count is None else count
        free = [i for i in range(n_spawn_points) if i != ego_index]
        if len(free) < count:
            raise ValueError(
                f"#HW places {count} vehicles but the map has {len(free)} free spawn points"
            )
        return Spawn(vehicles=tuple(int(i) for i in rng.choice(free, size=count, replace=False)))
    if scenario == "jw":
        count = 3 if count is None else count
        distances = np.sort(rng.uniform(20.0, 120.0, size=count))
        sides = rng.choice([-1, 1], size=count)
        starts = rng.integers(0, int(10 / FIXED_DELTA_SECONDS), size=count)
        return Spawn(
            pedestrians=tuple(
                (round(float(d), 2), int(s), int(t))
                for d, s, t in zip(distances, sides, starts, strict=True)
            )
        )
    raise ValueError(f"unknown scenario {scenario!r}: 'hw' or 'jw'")


@dataclass
class SensorLog:
    """Collision and lane-invasion events that sensor callbacks deliver between two ticks; the
    env drains them once per step into the reward's `collision` (the summed impulse norms, N s)
    and `lane_invasion` (the number of lane markings crossed)."""

    collision: float = 0.0
    lane_invasion: float = 0.0
    collided: bool = False
    _events: list[tuple[str, float]] = field(default_factory=list)

    def on_collision(self, impulse: tuple[float, float, float]) -> None:
        self._events.append(("collision", math.sqrt(sum(c * c for c in impulse))))

    def on_lane_invasion(self, markings: int) -> None:
        self._events.append(("lane", float(markings)))

    def drain(self) -> tuple[float, float]:
        collision = sum(v for kind, v in self._events if kind == "collision")
        lane = sum(v for kind, v in self._events if kind == "lane")
        self._events.clear()
        self.collision += collision
        self.lane_invasion += lane
        self.collided = self.collided or collision > 0
        return collision, lane
