"""`carla-hw` and `carla-jw`: ERPv's CARLA scenes (appendix C.1, table 5) through the CARLA
client against a server the user runs (on a GPU machine: `CarlaUE4.sh -RenderOffScreen`, or the
`carlasim/carla` container). The server cannot run on this project's CPU machines: what needs no
server (rewards, control mapping, spawn plans, sensor bookkeeping) is in pipeline.core.envs.driving and
unit-tested there; this module is the thin layer that talks to the server.

Per episode: synchronous mode at table 5's fixed 20 Hz tick, the map and weather from params, an
ego vehicle with table 5's front RGB camera, a collision and a lane-invasion sensor, and the
scenario's actors placed by `spawn_plan` (seeded): #HW four vehicles on autopilot, #JW three
pedestrians that cross ahead. Every actor and sensor is destroyed on reset and close, and close
leaves the server in asynchronous mode.
"""

from __future__ import annotations

import math
import queue
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np

from pipeline.core.config import CarlaConfig
from pipeline.core.envs.driving import (
    CAMERA_ATTRIBUTES,
    FIXED_DELTA_SECONDS,
    MAX_EPISODE_STEPS,
    HighwayReward,
    JaywalkReward,
    SensorLog,
    control_from_action,
    spawn_plan,
)
from pipeline.core.errors import PipelineError

SCENARIOS = {"carla-hw": "hw", "carla-jw": "jw"}
CAMERA_SIZE = int(CAMERA_ATTRIBUTES["image_size_x"])


class CarlaUnavailableError(PipelineError, RuntimeError):
    pass


def connect(cfg: CarlaConfig) -> Any:
    """A client connected to the server of `cfg`, or one error naming host:port and the fix."""
    import carla

    client = carla.Client(cfg.host, cfg.port)
    client.set_timeout(cfg.timeout_s)
    try:
        client.get_server_version()
    except RuntimeError as exc:
        raise CarlaUnavailableError(
            f"no CARLA server answered at {cfg.host}:{cfg.port} within {cfg.timeout_s:g} s "
            f"({exc}). Start one on a machine with a GPU: `./CarlaUE4.sh -RenderOffScreen "
            f"-carla-rpc-port={cfg.port}`, or `docker run --gpus all --net=host "
            f"carlasim/carla:0.9.16 ./CarlaUE4.sh -RenderOffScreen`; then set env.<id>.carla.host "
            "and port in params.yaml"
        ) from None
    return client


