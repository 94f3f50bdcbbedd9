"""The off-policy agent base of the SAC family (SAC, DrQ, ERPv, Semore) and its training loop.

`OffPolicyAgent` writes once what every SAC-family agent shares: action scaling to [-1, 1], the
learned temperature (ERPv eq. 11), the target networks and their Polyak updates, the four
optimisers, `act`, the actor / alpha step with its two guidance hooks (ERPv's eq. 4 and eq. 7),
the checkpoint (save, load, load_weights) and the resume state. A subclass names its modules
(`_build`) and gives its critic step (`update_critic`); see pipeline.learn.agents.sac (SAC + DeepMDP)
and pipeline.learn.methods.semore. After SB3's BaseAlgorithm.save/load, where a subclass only names its
state dicts.

The one loop that trains them is pipeline.learn.agents.loop.train_off_policy.

Why one module of this length: it is the SAC family's whole shared base, so that a subclass reads
one file to know everything it inherits (the optimisers, the guidance hooks, save, load, resume).
"""

from __future__ import annotations

import copy
import math
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, ClassVar, Literal, NamedTuple, Self

import gymnasium as gym
import numpy as np
import torch
from pydantic import Field, ValidationError, model_validator
from torch import nn

from pipeline.core.config import Section, threads_field
from pipeline.learn.agents.augment import random_shift, shift, shift_offsets
from pipeline.learn.agents.checkpoint import (
    CheckpointError,
    load_module_tensors,
    module_tensors,
    read_checkpoint,
    read_meta,
    weights_path,
    write_checkpoint,
)


class NetworkParams(Section):
    """What the SAC-family networks read and how big they are (ERPv C.3, figures 8-11). The one
    definition: params.yaml's `<method>.network`, the agents and their checkpoints
    all use it. Defaults are the paper's values."""

    obs: Literal["pixels", "state"] = Field(
        default="pixels",
        description="Which entry of the env's {pixels, state} dict the agent reads.",
    )
    frame_stack: int = Field(
        default=3,
        ge=1,
        le=16,
        description="Stacked frames (C.5 / table 6: 3); states are not stacked.",
    )
    feature_dim: int = Field(default=50, ge=1, description="Latent s_t = V(o_t) (figure 8: 50).")
    hidden_dim: int = Field(
        default=1024, ge=1, description="Actor / Q head width (figures 9-10: 1024)."
    )
    encoder_layers: int = Field(default=4, ge=1, le=8, description="Conv layers (SAC-AE / RAD: 4).")
    encoder_filters: int = Field(default=32, ge=1, description="Conv filters (SAC-AE / RAD: 32).")
    encoder_stride: int = Field(
        default=1,
        ge=1,
        le=2,
        description="Stride of every conv layer after the first (SAC-AE / RAD: 1, the first has "
        "2). 2: each layer halves the map, the small encoder of the CPU pixel preset (64x64 -> "
        "3x3 maps after 4 layers: about 8x less conv work than SAC-AE's 35x35 at 84x84).",
    )
    transition_hidden_dim: int = Field(
        default=512, ge=1, description="T_D and the reward head's width (figure 11: 512)."
    )
    transition_learn_sigma: bool = Field(
        default=False,
        description="Learn the transition model's sigma (eq. 12 in full); figure 11: false "
        "(deterministic, sigma = 1).",
    )
    log_std_min: float = Field(
        default=-10.0, description="Actor log-std lower bound (SAC-AE: -10)."
    )
    log_std_max: float = Field(default=2.0, description="Actor log-std upper bound (SAC-AE: 2).")


