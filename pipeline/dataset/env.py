"""The env a dataset was collected in, rebuilt from the dataset alone (as LeRobot's `make_env`
builds a policy's env from its dataset's metadata): `meta/info.json` records the env id and its
settings, and for an env brought from params.yaml its builder (`make`) and label schema, so a
colleague who pulled only the dataset gets the same env, the same frame size and action repeat.

    from pipeline.dataset.env import make_env
    env = make_env("data/datasets/cartpole-swingup")
"""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym

from pipeline.core.config import EnvConfig, register_brought_env
from pipeline.core.env_registry import KNOWN_ENVS, UnknownEnvError, env_info
from pipeline.core.errors import PipelineError
from pipeline.dataset.layout import INFO_PATH, read_info


def dataset_env(dataset_dir: str | Path) -> tuple[str, EnvConfig]:
    """(env id, settings) a dataset's samples were collected with, its brought env registered
    in this process; errors name the file and what is missing."""
    info = read_info(dataset_dir)
    where = Path(dataset_dir) / INFO_PATH
    try:
        env_id, cfg = info["env_id"], EnvConfig(**info["env"])
    except (KeyError, TypeError, ValueError) as exc:
        raise PipelineError(
            f"{where}: no env to rebuild ({type(exc).__name__}: {exc}); a dataset stage of this "
            "pipeline records `env_id` and `env` (rebuild it with `dvc repro dataset@<env>`)"
        ) from None
    if env_id not in KNOWN_ENVS and not register_brought_env(env_id, cfg, str(where)):
        try:
            env_info(env_id)  # registered in this process already (its params were loaded)
        except UnknownEnvError:
            raise PipelineError(
                f"{where}: env {env_id!r} is neither shipped nor brought with its builder "
                "(`env.make` and `env.labels` are missing): pass its params.yaml entry instead"
            ) from None
    return env_id, cfg


def make_env(dataset_dir: str | Path, *, pixels: bool = True) -> gym.Env:
    """The env of `dataset_dir`, built as its collect stage built it (`pipeline.core.envs`):
    the same frame size, action repeat, episode limit and observation contract."""
    from pipeline.core.envs import make_env as make_registered_env

    env_id, cfg = dataset_env(dataset_dir)
    return make_registered_env(env_id, cfg, pixels=pixels)
