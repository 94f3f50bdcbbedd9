"""SAC + DeepMDP on pixels or states: the base agent of ERPv (seed 002, sec. 3.1, appendix B
eq. 8-13, C.3, table 6), after SAC-AE (Yarats et al. 2019) and the DeepMDP agent of the DBC code
base (Zhang et al. 2021) whose networks ERPv's figures 8-11 print.

- Clipped double Q with target networks (Polyak averaging; the encoder has its own rate, SAC-AE).
- Learned temperature alpha with target entropy -|A| (eq. 11).
- One visual encoder V(.), owned by the critic; the actor reads its features detached (SAC-AE):
  only the critic's TD loss and the DeepMDP auxiliary losses shape it. C.3: "the above visual
  encoders share parameters during visual RL training".
- DeepMDP auxiliary task trained with the critic (Algorithm 1): transition model T_D predicts the
  next latent (eq. 12-13), a reward head predicts r from the predicted latent.

Actions: the networks work in [-1, 1]^A; the agent maps to and from the env's Box bounds, and the
replay buffer stores env units (the dataset's units).

ERPv's guidance (pipeline.agents.erpv) plugs into two hooks: `policy_guidance` (eq. 4) and
`entropy_regulariser` (eq. 7); here both add nothing.
"""

from __future__ import annotations

import copy
import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from tqdm import tqdm

from pipeline.agents.checkpoint import (
    CheckpointError,
    LoopCheckpoint,
    load_module_tensors,
    module_tensors,
    read_checkpoint,
    read_meta,
    write_checkpoint,
)
from pipeline.agents.networks import (
    Actor,
    Critic,
    RewardModel,
    TransitionModel,
    make_encoder,
    transition_nll,
)
from pipeline.agents.replay import ReplayBuffer
from pipeline.config import ERPvParams, NetworkParams, SACParams
from pipeline.dataset.stacking import FrameStacker


def encoder_input_shape(network: NetworkParams, obs_shape: tuple[int, ...]) -> tuple[int, ...]:
    """One env observation's shape -> the encoder's input: (H, W, 3) -> (3k, H, W); (D,) -> (D,)."""
    if network.obs == "state":
        if len(obs_shape) != 1:
            raise ValueError(f"state observations are (D,) vectors, got shape {obs_shape}")
        return tuple(obs_shape)
    if len(obs_shape) != 3 or obs_shape[2] != 3:
        raise ValueError(f"pixel observations are (H, W, 3) frames, got shape {obs_shape}")
    return (3 * network.frame_stack, obs_shape[0], obs_shape[1])


def env_obs_shape(env: gym.Env, network: NetworkParams) -> tuple[int, ...]:
    """Shape of the entry the agent reads from an env's {pixels, state} observation dict."""
    space = env.observation_space
    if not isinstance(space, gym.spaces.Dict) or network.obs not in space.spaces:
        raise ValueError(f"the agent reads obs[{network.obs!r}], the env observes {space}")
    return space[network.obs].shape


class ActionScale:
    """Affine map between a Box's [low, high] and the networks' [-1, 1]."""

    def __init__(self, low: np.ndarray, high: np.ndarray, device: torch.device | str) -> None:
        low, high = np.asarray(low, np.float32).ravel(), np.asarray(high, np.float32).ravel()
        if not (np.isfinite(low).all() and np.isfinite(high).all() and (high > low).all()):
            raise ValueError(f"action bounds must be finite with high > low, got {low}, {high}")
        self.low_np, self.high_np = low, high
        self.low = torch.as_tensor(low, device=device)
        self.high = torch.as_tensor(high, device=device)

    def normalise(self, action: torch.Tensor) -> torch.Tensor:
        return 2.0 * (action - self.low) / (self.high - self.low) - 1.0

    def unnormalise(self, action: torch.Tensor) -> torch.Tensor:
        return self.low + 0.5 * (action + 1.0) * (self.high - self.low)


def box_bounds(action_space: gym.spaces.Space) -> tuple[np.ndarray, np.ndarray]:
    if not isinstance(action_space, gym.spaces.Box) or len(action_space.shape) != 1:
        raise ValueError(
            f"SAC needs a 1-D continuous (Box) action space; got {action_space} (discrete "
            f"envs such as MountainCar-v0 are PPO's)"
        )
    return action_space.low, action_space.high