class SACParams(Section):
    """The SAC family's settings (`sac`; ERPv table 6 where it gives a value, SAC-AE otherwise):
    the networks, SAC's optimisation and the off-policy loop. Every off-policy method's params
    extend it (`drq`, `erpv`, `semore` merge `<<: *sac` in params.yaml); agents take it and their
    checkpoints store it. Defaults are the paper's values."""

    network: NetworkParams = Field(
        default_factory=NetworkParams,
        description="What the networks read (state or pixels, stacked frames) and their sizes.",
    )
    batch_size: int = Field(default=128, ge=1, description="Batch size (table 6: 128).")
    gamma: float = Field(default=0.99, gt=0, le=1, description="Discount (SAC-AE: 0.99).")
    actor_lr: float = Field(default=1e-3, gt=0, description="Actor lr (table 6: 1e-3).")
    critic_lr: float = Field(
        default=1e-3, gt=0, description="Critic + visual encoder lr (table 6: 1e-3 each)."
    )
    alpha_lr: float = Field(default=1e-4, gt=0, description="Temperature lr (table 6: 1e-4).")
    model_lr: float = Field(
        default=1e-3, gt=0, description="Transition network + reward head lr (table 6: 1e-3)."
    )
    adam_betas: tuple[float, float] = Field(
        default=(0.9, 0.999), description="Adam betas (table 6: [0.9, 0.999])."
    )
    critic_tau: float = Field(
        default=0.01, ge=0, le=1, description="Polyak rate of the target Q heads (SAC-AE: 0.01)."
    )
    encoder_tau: float = Field(
        default=0.05, ge=0, le=1, description="Polyak rate of the target encoder (SAC-AE: 0.05)."
    )
    actor_update_freq: int = Field(
        default=2, ge=1, description="Critic updates per actor / alpha update (table 6: 2)."
    )
    target_update_freq: int = Field(
        default=2, ge=1, description="Updates per target update (table 6: 2)."
    )
    init_temperature: float = Field(default=0.1, gt=0, description="alpha_0 (table 6: 0.1).")
    aux_weight: float = Field(
        default=1.0,
        ge=0,
        description="DeepMDP transition + reward loss weight; 0 turns them off (plain SAC).",
    )
    start_steps: int = Field(
        default=1000, ge=0, description="Uniform random warm-up steps (table 6: 1000)."
    )
    update_every: int = Field(
        default=1, ge=1, description="Env steps between update bursts (1 update per step)."
    )
    offline_fraction: float = Field(
        default=0.0,
        ge=0,
        le=1,
        description="Share of each batch drawn from the prefilled labelled dataset.",
    )
    replay_capacity: int = Field(
        default=100_000, ge=1, description="Online replay capacity (transitions)."
    )
    log_every: int = Field(
        default=1000, ge=1, description="Agent steps per row of training metrics."
    )
    resume_every: int = Field(
        default=0,
        ge=0,
        description="Agent steps between resume states (taken at the next episode end, in the "
        "stage's resume directory): a killed run goes on from the last one, with the same final "
        "result. 0: none.",
    )
    save_training_state: bool = Field(
        default=False,
        description="Write the run's final training state (optimisers, the replay's online "
        "part) beside its checkpoint, as safetensors + JSON: what a labelling round resumes "
        "from (`rounds:`; set it in the run's overrides). Large for long pixel runs.",
    )
    eval_episodes: int = Field(
        default=1,
        ge=0,
        description="Deterministic episodes played in an env of their own at every metrics row "
        "(`eval_return`: a learning curve even when training episodes are long); 0: none.",
    )
    actor_encoder: Literal["shared", "own"] = Field(
        default="shared",
        exclude_if=lambda v: v == "shared",  # agents saved before it existed load as before
        description="What the actor reads: `shared`, the critic encoder's features, detached "
        "(SAC-AE, ERPv: only the critic shapes the encoder); `own`, a head of its own (FC + "
        "LayerNorm + tanh) over the critic's conv map, detached, trained by the actor's loss "
        "(DrQ's actor: convs tied, head its own; the default of `drq`). Pixels only.",
    )
    image_pad: int = Field(
        default=0,
        ge=0,
        description="Random-shift augmentation of every update's frames (DrQ: 4 pixels each way "
        "at 84x84; pipeline.learn.agents.augment); 0: none (SAC's and ERPv's setting in the papers). "
        "Pixels only.",
    )
    device: str = Field(
        default="auto",
        description="Where the networks, the replay's frames, the batches and the augmentation "
        "live: `auto` (cuda when torch sees a GPU, else cpu), `cpu`, `cuda`, `cuda:1`, ...",
    )
    compile: Literal["off", "default", "reduce-overhead", "max-autotune-no-cudagraphs"] = Field(
        default="off",
        description="torch.compile every network of the agent in this mode for training: "
        "`default` (Inductor's fused kernels), `reduce-overhead` (plus CUDA graphs: each update "
        "and each action is one graph iteration; on a CPU Inductor only), or off (eager). On an "
        "H200 at 84x84, batch 128, DrQ's update ran 148 updates/s with CUDA graphs against 101 "
        "eager, Inductor alone 0.95x of eager (benchmarks/results/pixels). An agent loaded for "
        "acting runs eagerly.",
    )
    threads: int = threads_field()

    @model_validator(mode="after")
    def _augment_pixels_only(self) -> Self:
        if self.image_pad and self.network.obs != "pixels":
            raise ValueError("image_pad shifts frames: set `network.obs: pixels` or image_pad: 0")
        if self.actor_encoder == "own" and self.network.obs != "pixels":
            raise ValueError(
                "actor_encoder: own gives the actor a head over the critic's conv map, which "
                "frames have: set `network.obs: pixels` or actor_encoder: shared"
            )
        if self.device != "auto":
            try:
                torch.device(self.device)
            except RuntimeError as exc:
                raise ValueError(f"device {self.device!r} is not a torch device: {exc}") from exc
        return self

    def torch_device(self) -> torch.device:
        """The device `device` names (`auto`: cuda when available)."""
        if self.device == "auto":
            return torch.device("cuda" if torch.cuda.is_available() else "cpu")
        return torch.device(self.device)


