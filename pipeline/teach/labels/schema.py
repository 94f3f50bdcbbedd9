"""What each env's label tasks may answer: action names, milestone sets and object phrases."""

from __future__ import annotations

from pipeline.core.env_registry import EnvLabelSchema, brought_schema, env_info

__all__ = ["SCHEMAS", "EnvLabelSchema", "label_schema"]


_MOUNTAINCAR_MILESTONES = {
    # 3.2: "the potential is shifted from 0 to 0.3 by reaching the left peak"
    "BOTTOM": 0.0,
    "LEFT_SLOPE": 0.15,
    "LEFT_PEAK": 0.3,
    "RIGHT_SLOPE": 0.6,
    "GOAL": 1.0,
}
_MOUNTAINCAR_OBJECTS = ("car", "hill", "flag")
_MC_TASK = (
    "drive the car to the flag on top of the right hill; the engine is too weak to climb directly"
)

_DMC = {
    "cartpole-swingup": (
        ("slide",),
        {"POLE_DOWN": 0.0, "SWINGING": 0.3, "POLE_UP": 0.7, "BALANCED": 1.0},
        ("cart", "pole", "rail"),
        "swing the pole up by moving the cart and balance it upright",
    ),
    "cheetah-run": (
        ("bthigh", "bshin", "bfoot", "fthigh", "fshin", "ffoot"),
        {"FALLEN": 0.0, "STANDING": 0.3, "MOVING": 0.6, "RUNNING": 1.0},
        ("cheetah", "legs", "ground"),
        "make the planar cheetah run forward as fast as possible",
    ),
    "walker-walk": (
        ("right_hip", "right_knee", "right_ankle", "left_hip", "left_knee", "left_ankle"),
        {"FALLEN": 0.0, "RISING": 0.3, "UPRIGHT": 0.6, "WALKING": 1.0},
        ("walker", "legs", "torso", "ground"),
        "keep the planar walker upright and walk forward",
    ),
    "ball_in_cup-catch": (
        ("x", "z"),
        {"BALL_BELOW": 0.0, "BALL_SWINGING": 0.3, "BALL_ABOVE_CUP": 0.7, "BALL_IN_CUP": 1.0},
        ("cup", "ball", "string"),
        "swing the ball attached by a string up and catch it in the cup",
    ),
    "reacher-easy": (
        ("shoulder", "wrist"),
        {"FAR": 0.0, "APPROACHING": 0.5, "AT_TARGET": 1.0},
        ("arm", "target"),
        "move the tip of the two-link arm onto the target",
    ),
}

_DRIVING_MILESTONES = {"CRASHED": 0.0, "CLOSE_BEHIND": 0.3, "CRUISING": 0.7, "FAST_CLEAR": 1.0}
_HW_TASK = "drive along the highway as far as possible without colliding, keeping to a lane"

SCHEMAS: dict[str, EnvLabelSchema] = {
    "MountainCar-v0": EnvLabelSchema(
        "MountainCar-v0", "MountainCar", ("push",), ("left", "none", "right"),
        _MOUNTAINCAR_MILESTONES, _MOUNTAINCAR_OBJECTS, _MC_TASK,
    ),
    "MountainCarContinuous-v0": EnvLabelSchema(
        "MountainCarContinuous-v0", "MountainCar", ("force",), None,
        _MOUNTAINCAR_MILESTONES, _MOUNTAINCAR_OBJECTS, _MC_TASK,
    ),
    "CarRacing-v3": EnvLabelSchema(
        "CarRacing-v3", "CarRacing", ("steer", "gas", "brake"), None,
        {"OFF_TRACK": 0.0, "ON_TRACK_SLOW": 0.4, "ON_TRACK_FAST": 1.0},
        ("car", "road", "grass", "curve"),
        "drive the red car along the grey road as fast as possible without leaving it",
    ),
    # ERPv's driving scenes: a = [steer, throttle] (fig. 15); the #HW / #JW prompts (fig. 12-13)
    "highway-hw": EnvLabelSchema(
        "highway-hw", "highway", ("steer", "throttle"), None, _DRIVING_MILESTONES,
        ("car", "road", "lane"), _HW_TASK,
    ),
    "carla-hw": EnvLabelSchema(
        "carla-hw", "carla_hw", ("steer", "throttle"), None, _DRIVING_MILESTONES,
        ("car", "road", "lane"), _HW_TASK,
    ),
    "carla-jw": EnvLabelSchema(
        "carla-jw", "carla_jw", ("steer", "throttle"), None, _DRIVING_MILESTONES,
        ("pedestrian", "road", "car"),
        "drive along the road as far as possible without hitting pedestrians who cross it",
    ),
    **{
        env_id: EnvLabelSchema(env_id, "dmc", names, None, milestones, objects, description)
        for env_id, (names, milestones, objects, description) in _DMC.items()
    },
}  # fmt: skip


def label_schema(env_id: str) -> EnvLabelSchema:
    """The shipped schema of `env_id`, or the one its `env.<id>.labels` registered."""
    if env_info(env_id).shipped:  # unknown ids get the error that lists the known ones
        return SCHEMAS[env_id]
    schema: EnvLabelSchema = brought_schema(env_id)
    return schema