def sac_alpha_loss(
    alpha: torch.Tensor, log_pi: torch.Tensor, target_entropy: float
) -> torch.Tensor:
    """ERPv eq. 11: E[-alpha (log pi(a|s) + H_bar)], H_bar the target entropy (-|A|)."""
    return (-alpha * (log_pi.detach() + target_entropy)).mean()


def adam(params: Iterable[torch.Tensor], lr: float, betas: tuple[float, float]) -> torch.optim.Adam:
    """Adam with the fused kernel (CPU and CUDA): one kernel for all parameters instead of a
    handful per tensor; with networks this small the per-tensor overhead is a fifth of an update."""
    return torch.optim.Adam(params, lr=lr, betas=betas, fused=True)


@contextmanager
def frozen(module: nn.Module) -> Iterator[None]:
    """No parameter gradients for `module` inside the block (gradients still flow through it to
    its inputs). From SpinningUp's SAC: the actor loss need not compute the critic's gradients."""
    module.requires_grad_(False)
    try:
        yield
    finally:
        module.requires_grad_(True)


def soft_update(target: nn.Module, online: nn.Module, tau: float) -> None:
    """Polyak averaging: target <- tau * online + (1 - tau) * target."""
    with torch.no_grad():
        for t, o in zip(target.parameters(), online.parameters(), strict=True):
            t.lerp_(o, tau)


class ResumableAgent(ABC):
    """The training state of a SAC-family agent (SAC, ERPv, Semore): each defines `_modules`,
    `_optimizers`, `log_alpha` and `update_step`; the off-policy loop checkpoints this."""

    log_alpha: torch.Tensor
    update_step: int

    @abstractmethod
    def _modules(self) -> dict[str, nn.Module]:
        """Every network whose weights the training changes, by a stable name."""

    @abstractmethod
    def _optimizers(self) -> dict[str, torch.optim.Optimizer]:
        """Every optimiser, by a stable name."""

    def training_state(self) -> dict[str, Any]:
        """Everything an interrupted training needs to go on exactly: networks and targets,
        optimiser states, log_alpha, the update counter."""
        return {
            "modules": {name: m.state_dict() for name, m in self._modules().items()},
            "optimizers": {name: o.state_dict() for name, o in self._optimizers().items()},
            "log_alpha": self.log_alpha.detach().clone(),
            "update_step": self.update_step,
        }

    def load_training_state(self, state: dict[str, Any]) -> None:
        for name, module in self._modules().items():
            module.load_state_dict(state["modules"][name])
        for name, optimizer in self._optimizers().items():
            optimizer.load_state_dict(state["optimizers"][name])
        with torch.no_grad():
            self.log_alpha.copy_(state["log_alpha"])  # in place: the optimiser holds this tensor
        self.update_step = int(state["update_step"])