class CarlaEnv(gym.Env):
    """One ego vehicle in a CARLA scenario (module doc). Observation: the camera frame (H, W, 3)
    uint8; action [steer, throttle] in [-1, 1]; reward eq. 15 (#HW) or eq. 16 (#JW)."""

    metadata: ClassVar[dict[str, Any]] = {"render_modes": ["rgb_array"]}

    def __init__(
        self, env_id: str, cfg: CarlaConfig | None, max_episode_steps: int | None = None
    ) -> None:
        if env_id not in SCENARIOS:
            raise ValueError(f"unknown CARLA scene {env_id!r}: one of {', '.join(SCENARIOS)}")
        self.scenario = SCENARIOS[env_id]
        self.cfg = cfg or CarlaConfig()
        self.max_steps = max_episode_steps or MAX_EPISODE_STEPS
        self.observation_space = gym.spaces.Box(0, 255, (CAMERA_SIZE, CAMERA_SIZE, 3), np.uint8)
        self.action_space = gym.spaces.Box(-1.0, 1.0, (2,), dtype=np.float32)
        self.reward_hw, self.reward_jw = HighwayReward(), JaywalkReward()
        self.client = connect(self.cfg)  # fails here, once, when there is no server
        self.world = self._load_world()
        self._actors: list[Any] = []
        self._images: queue.Queue = queue.Queue()
        self.sensors = SensorLog()
        self.ego: Any = None
        self._frame = np.zeros(self.observation_space.shape, np.uint8)
        self._steps = 0
        self._pedestrians: list[tuple[Any, Any, int]] = []

    # ---- world ---------------------------------------------------------------------------------

    def _load_world(self) -> Any:
        import carla

        world = self.client.get_world()
        if not world.get_map().name.endswith(self.cfg.town):
            world = self.client.load_world(self.cfg.town)
        settings = world.get_settings()
        settings.synchronous_mode = True
        settings.fixed_delta_seconds = FIXED_DELTA_SECONDS
        world.apply_settings(settings)
        self.traffic = self.client.get_trafficmanager()
        self.traffic.set_synchronous_mode(True)
        try:
            weather = getattr(carla.WeatherParameters, self.cfg.weather)
        except AttributeError:
            raise ValueError(
                f"unknown CARLA weather preset {self.cfg.weather!r} (e.g. CloudyNoon, ClearNoon)"
            ) from None
        world.set_weather(weather)
        return world

    def _destroy(self) -> None:
        for actor in reversed(self._actors):  # sensors first, then what they are attached to
            if hasattr(actor, "stop") and actor.type_id.startswith(("sensor.", "controller.")):
                actor.stop()
        for actor in reversed(self._actors):
            if actor.is_alive:
                actor.destroy()
        self._actors.clear()
        self._pedestrians.clear()
        self.ego = None
        self._images = queue.Queue()

    def _spawn_sensor(self, blueprint_id: str, attributes: dict[str, str], transform, callback):
        library = self.world.get_blueprint_library()
        blueprint = library.find(blueprint_id)
        for key, value in attributes.items():
            if blueprint.has_attribute(key):
                blueprint.set_attribute(key, value)
        sensor = self.world.spawn_actor(blueprint, transform, attach_to=self.ego)
        self._actors.append(sensor)
        sensor.listen(callback)
        return sensor

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        import carla

        super().reset(seed=seed)
        self._destroy()
        episode_seed = int(self.np_random.integers(2**31))
        self.traffic.set_random_device_seed(episode_seed)
        points = self.world.get_map().get_spawn_points()
        ego_index = int(np.random.default_rng(episode_seed).integers(len(points)))
        library = self.world.get_blueprint_library()
        self.ego = self.world.spawn_actor(library.find("vehicle.tesla.model3"), points[ego_index])
        self._actors.append(self.ego)
        self.sensors = SensorLog()
        camera = carla.Transform(carla.Location(x=1.5, z=2.4))
        self._spawn_sensor("sensor.camera.rgb", CAMERA_ATTRIBUTES, camera, self._images.put)
        self._spawn_sensor("sensor.other.collision", {}, carla.Transform(),
                           lambda e: self.sensors.on_collision((e.normal_impulse.x, e.normal_impulse.y, e.normal_impulse.z)))  # fmt: skip
        self._spawn_sensor("sensor.other.lane_invasion", {}, carla.Transform(),
                           lambda e: self.sensors.on_lane_invasion(len(e.crossed_lane_markings)))  # fmt: skip
        plan = spawn_plan(self.scenario, episode_seed, len(points), ego_index)
        for index in plan.vehicles:
            vehicle = self.world.try_spawn_actor(library.filter("vehicle.*")[0], points[index])
            if vehicle is not None:
                self._actors.append(vehicle)
                vehicle.set_autopilot(True, self.traffic.get_port())
        ego_transform = points[ego_index]
        forward, right = ego_transform.get_forward_vector(), ego_transform.get_right_vector()
        for distance, side, start in plan.pedestrians:
            location = ego_transform.location + forward * distance + right * (side * 6.0)
            location.z += 1.0
            walker = self.world.try_spawn_actor(
                library.filter("walker.pedestrian.*")[0], carla.Transform(location)
            )
            if walker is not None:
                self._actors.append(walker)
                self._pedestrians.append((walker, right * (-side), start))
        self._steps = 0
        self._tick()
        return self._frame, {}

    def _tick(self) -> None:
        frame_id = self.world.tick()
        for walker, direction, start in self._pedestrians:
            if self._steps >= start and walker.is_alive:
                walker.apply_control(_walk(direction))
        while True:  # the camera image of this tick (earlier ones may still be queued)
            image = self._images.get(timeout=self.cfg.timeout_s)
            if image.frame >= frame_id:
                break
        bgra = np.frombuffer(image.raw_data, dtype=np.uint8).reshape(image.height, image.width, 4)
        self._frame = bgra[..., 2::-1].copy()  # BGRA -> RGB

    def step(self, action):
        import carla

        control = control_from_action(action)
        self.ego.apply_control(
            carla.VehicleControl(
                throttle=control.throttle, steer=control.steer, brake=control.brake
            )
        )
        self._steps += 1
        self._tick()
        collision, lane = self.sensors.drain()
        speed = _speed(self.ego)
        if self.scenario == "hw":
            reward = self.reward_hw(speed, FIXED_DELTA_SECONDS, collision, control.steer)
        else:
            reward = self.reward_jw(speed, FIXED_DELTA_SECONDS, collision, lane, control.steer)
        terminated = collision > 0
        truncated = self._steps >= self.max_steps
        return (
            self._frame,
            reward,
            terminated,
            truncated,
            {"collision": collision, "lane_invasion": lane},
        )

    def render(self) -> np.ndarray:
        return self._frame

    def close(self) -> None:
        """Destroy every actor and sensor, and leave the server asynchronous for the next user."""
        try:
            self._destroy()
        finally:
            settings = self.world.get_settings()
            settings.synchronous_mode = False
            settings.fixed_delta_seconds = None
            self.world.apply_settings(settings)
            self.traffic.set_synchronous_mode(False)


def _walk(direction: Any) -> Any:
    import carla

    return carla.WalkerControl(direction=direction, speed=1.4)  # a brisk walk across the road


def _speed(vehicle: Any) -> float:
    v = vehicle.get_velocity()
    return math.sqrt(v.x * v.x + v.y * v.y + v.z * v.z)


def carla_frame(env: gym.Env, obs: Any) -> np.ndarray:
    return obs


def carla_context(env: gym.Env, obs: Any) -> dict[str, Any]:
    """What the ERPv #HW/#JW prompts quote: speed (m/s) and yaw (degrees)."""
    ego = env.unwrapped.ego
    if ego is None:
        return {"speed": 0.0, "yaw": 0.0}
    return {"speed": _speed(ego), "yaw": float(ego.get_transform().rotation.yaw)}


def carla_state_from_context(ctx: dict[str, Any]) -> np.ndarray:
    return np.array([ctx["speed"], ctx["yaw"]], dtype=np.float32)


def carla_state(env: gym.Env, obs: Any) -> np.ndarray:
    return carla_state_from_context(carla_context(env, obs))