def _saved_config(config: Any, params_class: type[SACParams], compile_mode: str) -> SACParams:
    """A checkpoint's saved config typed as `params_class`, with the loading agent's `compile`
    (how the networks ran changes no weight). A setting added after the checkpoint was saved
    takes its default, which reproduces what the code did before it existed (as `compile` and
    `vpg_weight` do), so older checkpoints keep loading; `actor_encoder`, whose default differs
    by method (drq: own), is `shared` where the config has none (it is left out of dumps then)."""
    if not isinstance(config, dict):
        raise TypeError(f"config is a {type(config).__name__}, not a mapping")
    return params_class.model_validate(
        {"actor_encoder": "shared", **config, "compile": compile_mode}
    )


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


Tensors = dict[str, torch.Tensor]


class CriticStep(NamedTuple):
    """What one critic step hands the actor step: its metrics, the features of obs (detached:
    SAC-AE, no actor gradient into the encoder), the features of next_obs (no gradient), and,
    where the actor has a head of its own, the critic's conv map of obs (detached), which that
    head reads: DrQ-v2 encodes obs once for both steps."""

    metrics: Tensors
    h: torch.Tensor
    next_h: torch.Tensor
    obs_map: torch.Tensor | None = None


class OffPolicyAgent(ABC):
    """A SAC-family agent. `obs_shape` is one observation as the env gives it ((H, W, 3) frames or
    (D,) states); `act` takes the stacked input (`FrameStacker`), `update` a `ReplayBuffer` batch.

    A subclass sets `algorithm` (the method that trained it), `architecture` (the networks a
    deployment rebuilds: ERPv and DrQ deploy SAC's) and `params_class`, and implements:
    - `_build(action_dim)`: create `encoder`, `critic`, `actor` and its heads (under a seeded RNG),
      and `actor_head` where the actor has an encoder head of its own;
    - `_heads()`: the auxiliary modules trained by the model optimiser (may be empty);
    - `features(obs)`: the latent the critic reads, (B, F), and the actor unless
      `actor_features` says otherwise;
    - `update_critic(batch)`: one critic (+ encoder, + heads) step; returns a `CriticStep`: its
      metrics, the batch's features for the actor step (detached), the next observation's
      features and, for an actor head of its own, the conv map it reads.
    """

    algorithm: ClassVar[str]
    architecture: ClassVar[str]
    params_class: ClassVar[type[SACParams]]
    encoder: nn.Module
    critic: nn.Module
    actor: nn.Module
    actor_head: nn.Module | None = None  # the actor's own encoder head (`actor_encoder: own`)

    def __init__(
        self,
        obs_shape: tuple[int, ...],
        action_space: gym.spaces.Box,
        cfg: SACParams | None = None,
        *,
        device: torch.device | str | None = None,
        seed: int = 0,
    ) -> None:
        self.cfg = cfg = cfg if cfg is not None else self.params_class()
        self.device = cfg.torch_device() if device is None else torch.device(device)
        self.obs_shape = tuple(int(d) for d in obs_shape)
        self.input_shape = encoder_input_shape(cfg.network, self.obs_shape)
        self.scale = ActionScale(*box_bounds(action_space), self.device)
        action_dim = len(self.scale.low_np)
        self.target_entropy = -float(action_dim)  # eq. 11: H_bar = -|A|
        with torch.random.fork_rng(devices=[]):  # seeded init without touching the global RNG
            torch.manual_seed(seed)
            self._build(action_dim)
        self.encoder_target = copy.deepcopy(self.encoder)
        self.critic_target = copy.deepcopy(self.critic)
        for module in self._modules().values():
            module.to(self.device)
            if cfg.compile != "off":  # in place: the state dict keeps its keys (no _orig_mod.)
                module.compile(mode=cfg.compile)
        self.log_alpha = torch.tensor(
            math.log(cfg.init_temperature), device=self.device, requires_grad=True
        )
        betas = cfg.adam_betas
        self.critic_optimizer = adam(
            [*self.encoder.parameters(), *self.critic.parameters()], cfg.critic_lr, betas
        )
        heads = [p for module in self._heads().values() for p in module.parameters()]
        self.model_optimizer = adam(heads, cfg.model_lr, betas)
        actor = [*self.actor.parameters()]
        if self.actor_head is not None:
            actor += self.actor_head.parameters()
        self.actor_optimizer = adam(actor, cfg.actor_lr, betas)
        self.alpha_optimizer = adam([self.log_alpha], cfg.alpha_lr, betas)
        self.update_step = 0
        # the guidance's diagnostics (controls that cost forward passes: ERPv's gate for other
        # actions) are computed at the next actor step only; the training loop asks for them
        # again after each metrics row, so they cost one actor step per `log_every`
        self.diagnostics_due = True

    @classmethod
    def for_env(cls, env: gym.Env, cfg: SACParams | None = None, **kwargs: Any) -> Self:
        """Built from an env of the pipeline's observation contract (pipeline.core.envs.make_env)."""
        cfg = cfg if cfg is not None else cls.params_class()
        return cls(env_obs_shape(env, cfg.network), env.action_space, cfg, **kwargs)

    # --- what a subclass gives ----------------------------------------------------------------

    @abstractmethod
    def _build(self, action_dim: int) -> None:
        """Create `encoder`, `critic`, `actor` and the heads of `_heads()` (RNG already seeded)."""

    @abstractmethod
    def _heads(self) -> dict[str, nn.Module]:
        """The auxiliary modules the model optimiser trains, by a stable name, in a fixed order."""

    @abstractmethod
    def features(self, obs: torch.Tensor) -> torch.Tensor:
        """Stacked observations (B, *input_shape) -> the critic's latent, (B, F)."""

    def actor_features(
        self,
        obs: torch.Tensor,
        h: torch.Tensor | None = None,
        obs_map: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """The latent the actor reads for `obs`, (B, F); `h` (and `obs_map`): the critic's
        features (and conv map) of `obs` where already computed. Here they are the critic's
        (SAC-AE); an agent whose actor has a head of its own (`actor_head`) overrides this."""
        return self.features(obs) if h is None else h

    @abstractmethod
    def update_critic(self, batch: Tensors) -> CriticStep:
        """One critic step on a batch on the device (see `CriticStep`)."""

    # --- shared --------------------------------------------------------------------------------

    def _modules(self) -> dict[str, nn.Module]:
        """Every network whose weights the training changes, by a stable name."""
        return {
            "encoder": self.encoder,
            "critic": self.critic,
            "encoder_target": self.encoder_target,
            "critic_target": self.critic_target,
            "actor": self.actor,
            **({} if self.actor_head is None else {"actor_head": self.actor_head}),
            **self._heads(),
        }

    def _optimizers(self) -> dict[str, torch.optim.Optimizer]:
        return {
            "critic": self.critic_optimizer,
            "model": self.model_optimizer,
            "actor": self.actor_optimizer,
            "alpha": self.alpha_optimizer,
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
        self._graph_step()
        action, _, _ = self.actor(self.actor_features(x.unsqueeze(0)), deterministic)
        return self.scale.unnormalise(action)[0].cpu().numpy()

    def update(self, batch: Tensors) -> dict[str, float]:
        """One gradient step of the critic (and what trains with it); every `actor_update_freq`
        steps the actor and alpha; every `target_update_freq` steps the targets. Returns float
        metrics."""
        self.update_step += 1
        self._graph_step()
        b = {k: v.to(self.device, non_blocking=True) for k, v in batch.items()}
        if self.cfg.image_pad:
            b = self.augment(b)
        step = self.update_critic(b)
        metrics = step.metrics
        if self.update_step % self.cfg.actor_update_freq == 0:
            # DrQ-v2: the actor reuses this step's features (and conv map), detached (SAC-AE: no
            # actor gradient into the encoder)
            metrics |= self.update_actor_and_alpha(step.h, step.next_h, b, step.obs_map)
        if self.update_step % self.cfg.target_update_freq == 0:
            soft_update(self.critic_target, self.critic, self.cfg.critic_tau)
            soft_update(self.encoder_target, self.encoder, self.cfg.encoder_tau)
        values = torch.stack([v.detach().float() for v in metrics.values()]).tolist()  # one sync
        return dict(zip(metrics, values, strict=True))

    def _graph_step(self) -> None:
        """Start one CUDA-graph-trees iteration (`compile: reduce-overhead`): an update, or an
        action. Left to themselves, the trees start an iteration at any compiled call with no
        backward pending and free the last one's outputs: the actor's step (after the critic's
        backward) would find the critic step's encoder features overwritten ("accessing tensor
        output of CUDAGraphs that has been overwritten", seen on an H200). What an iteration
        returns is read before the next begins (metrics as floats, actions as numpy)."""
        if self.cfg.compile == "reduce-overhead":
            torch.compiler.cudagraph_mark_step_begin()

    def augment(self, batch: Tensors) -> Tensors:
        """DrQ's random shift (`image_pad` pixels): obs and next_obs each by their own offset per
        row (K = M = 1, as DrQ-v2), o_t's mask map (Semore) by o_t's. What the guidance reads of
        the frames (ERPv's C_V) sees them shifted too."""
        pad = self.cfg.image_pad
        offsets = shift_offsets(len(batch["obs"]), pad, self.device)
        out = dict(batch, obs=shift(batch["obs"], offsets, pad))
        out["next_obs"] = random_shift(batch["next_obs"], pad)
        if "mask" in batch:
            out["mask"] = shift(batch["mask"], offsets, pad)
        return out

    def update_actor_and_alpha(
        self,
        h: torch.Tensor,
        next_h: torch.Tensor,
        batch: Tensors,
        obs_map: torch.Tensor | None = None,
    ) -> Tensors:
        pi, log_pi, mean = self.actor(self.actor_features(batch["obs"], h, obs_map))  # a_r ~ pi
        with frozen(self.critic):
            q_pi = self.critic.q_min(h, pi)  # (B,)
            actor_loss = (self.alpha.detach() * log_pi - q_pi).mean()  # eq. 10: L_pi
            diagnose, self.diagnostics_due = self.diagnostics_due, False
            guidance, metrics = self.policy_guidance(
                h, pi, q_pi, batch, mean=mean, diagnose=diagnose
            )
            self.actor_optimizer.zero_grad(set_to_none=True)
            (actor_loss if guidance is None else actor_loss + guidance).backward()  # eq. 4
        self.actor_optimizer.step()
        if guidance is not None:  # how much of the actor's loss the guidance is
            metrics["guidance/ratio"] = (
                guidance.detach().abs() / actor_loss.detach().abs().clamp_min(1e-8)
            )

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
        batch: Tensors,
        *,
        mean: torch.Tensor | None = None,
        diagnose: bool = True,
    ) -> tuple[torch.Tensor | None, Tensors]:
        """Extra actor loss (ERPv: lambda_1 L_V, eq. 4). Plain SAC: none. `mean`: the actor's
        mean action on the batch's rows, (B, A). `diagnose`: also compute the diagnostics that
        cost extra forward passes (no effect on the loss)."""
        return None, {}

    def entropy_regulariser(
        self, h: torch.Tensor, next_h: torch.Tensor, batch: Tensors
    ) -> tuple[torch.Tensor | None, Tensors]:
        """Extra alpha loss (ERPv: lambda_2 E[(alpha - alpha_bar)^2], eq. 7). Plain SAC: none."""
        return None, {}

    # --- resume state --------------------------------------------------------------------------

    def training_state(self) -> dict[str, Any]:
        """Everything an interrupted training needs to go on exactly: networks and targets,
        optimiser states, log_alpha, the update counter."""
        return {
            "modules": {name: m.state_dict() for name, m in self._modules().items()},
            "optimizers": {name: o.state_dict() for name, o in self._optimizers().items()},
            "log_alpha": self.log_alpha.detach().clone(),
            "update_step": self.update_step,
            "diagnostics_due": self.diagnostics_due,
        }

    def load_training_state(self, state: dict[str, Any]) -> None:
        for name, module in self._modules().items():
            module.load_state_dict(state["modules"][name])
        for name, optimizer in self._optimizers().items():
            optimizer.load_state_dict(state["optimizers"][name])
        with torch.no_grad():
            self.log_alpha.copy_(state["log_alpha"])  # in place: the optimiser holds this tensor
        self.update_step = int(state["update_step"])
        self.diagnostics_due = bool(state.get("diagnostics_due", True))

    # --- checkpoints (pipeline.learn.agents.checkpoint's layout) -------------------------------------

    def checkpoint_meta(self) -> dict[str, Any]:
        """What `load` needs to rebuild this agent: its config, shapes and action bounds."""
        return {
            "architecture": self.architecture,
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
        if meta.get("architecture") != self.architecture:
            raise CheckpointError(
                f"{path}: a {meta.get('architecture')!r} checkpoint, not {self.architecture}'s"
            )
        try:
            saved = _saved_config(meta["config"], type(self.cfg), self.cfg.compile)
        except (ValidationError, TypeError) as exc:
            raise CheckpointError(
                f"{path}: its agent.json config is not {type(self.cfg).__name__}'s ({exc}); "
                "restore it with `dvc checkout` or retrain it (`dvc repro`)"
            ) from None
        if saved != self.cfg or meta["obs_shape"] != list(self.obs_shape):
            raise CheckpointError(
                f"{path}: saved with another config or observation shape than this agent"
            )
        load_module_tensors(
            self._modules(), tensors, weights_path(path),
            others={"log_alpha": self.log_alpha.detach().reshape(1)},
        )  # fmt: skip
        with torch.no_grad():
            self.log_alpha.copy_(tensors["log_alpha"][0])
        self.update_step = int(meta["update_step"])

    @classmethod
    def load(
        cls,
        path: str | Path,
        device: torch.device | str = "cpu",
        params_class: type[SACParams] | None = None,
    ) -> Self:
        """A saved agent of this architecture, for acting; `params_class` types the saved config
        (default: this class's; ERPv's and DrQ's settings come back on SAC's networks)."""
        meta = read_meta(path)
        if meta.get("architecture") != cls.architecture:
            raise CheckpointError(
                f"{path}: a {meta.get('architecture')!r} checkpoint (algorithm "
                f"{meta.get('algorithm')!r}), not {cls.architecture}'s"
            )
        space = gym.spaces.Box(
            np.asarray(meta["action_low"], np.float32),
            np.asarray(meta["action_high"], np.float32),
        )
        if params_class is None and meta.get("algorithm") != cls.algorithm:
            raise CheckpointError(
                f"{path}: saved by {meta.get('algorithm')!r}, whose settings {cls.__name__} cannot "
                f"type; load it with pipeline.learn.methods.table.load_agent (or pass params_class)"
            )
        # for acting, eagerly: compiling is a training setting (Inductor needs a C++ compiler)
        cfg = _saved_config(meta["config"], params_class or cls.params_class, "off")
        agent = cls(tuple(meta["obs_shape"]), space, cfg, device=device)
        agent.load_weights(path)
        return agent