class SACAgent(ResumableAgent):
    """SAC + DeepMDP. `obs_shape` is one observation as the env gives it ((H, W, 3) frames or
    (D,) states); `act` takes the stacked input (`FrameStacker`), `update` a `ReplayBuffer` batch."""

    algorithm = "sac"

    def __init__(
        self,
        obs_shape: tuple[int, ...],
        action_space: gym.spaces.Box,
        cfg: SACParams | None = None,
        *,
        device: torch.device | str = "cpu",
        seed: int = 0,
    ) -> None:
        self.cfg = cfg = cfg or SACParams()
        net = cfg.network
        self.device = torch.device(device)
        self.obs_shape = tuple(int(d) for d in obs_shape)
        self.input_shape = encoder_input_shape(net, self.obs_shape)
        self.scale = ActionScale(*box_bounds(action_space), self.device)
        action_dim = len(self.scale.low_np)
        self.target_entropy = -float(action_dim)  # eq. 11: H_bar = -|A|
        with torch.random.fork_rng(devices=[]):  # seeded init without touching the global RNG
            torch.manual_seed(seed)
            self.encoder = make_encoder(
                net.obs, self.input_shape, feature_dim=net.feature_dim,
                num_layers=net.encoder_layers, num_filters=net.encoder_filters,
            )  # fmt: skip
            self.critic = Critic(net.feature_dim, action_dim, net.hidden_dim)
            self.actor = Actor(
                net.feature_dim, action_dim, net.hidden_dim, net.log_std_min, net.log_std_max
            )
            self.transition = TransitionModel(
                net.feature_dim, action_dim, net.transition_hidden_dim, net.transition_learn_sigma
            )
            self.reward_model = RewardModel(net.feature_dim, net.transition_hidden_dim)
        self.encoder_target = copy.deepcopy(self.encoder)
        self.critic_target = copy.deepcopy(self.critic)
        for module in self._modules().values():
            module.to(self.device)
        self.log_alpha = torch.tensor(
            math.log(cfg.init_temperature), device=self.device, requires_grad=True
        )
        betas = cfg.adam_betas
        self.critic_optimizer = adam(
            [*self.encoder.parameters(), *self.critic.parameters()], cfg.critic_lr, betas
        )
        self.model_optimizer = adam(
            [*self.transition.parameters(), *self.reward_model.parameters()], cfg.model_lr, betas
        )
        self.actor_optimizer = adam(self.actor.parameters(), cfg.actor_lr, betas)
        self.alpha_optimizer = adam([self.log_alpha], cfg.alpha_lr, betas)
        self.update_step = 0

    @classmethod
    def for_env(cls, env: gym.Env, cfg: SACParams | None = None, **kwargs: Any) -> SACAgent:
        """Built from an env of the pipeline's observation contract (pipeline.envs.make_env)."""
        cfg = cfg or SACParams()
        return cls(env_obs_shape(env, cfg.network), env.action_space, cfg, **kwargs)

    def _modules(self) -> dict[str, nn.Module]:
        return {
            "encoder": self.encoder,
            "critic": self.critic,
            "encoder_target": self.encoder_target,
            "critic_target": self.critic_target,
            "actor": self.actor,
            "transition": self.transition,
            "reward_model": self.reward_model,
        }

    @property
    def alpha(self) -> torch.Tensor:
        return self.log_alpha.exp()

    @property
    def obs_kind(self) -> str:
        """Which entry of the env's observation dict `act` reads (`state` or `pixels`)."""
        return self.cfg.network.obs

    @property
    def frame_stack(self) -> int:
        return self.cfg.network.frame_stack

    @torch.no_grad()
    def act(self, obs: np.ndarray, deterministic: bool = False) -> np.ndarray:
        """One stacked observation (`FrameStacker` output) -> an action in env units, (A,)."""
        x = torch.as_tensor(np.asarray(obs), device=self.device)
        if tuple(x.shape) != self.input_shape:
            raise ValueError(
                f"act() expects one observation of shape {self.input_shape}, got {tuple(x.shape)}"
            )
        action, _, _ = self.actor(self.encoder(x.unsqueeze(0)), deterministic)
        return self.scale.unnormalise(action)[0].cpu().numpy()

    def update(self, batch: dict[str, torch.Tensor]) -> dict[str, float]:
        """One gradient step of the critic (+ DeepMDP losses); every `actor_update_freq` steps the
        actor and alpha; every `target_update_freq` steps the targets. Returns float metrics."""
        self.update_step += 1
        b = {k: v.to(self.device, non_blocking=True) for k, v in batch.items()}
        action = self.scale.normalise(b["action"])  # (B, A)
        h = self.encoder(b["obs"])  # (B, F)
        with torch.no_grad():
            # o_{t+1} through the online encoder: the actor's next action and DeepMDP's target
            next_h = self.encoder(b["next_obs"])  # (B, F)
            next_h_target = self.encoder_target(b["next_obs"])  # (B, F)
        metrics = self.update_critic(h, action, b["reward"], b["done"], next_h, next_h_target)
        if self.update_step % self.cfg.actor_update_freq == 0:
            # DrQ-v2: the actor reuses this step's features, detached (SAC-AE: no actor gradient
            # into the encoder)
            metrics |= self.update_actor_and_alpha(h.detach(), next_h, b)
        if self.update_step % self.cfg.target_update_freq == 0:
            soft_update(self.critic_target, self.critic, self.cfg.critic_tau)
            soft_update(self.encoder_target, self.encoder, self.cfg.encoder_tau)
        values = torch.stack([v.detach().float() for v in metrics.values()]).tolist()  # one sync
        return dict(zip(metrics, values, strict=True))

    def update_critic(
        self,
        h: torch.Tensor,
        action: torch.Tensor,
        reward: torch.Tensor,
        done: torch.Tensor,
        next_h: torch.Tensor,
        next_h_target: torch.Tensor,
    ) -> dict[str, torch.Tensor]:
        with torch.no_grad():
            next_action, next_log_pi, _ = self.actor(next_h)
            # ERPv eq. 9: V(s') = E[Q~(s', a') - alpha log pi(a'|s')], Q~ the target critic's min
            next_v = self.critic_target.q_min(next_h_target, next_action) - self.alpha * next_log_pi
            target = reward + self.cfg.gamma * (1.0 - done) * next_v  # eq. 8's backup, (B,)
        q1, q2 = self.critic(h, action)
        critic_loss = F.mse_loss(q1, target) + F.mse_loss(q2, target)  # TD loss on both heads
        loss = critic_loss
        metrics = {"critic_loss": critic_loss, "q": q1.mean()}
        if self.cfg.aux_weight > 0:
            mu, sigma = self.transition(h, action)  # eq. 13: T_D([a, s_t])
            transition_loss = transition_nll(next_h, mu, sigma).mean()  # eq. 12, target detached
            reward_loss = F.mse_loss(self.reward_model(mu), reward)
            loss = loss + self.cfg.aux_weight * (transition_loss + reward_loss)
            metrics |= {"transition_loss": transition_loss, "reward_loss": reward_loss}
        self.critic_optimizer.zero_grad(set_to_none=True)
        self.model_optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.critic_optimizer.step()
        if self.cfg.aux_weight > 0:
            self.model_optimizer.step()
        return metrics

    def update_actor_and_alpha(
        self, h: torch.Tensor, next_h: torch.Tensor, batch: dict[str, torch.Tensor]
    ) -> dict[str, torch.Tensor]:
        pi, log_pi, _ = self.actor(h)  # a_r ~ pi(.|s), (B, A), (B,)
        with frozen(self.critic):
            q_pi = self.critic.q_min(h, pi)  # (B,)
            actor_loss = (self.alpha.detach() * log_pi - q_pi).mean()  # eq. 10: L_pi
            guidance, metrics = self.policy_guidance(h, pi, q_pi, batch)
            self.actor_optimizer.zero_grad(set_to_none=True)
            (actor_loss if guidance is None else actor_loss + guidance).backward()  # eq. 4
        self.actor_optimizer.step()

        alpha_loss = sac_alpha_loss(self.alpha, log_pi, self.target_entropy)  # eq. 11
        regulariser, ver_metrics = self.entropy_regulariser(h, next_h, batch)
        self.alpha_optimizer.zero_grad(set_to_none=True)
        (alpha_loss if regulariser is None else alpha_loss + regulariser).backward()  # eq. 7
        self.alpha_optimizer.step()
        return {
            "actor_loss": actor_loss,
            "alpha_loss": alpha_loss,
            "alpha": self.alpha.detach(),
            "entropy": -log_pi.detach().mean(),
            **metrics,
            **ver_metrics,
        }

    def policy_guidance(
        self,
        h: torch.Tensor,
        pi: torch.Tensor,
        q_pi: torch.Tensor,
        batch: dict[str, torch.Tensor],
    ) -> tuple[torch.Tensor | None, dict[str, torch.Tensor]]:
        """Extra actor loss (ERPv: lambda_1 L_V, eq. 4). Plain SAC: none."""
        return None, {}

    def entropy_regulariser(
        self, h: torch.Tensor, next_h: torch.Tensor, batch: dict[str, torch.Tensor]
    ) -> tuple[torch.Tensor | None, dict[str, torch.Tensor]]:
        """Extra alpha loss (ERPv: lambda_2 E[(alpha - alpha_bar)^2], eq. 7). Plain SAC: none."""
        return None, {}

    def _optimizers(self) -> dict[str, torch.optim.Optimizer]:
        return {
            "critic": self.critic_optimizer,
            "model": self.model_optimizer,
            "actor": self.actor_optimizer,
            "alpha": self.alpha_optimizer,
        }

    # --- checkpoints (pipeline.agents.checkpoint's layout) -----------------------------------

    def checkpoint_meta(self) -> dict[str, Any]:
        """What `load` needs to rebuild this agent: its config, shapes and action bounds."""
        return {
            "architecture": "sac",  # SAC and ERPv: the same networks at deployment
            "algorithm": self.algorithm,
            "config": self.cfg.model_dump(mode="json"),
            "obs_shape": list(self.obs_shape),
            "action_low": self.scale.low_np.tolist(),
            "action_high": self.scale.high_np.tolist(),
            "update_step": self.update_step,
        }

    def save(self, path: str | Path, meta: dict[str, Any] | None = None) -> None:
        """Every network, the targets and log_alpha, plus `checkpoint_meta()` and `meta` (what the
        train stage records: run, env, data hashes). Optimiser states are not kept: a checkpoint
        is for acting and evaluation, and for warm starts (`load_weights`)."""
        tensors = module_tensors(self._modules())
        tensors["log_alpha"] = self.log_alpha.detach().cpu().reshape(1)
        write_checkpoint(path, tensors, {**(meta or {}), **self.checkpoint_meta()})

    def load_weights(self, path: str | Path) -> None:
        """Load the weights of a checkpoint made by an agent with the same config."""
        meta, tensors = read_checkpoint(path)
        if meta.get("architecture") != "sac":
            raise CheckpointError(f"{path}: a {meta.get('architecture')!r} checkpoint, not SAC's")
        if meta["config"] != self.cfg.model_dump(mode="json") or meta["obs_shape"] != list(
            self.obs_shape
        ):
            raise CheckpointError(
                f"{path}: saved with another config or observation shape than this agent"
            )
        load_module_tensors(self._modules(), tensors)
        with torch.no_grad():
            self.log_alpha.copy_(tensors["log_alpha"][0])
        self.update_step = int(meta["update_step"])

    @classmethod
    def load(cls, path: str | Path, device: torch.device | str = "cpu") -> SACAgent:
        """Any saved SAC-family agent (SAC or ERPv) as a SACAgent: the same networks, the same
        actions. To train an ERPv agent on, build an ERPvAgent and call `load_weights`."""
        meta = read_meta(path)
        config_class = SAC_FAMILY_CONFIGS.get(meta.get("algorithm", ""))
        if meta.get("architecture") != "sac" or config_class is None:
            raise CheckpointError(
                f"{path}: not a SAC-family checkpoint (architecture {meta.get('architecture')!r}, "
                f"algorithm {meta.get('algorithm')!r})"
            )
        space = gym.spaces.Box(
            np.asarray(meta["action_low"], np.float32),
            np.asarray(meta["action_high"], np.float32),
        )
        cfg = config_class.model_validate(meta["config"])
        agent = SACAgent(tuple(meta["obs_shape"]), space, cfg, device=device)
        agent.load_weights(path)
        return agent


