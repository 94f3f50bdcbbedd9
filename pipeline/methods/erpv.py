"""Method `erpv` (seed 002): SAC + VPG (eq. 3-4) + VER (eq. 5-7) guided by the dataset's cached
action labels a_v, with the frozen VLM critic C_V that `pretrain_critic@<env>` trains here first
(sec. 3.3, appendix D.1: TD on the labelled RAE data, next-state actions from the cached labels).
Deployed agents are SAC's networks: C_V guides training only."""

from __future__ import annotations

import logging
import re
import shutil
from pathlib import Path
from typing import Any

import gymnasium as gym

from pipeline.agents.erpv import ERPvAgent, ERPvParams, VLMCritic, pretrain_vlm_critic
from pipeline.agents.off_policy import OffPolicyAgent
from pipeline.agents.sac import SACAgent
from pipeline.config import ConfigError, Params, TrainRun, merge_settings, validate_section
from pipeline.dataset.layout import dataset_action_space, dataset_hashes
from pipeline.dataset.transitions import load_offline_transitions
from pipeline.io import atomic_write_json
from pipeline.methods.base import TrainError, TrainInputs, resume_for
from pipeline.methods.off_policy import OffPolicyMethod

log = logging.getLogger(__name__)

NO_CRITIC = "no_critic.json"  # pretrain_critic's output for an env without C_V


class ERPv(OffPolicyMethod):
    name = "erpv"
    params_class = ERPvParams
    labels = ("action",)
    deployed_agent = SACAgent

    def check_critic(self, params: Params) -> list[str]:
        """Problems of the `critic` section: C_V's, which this method pre-trains and reads."""
        return check_critic(params)

    def check_run(self, name: str, run: TrainRun, params: Params) -> list[str]:
        problems = super().check_run(name, run, params)
        if run.image_size is not None:
            problems.append(
                f"train.{name}.image_size: an erpv run reads its env's C_V, pre-trained on the "
                f"dataset's frames at env.{run.env}.image_size; set the frame size there"
            )
        critic_envs = params.critic.envs if params.critic is not None else []
        if run.env not in critic_envs:
            problems.append(
                f"train.{name}: method erpv reads the pre-trained C_V of {run.env!r}, which "
                f"`critic.envs` does not list; add {run.env!r} to critic.envs (now: {critic_envs})"
            )
            return problems
        try:
            hp = self.params(params, run)
        except ConfigError:
            return problems  # reported by check_params
        variant = hp.critic_variant
        variants = params.critic.variants.get(run.env, {}) if params.critic is not None else {}
        if variant is not None and variant not in variants:
            problems.append(
                f"train.{name}: critic_variant {variant!r} is not a C_V of {run.env!r}; add it "
                f"under critic.variants.{run.env} (now: {sorted(variants) or 'none'})"
            )
            return problems
        try:
            critic = critic_params(params, run.env, variant).network
        except ConfigError:
            return problems  # reported by check_critic
        where = (
            f"critic.overrides.{run.env}" if variant is None
            else f"critic.variants.{run.env}.{variant}"
        )  # fmt: skip
        for key in ("obs", "frame_stack"):
            if getattr(hp.network, key) != getattr(critic, key):
                problems.append(
                    f"train.{name}: the agent's network.{key} is {getattr(hp.network, key)!r}, "
                    f"the C_V of {run.env!r} reads {getattr(critic, key)!r}: set "
                    f"{where}.network.{key} (or the run's overrides) to match"
                )
        return problems

    def build_agent(
        self, env: gym.Env, hp: ERPvParams, run: TrainRun, inputs: TrainInputs
    ) -> tuple[OffPolicyAgent, dict[str, Any]]:
        """ERPv's agent with its env's frozen C_V; the critic's data hashes go in the meta."""
        if inputs.critics is None:
            raise TrainError("erpv needs the directory of pre-trained critics (--critics)")
        path = critic_dir(inputs.critics / run.env, hp.critic_variant)
        if (inputs.critics / run.env / NO_CRITIC).exists():
            raise TrainError(
                f"erpv needs the pre-trained C_V of {run.env}; add {run.env} to critic.envs in "
                f"params.yaml"
            )
        if not path.exists():
            raise TrainError(
                f"{path} does not exist: run pretrain_critic@{run.env} first"
                + ("" if hp.critic_variant is None else f" (with critic.variants.{run.env}."
                   f"{hp.critic_variant} in params.yaml)")
            )  # fmt: skip
        critic = VLMCritic.load(path)
        agent = ERPvAgent.for_env(env, hp, vlm_critic=critic, seed=run.seed)
        return agent, {"critic": critic.data_hashes}


METHOD = ERPv()


def write_no_critic(out_dir: str | Path, env_id: str) -> None:
    """The pretrain_critic output of an env that `critic.envs` does not list: a marker (and no
    earlier critic left behind), so that the runs on that env depend on something stable."""
    out_dir = Path(out_dir)
    if out_dir.exists():
        shutil.rmtree(out_dir)
    atomic_write_json(
        out_dir / NO_CRITIC, {"env": env_id, "critic": None, "why": "not listed in critic.envs"}
    )


# The `erpv` keys that C_V's pre-training reads (pretrain_vlm_critic, the device, the stage's CPU
# threads), and no other:
# dvc.yaml's pretrain_critic stage lists them as its params (tests/test_erpv.py checks both).
CRITIC_KEYS = (
    "network", "batch_size", "gamma", "critic_lr", "adam_betas", "target_update_freq",
    "critic_tau", "encoder_tau", "device", "threads",
)  # fmt: skip


