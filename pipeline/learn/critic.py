"""ERPv's VLM critic C_V pre-trained offline (seed 002, sec. 3.3, appendix D.1): the stage
`pretrain_critic@<env>`. TD on the env's labelled RAE dataset, next-state actions from the cached
labels: the Q function of the VLM policy, evaluated without calling the VLM. The network
(`VLMCritic`), its settings (`critic_params`) and how a run finds it are ERPv's method module's;
this module trains and saves it, so that a run's training does not depend on it."""

from __future__ import annotations

import copy
import logging
import shutil
from pathlib import Path

import gymnasium as gym
import numpy as np
import torch
import torch.nn.functional as F
from tqdm import tqdm

from pipeline.core.config import Params
from pipeline.core.io import atomic_write_json
from pipeline.dataset.layout import dataset_action_space, dataset_hashes
from pipeline.dataset.transitions import OfflineTransitions, load_offline_transitions
from pipeline.learn.agents.off_policy import ActionScale, SACParams, adam, box_bounds, soft_update
from pipeline.learn.agents.replay import TransitionStore
from pipeline.learn.agents.resume import Resume
from pipeline.learn.methods.base import TrainError, resume_for
from pipeline.learn.methods.erpv import NO_CRITIC, VLMCritic, critic_dir, critic_params
from pipeline.learn.methods.table import METHOD_MODULES

log = logging.getLogger(__name__)

READS_NO_CRITIC = "reads_no_critic.json"  # models/critic/<env>/<method>/ of a method without C_V


def pretrain_vlm_critic(
    transitions: OfflineTransitions,
    action_space: gym.spaces.Box,
    cfg: SACParams,
    steps: int,
    seed: int,
    *,
    device: torch.device | str = "cpu",
    log_every: int = 1000,
    progress: bool = True,
    resume: Resume | None = None,
) -> tuple[VLMCritic, list[dict[str, float]]]:
    """Pre-train C_V offline on labelled (RAE) transitions by TD (sec. 3.3, appendix D.1) and
    return it frozen, with metric rows (step, td_loss, q) every `log_every` steps.

    With `resume`, the whole state (C_V, its target, Adam, the sampling RNG, the logs) is saved
    every `resume.every` updates, and a call that finds one goes on from it to the same bytes as
    an uninterrupted run; the caller clears it once C_V is saved.

    Target: r + gamma (1 - done) min C_V~(s', a_v(s')), with a_v(s') the cached label of the next
    state: C_V is the Q function of the VLM policy, for any action taken in s (RAE mixes the
    explorer's actions in). Uses the transitions whose next state has a label, or that terminate
    (no bootstrap needed). Networks, batch size, gamma, critic lr and Polyak rates come from `cfg`.
    """
    low, high = box_bounds(action_space)
    if transitions.action_dim != len(low):
        raise ValueError(
            f"transitions have {transitions.action_dim}-D actions, the action space {len(low)}-D"
        )
    usable = transitions["has_next_label"] | transitions.terminated
    if not usable.any():
        raise ValueError(
            f"none of the {len(transitions)} transitions has a labelled next state (or ends the "
            f"episode): nothing to bootstrap C_V from"
        )
    net = cfg.network
    obs_shape = transitions.obs.shape[1:]
    k = net.frame_stack if net.obs == "pixels" else 1  # states are not stacked
    store = TransitionStore.from_offline(transitions.select(usable), k, device)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        critic = VLMCritic(obs_shape, low, high, net).to(device)
    target = copy.deepcopy(critic)
    target.requires_grad_(False)
    scale = ActionScale(low, high, device)
    optimizer = adam(critic.parameters(), cfg.critic_lr, cfg.adam_betas)
    rng = np.random.default_rng(seed)
    logs: list[dict[str, float]] = []
    window: list[tuple[float, float]] = []
    first = 0
    state = resume.load() if resume is not None else None
    if state is not None:
        critic.load_state_dict(state["critic"])
        target.load_state_dict(state["target"])
        optimizer.load_state_dict(state["optimizer"])
        rng.bit_generator.state = state["rng"]
        torch.set_rng_state(state["torch_rng"])
        first, logs = state["step"], state["logs"]
        window = [(float(td), float(q)) for td, q in state["window"]]
    bar = tqdm(range(first, steps), desc="pretrain C_V", unit="step", disable=not progress)
    for step in bar:
        b = {
            k: torch.as_tensor(v, device=device)
            for k, v in store.sample(cfg.batch_size, rng).items()
        }
        with torch.no_grad():
            next_a_v = scale.normalise(b["next_a_v"]).clamp(-1.0, 1.0)
            # zero where the episode terminated: no label needed there
            td_target = b["reward"] + cfg.gamma * (1.0 - b["done"]) * target(
                b["next_obs"], next_a_v
            )
        q1, q2 = critic.heads(b["obs"], scale.normalise(b["action"]))
        loss = F.mse_loss(q1, td_target) + F.mse_loss(q2, td_target)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        if (step + 1) % cfg.target_update_freq == 0:
            soft_update(target.critic, critic.critic, cfg.critic_tau)
            soft_update(target.encoder, critic.encoder, cfg.encoder_tau)
        window.append((loss.item(), q1.mean().item()))
        if (step + 1) % log_every == 0 or step + 1 == steps:
            td, q = np.mean(window, axis=0)
            logs.append({"step": float(step + 1), "td_loss": float(td), "q": float(q)})
            window = []
        if resume is not None and (step + 1) % resume.every == 0 and step + 1 < steps:
            resume.save(
                {
                    "step": step + 1,
                    "critic": critic.state_dict(),
                    "target": target.state_dict(),
                    "optimizer": optimizer.state_dict(),
                    "rng": rng.bit_generator.state,
                    "torch_rng": torch.get_rng_state(),
                    "logs": logs,
                    "window": [list(w) for w in window],
                }
            )
    bar.close()
    return critic.freeze(), logs


def write_no_critic(out_dir: str | Path, env_id: str) -> None:
    """The pretrain_critic output of an env that `critic.envs` does not list: a marker where C_V
    would be (and no earlier critic left behind) and the other methods' markers, so that the runs
    on that env depend on something stable."""
    out_dir = Path(out_dir)
    if out_dir.exists():
        shutil.rmtree(out_dir)
    write_critic_markers(out_dir, env_id)
    atomic_write_json(
        critic_dir(out_dir) / NO_CRITIC,
        {"env": env_id, "critic": None, "why": "not listed in critic.envs"},
    )


def write_critic_markers(out_dir: str | Path, env_id: str) -> None:
    """One folder per method of the table beside C_V's (`critic_dir`), each holding a marker
    whose bytes do not depend on C_V: train@<run> depends on models/critic/<env>/<its method>,
    so a retrained C_V leaves the runs of the methods that do not read it up to date."""
    erpv = critic_dir(Path(out_dir)).name
    for method in METHOD_MODULES:
        if method != erpv:
            atomic_write_json(
                Path(out_dir) / method / READS_NO_CRITIC,
                {"env": env_id, "method": method, "critic": None,
                 "why": f"{method} reads no C_V (ERPv's is in ../{erpv}/)"},
            )  # fmt: skip


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