# The config each SAC-family algorithm's checkpoint holds (ERPv's adds VPG / VER to SAC's).
SAC_FAMILY_CONFIGS: dict[str, type[SACParams]] = {"sac": SACParams, "erpv": ERPvParams}


def episode_reset_seed(seed: int, episode: int) -> int:
    """Episode i's reset seed depends on (run seed, i) alone, so a run resumed at an episode
    boundary needs no env state: episode 0 uses the run seed itself."""
    if episode == 0:
        return seed
    return int(np.random.SeedSequence([seed, episode]).generate_state(1)[0])


def _mean_rows(rows: list[dict[str, float]]) -> dict[str, float]:
    """Per-key means; a key counts over the rows that have it (actor metrics every 2nd update)."""
    keys = {k for row in rows for k in row}
    return {k: float(np.mean([row[k] for row in rows if k in row])) for k in sorted(keys)}


def train_off_policy(
    env: gym.Env,
    agent: SACAgent,
    buffer: ReplayBuffer,
    steps: int,
    seed: int,
    *,
    offline_fraction: float,
    start_steps: int = 1000,
    update_every: int = 1,
    eval_fn: Callable[[SACAgent], dict[str, float]] | None = None,
    log_every: int = 1000,
    progress: bool = True,
    checkpoint: LoopCheckpoint | None = None,
    offline_pool_fn: Callable[[int, np.random.Generator], np.ndarray | None] | None = None,
) -> tuple[list[tuple[int, float]], list[dict[str, float]]]:
    """Interact for `steps` agent steps with an env of the pipeline's observation contract,
    storing every step in `buffer`'s online part, and train `agent` on mixed batches.

    - The first `start_steps` actions are uniform random and no update is made (table 6: 1,000
      warm-up steps); after that, every `update_every` steps, `update_every` updates (one per
      step), each on a batch with `offline_fraction` of its rows from the buffer's offline part.
    - Every `log_every` steps a row of metrics (means over the updates since the last row, plus
      `eval_fn(agent)` when given) is appended, keyed also by `step`. `eval_fn` must play in an
      env of its own: resetting `env` would cut the training episode short.
    - With `checkpoint`, the whole loop state (agent and optimisers, the buffer's online part,
      every RNG, counters, curve and rows so far) is saved at the first episode end after every
      `checkpoint.every` steps, and a run that finds a saved state goes on from it: the result
      is the uninterrupted run's, bit for bit (each episode's reset is seeded from (seed, i)).
    - `offline_pool_fn(update index, rng)` may name the offline transitions a batch's offline
      rows are drawn from (Semore's selective replay); None: all.
    Returns (step, return) of every finished episode and the metric rows.
    """
    kind = agent.cfg.network.obs
    if buffer.kind != kind:
        raise ValueError(
            f"the agent reads {kind!r} observations, the buffer stores {buffer.kind!r}"
        )
    if steps < 0 or start_steps < 0 or update_every < 1 or log_every < 1:
        raise ValueError(
            f"need steps >= 0, start_steps >= 0, update_every >= 1, log_every >= 1; got "
            f"{steps}, {start_steps}, {update_every}, {log_every}"
        )
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    env.action_space.seed(seed)
    stacker = FrameStacker(agent.cfg.network.frame_stack, kind)
    episode, first, last_saved = 0, 0, 0
    curve: list[tuple[int, float]] = []
    logs: list[dict[str, float]] = []
    window: list[dict[str, float]] = []
    state = checkpoint.load() if checkpoint is not None else None
    if state is not None:  # go on where the saved run stopped: at the start of an episode
        agent.load_training_state(state["agent"])
        buffer.load_online_state(state["buffer"])
        rng.bit_generator.state = state["rng"]
        env.action_space.np_random.bit_generator.state = state["action_space_rng"]
        torch.set_rng_state(state["torch_rng"])
        episode, first, last_saved = state["episode"], state["step"], state["step"]
        curve, logs, window = state["curve"], state["logs"], state["window"]
    obs, _ = env.reset(seed=episode_reset_seed(seed, episode))
    x = stacker.reset(obs[kind])
    if state is None:
        buffer.begin_episode(obs[kind])
    episode_return = 0.0
    bar = tqdm(range(first, steps), desc="train", unit="step", disable=not progress)
    for step in bar:
        action = env.action_space.sample() if step < start_steps else agent.act(x)
        obs, reward, terminated, truncated, _ = env.step(action)
        buffer.add(action, float(reward), obs[kind], bool(terminated))  # truncation is not done
        x = stacker.step(obs[kind])
        episode_return += float(reward)
        if terminated or truncated:
            curve.append((step + 1, episode_return))
            bar.set_postfix(episode_return=f"{episode_return:.1f}")
            episode += 1
            obs, _ = env.reset(seed=episode_reset_seed(seed, episode))
            x = stacker.reset(obs[kind])
            buffer.begin_episode(obs[kind])
            episode_return = 0.0
        if step + 1 >= start_steps and (step + 1) % update_every == 0:
            for _ in range(update_every):
                pool = offline_pool_fn(agent.update_step, rng) if offline_pool_fn else None
                batch = buffer.sample(
                    agent.cfg.batch_size, offline_fraction, rng, offline_pool=pool
                )
                window.append(agent.update(batch))
        if (step + 1) % log_every == 0:
            row = {"step": float(step + 1), **_mean_rows(window)}
            window = []
            if eval_fn is not None:
                row |= eval_fn(agent)
            logs.append(row)
        if (
            checkpoint is not None
            and checkpoint.every
            and (terminated or truncated)
            and step + 1 - last_saved >= checkpoint.every
            and step + 1 < steps
        ):
            last_saved = step + 1
            checkpoint.save(
                {
                    "step": step + 1,
                    "episode": episode,
                    "agent": agent.training_state(),
                    "buffer": buffer.online_state(),
                    "rng": rng.bit_generator.state,
                    "action_space_rng": env.action_space.np_random.bit_generator.state,
                    "torch_rng": torch.get_rng_state(),
                    "curve": curve,
                    "logs": logs,
                    "window": window,
                }
            )
    bar.close()
    return curve, logs