VARIANTS = "variants"  # models/critic/<env>/variants/<name>/: the env's further C_V


def critic_dir(env_dir: Path, variant: str | None) -> Path:
    """Where the C_V `variant` of an env lies (None: the env's own, `env_dir` itself)."""
    return env_dir if variant is None else env_dir / VARIANTS / variant


def critic_params(params: Params, env_id: str, variant: str | None = None) -> ERPvParams:
    """The settings of `env_id`'s C_V: `erpv`'s, with `critic.overrides.<env>` merged over, and
    for a `variant`, `critic.variants.<env>.<variant>` merged over that."""
    raw = params.section(METHOD.name)
    if raw is None:
        raise ConfigError(f"params.yaml has no `{METHOD.name}:` section (C_V reads its settings)")
    critic = params.critic
    settings = merge_settings(raw, critic.overrides.get(env_id, {}) if critic else {})
    if variant is not None:
        own = critic.variants.get(env_id, {}) if critic else {}
        if variant not in own:
            raise ConfigError(f"critic.variants.{env_id} has no C_V {variant!r}")
        settings = merge_settings(settings, own[variant])
    return validate_section(ERPvParams, settings, METHOD.name)


def check_critic(params: Params) -> list[str]:
    """Problems of `critic.overrides`: an env C_V is not built for, a key C_V does not read, a
    value the erpv section refuses."""
    if params.critic is None:
        return []
    problems = []
    for env_id, overrides in params.critic.overrides.items():
        where = f"critic.overrides.{env_id}"
        if env_id not in params.critic.envs:
            problems.append(f"{where}: {env_id!r} is not in critic.envs ({params.critic.envs})")
        unread = sorted(set(overrides) - set(CRITIC_KEYS))
        if unread:
            problems.append(f"{where}: C_V does not read {unread}; it reads {list(CRITIC_KEYS)}")
            continue
        try:
            critic_params(params, env_id)
        except ConfigError as exc:
            problems += [f"{where}: {line.strip()}" for line in str(exc).split("\n")[1:]]
    for env_id, variants in params.critic.variants.items():
        if env_id not in params.critic.envs:
            problems.append(
                f"critic.variants.{env_id}: {env_id!r} is not in critic.envs ({params.critic.envs})"
            )
            continue
        for name, overrides in variants.items():
            where = f"critic.variants.{env_id}.{name}"
            if not _VARIANT_NAME.fullmatch(name):
                problems.append(f"{where}: a C_V name is a directory name (letters, digits, -, _)")
                continue
            unread = sorted(set(overrides) - set(CRITIC_KEYS))
            if unread:
                problems.append(
                    f"{where}: C_V does not read {unread}; it reads {list(CRITIC_KEYS)}"
                )
                continue
            try:
                critic_params(params, env_id, name)
            except ConfigError as exc:
                problems += [f"{where}: {line.strip()}" for line in str(exc).split("\n")[1:]]
    return problems


_VARIANT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*")


def pretrain_critic(
    env_id: str,
    params: Params,
    dataset: Path,
    out_dir: Path,
    progress: bool = True,
    variant: str | None = None,
    resume_dir: Path | None = None,
) -> list[dict[str, float]]:
    """ERPv's C_V for `env_id`: TD on the labelled RAE dataset, next-state actions from the cached
    labels (the VLM policy evaluated without calling the VLM); saved frozen with the data hashes.
    Networks, TD settings and device are `erpv`'s with `critic.overrides.<env>` merged over
    (and `critic.variants.<env>.<variant>` for a variant: `critic_params`; the agent must read
    what C_V reads); the pretrain_critic stage depends on exactly those keys (CRITIC_KEYS), so a
    change of the guidance weights retrains no critic. With `resume_dir` and
    `critic.resume_every`, a killed pre-training goes on from its last resume state there."""
    if params.critic is None:
        raise TrainError("params.yaml needs a `critic` section to pre-train C_V")
    if env_id not in params.critic.envs:
        raise TrainError(f"{env_id} is not listed in critic.envs ({params.critic.envs})")
    cfg = critic_params(params, env_id, variant)
    data = load_offline_transitions(dataset, cfg.network.obs, labels=("action",))
    labelled = int(data["has_next_label"].sum())
    if labelled == 0:
        raise TrainError(
            f"{dataset}: no transition has a labelled next state; C_V has nothing to learn from "
            f"(check the label table's `action` task)"
        )
    hashes = dataset_hashes(dataset)
    material = {  # what the result depends on: a resume state of other settings is not read
        "env": env_id,
        "variant": variant,
        "erpv": cfg.model_dump(mode="json"),
        "steps": params.critic.steps,
        "seed": params.critic.seed,
        "data": hashes,
    }
    resume = resume_for(resume_dir, params.critic.resume_every, material)
    critic, logs = pretrain_vlm_critic(
        data,
        dataset_action_space(dataset),
        cfg,
        params.critic.steps,
        params.critic.seed,
        device=cfg.torch_device(),
        log_every=max(1, params.critic.steps // 20),
        progress=progress,
        resume=resume,
    )
    critic.save(out_dir, data_hashes=hashes)
    if resume is not None:
        resume.clear()  # C_V is saved: nothing to resume
    log.info(
        "C_V of %s: %d transitions, %d with a labelled next state", env_id, len(data), labelled
    )
    return logs
