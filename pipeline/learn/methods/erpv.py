"""Method `erpv` (seed 002): SAC + DeepMDP guided by partially reliable VLM actions, the dataset's
cached action labels a_v (the agent never calls a VLM), with the frozen VLM critic C_V; the agent
and the method in one module. Deployed agents are SAC's networks: C_V guides training only.

- VPG, Value-aware Policy Guidance (sec. 3.3, eq. 3-4): a frozen, pre-trained VLM critic C_V
  scores the VLM action, Q_v = C_V(s, a_v); the agent's critic scores its own sampled action,
  Q_r = C_R(s, a_r); both are min-max scaled over the batch; the gate Q_f = max(0, Q_v - Q_r)
  weights an imitation term L_V added to the actor loss with weight lambda_1.
- VER, VLM-guided Entropy Regularisation (sec. 3.4, eq. 5-7, appendix B eq. 14): the action
  confidence G = 1 / L_T(s_{t+1}, T(s_t, a_v)) from the agent's transition model; the temperature
  is pulled towards alpha_bar = sigmoid(G) with weight lambda_2.
- Both apply to the rows of a batch that carry a label (`has_label`); other rows train plain SAC.
- C_V is pre-trained offline (pipeline.learn.critic, stage `pretrain_critic@<env>`, appendix D.1) by
  TD on RAE rollouts, then frozen: target r + gamma (1 - done) C_V~(s', a_v(s')), a_v(s') the
  cached label at the next state, i.e. Q of the VLM policy, evaluated without calling the VLM.

Which transition model G uses. Algorithm 1 updates T(.) every step "referred to DeepMDP", and C.3
says "we freeze the transition network (including V(.) and T_D(.)) when calculating the output of
the VER": the transition model is the agent's own, trained online with the critic (pipeline.learn.agents
.sac), and "frozen" means no gradient flows from eq. 7 into it. So nothing but C_V is pre-trained.

Paper ambiguities, resolved here:
- eq. 3 writes Q_f outside the batch mean; Q_f is per sample (step 4 of sec. 3.3), so
  L_V = mean_i Q_f,i ||a_v,i - a_r,i||^2, the squared L2 distance over action dimensions, and Q_f
  is a gate (no gradient flows through it), as "constraint factor" says.
- min-max scaling: the text does not say over what. Default (`gate_scaling: per_critic`): Q_v and
  Q_r separately, each over the labelled rows of the batch; `joint` (one min and max over both)
  and `none` (no gate: table 3's M2) are the alternatives. Every actor step logs the gate's open
  rate and mean Q_f for a_v; the first actor step of each metrics row (`log_every`) also logs them,
  on the same rows, for an all-zero a_v and the agent's own action (two more C_V passes, which
  every step would pay: 3 C_V passes an actor step instead of 1).
- eq. 14: G = 1 / L_T with eq. 12's L_T per row (mean over latent features). With a learned sigma
  L_T can be <= 0 (log sigma < 0); the denominator is floored at `confidence_eps`, so G saturates
  at 1 / eps and alpha_bar at 1. With figure 11's deterministic T (the default) L_T is the mean
  squared error and G > 0.
- lambda_1 = 10 (sec. 4.1) is not scale-free: L_pi = alpha log pi - Q grows with the reward scale
  while L_V is a gated squared distance in [0, 4 |A|]. On cartpole-swingup (Q in the hundreds)
  |lambda_1 L_V| is 0.1-0.4 % of |L_pi| and no teacher moves the agent; on MountainCarContinuous
  it is about 30 % (docs/results/2026-11-27-teacher-knowledge.md). Default (`vpg_weight: fixed`):
  eq. 4 as printed; `q_scaled` weighs L_V by lambda_1 * mean |Q_r| over the labelled rows (no
  gradient), so lambda_1 means the same on every reward scale (a deviation, as an option).
- eq. 3's a_r is the agent's action, a sample of pi (as in L_pi): E||a_v - a_r||^2 is the mean's
  distance plus the sample's variance, so L_V also pulls the policy's spread down, whatever the
  labels (measured on P2's resume states: docs/results/2026-12-07-frames-cartpole-alpha-path.md).
  Default (`vpg_action: sampled`): as printed; `mean`: eq. 3 on the actor's mean action, which
  moves the mean alone (a control for that pull, not the paper's).
- sec. 3.4 says a lower G should raise the entropy, yet alpha_bar = sigmoid(G) grows with G (and
  is always > 0.5 since G > 0). Default (`ver_target: printed`): the equation as printed;
  `text`: alpha_bar = sigmoid(-G). `ver/alpha_target` is logged so that the effect is visible.

Why one module of this length: a method is one module (the method table imports it alone, and
train@<run> depends on its own method's module only); the paper's ambiguities and their
resolutions are written below, beside the code.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal, Self

import gymnasium as gym
import numpy as np
import torch
from pydantic import Field, model_validator
from torch import nn

from pipeline.core.config import ConfigError, Params, TrainRun, merge_settings, validate_section
from pipeline.learn.agents.checkpoint import (
    CheckpointError,
    load_module,
    read_checkpoint,
    weights_path,
    write_checkpoint,
)
from pipeline.learn.agents.networks import Critic, make_encoder, transition_nll
from pipeline.learn.agents.off_policy import (
    NetworkParams,
    OffPolicyAgent,
    SACParams,
    encoder_input_shape,
)
from pipeline.learn.agents.sac import SACAgent
from pipeline.learn.methods.base import TrainError, TrainInputs
from pipeline.learn.methods.off_policy import OffPolicyMethod


class ERPvParams(SACParams):
    """ERPv (`erpv`): the SAC settings plus VPG (eq. 3-4) and VER (eq. 5-7)."""

    lambda_1: float = Field(default=10.0, ge=0, description="VPG weight in eq. 4 (sec. 4.1: 10).")
    lambda_2: float = Field(
        default=10.0, ge=0, description="VER weight in eq. 7 (sec. 4.1: 10); 0 turns VER off."
    )
    confidence_eps: float = Field(
        default=1e-6, gt=0, description="Floor of eq. 14's denominator (L_T): keeps G finite."
    )
    gate_scaling: Literal["per_critic", "joint", "none", "random", "mean"] = Field(
        default="per_critic",
        description="How sec. 3.3 step 3 scales Q_v and Q_r before the gate Q_f = max(0, Q_v - "
        "Q_r): `per_critic` min-max scales each over the labelled rows (our reading of the text; "
        "it compares ranks under two critics, not a_v with a_r); `joint` uses one min and max over "
        "both critics' values; `none` drops the gate, Q_f = 1 (table 3's M2, w/o Q_f). Controls: "
        "`random`, Q_f ~ U[0, 1] per row (the paper's RSF baseline, 'Q_f randomly generated'); "
        "`mean`, every row weighed by the batch mean of the per_critic gate (its total weight "
        "without its selection).",
    )
    vpg_weight: Literal["fixed", "q_scaled"] = Field(
        default="fixed",
        description="The weight of L_V in eq. 4: `fixed` lambda_1 (as printed); `q_scaled` "
        "lambda_1 * mean |Q_r| over the labelled rows (no gradient), so that lambda_1 is "
        "relative to the actor loss -Q on any reward scale (not the paper's; see the module doc).",
    )
    vpg_action: Literal["sampled", "mean"] = Field(
        default="sampled",
        exclude_if=lambda v: v == "sampled",  # runs without it fingerprint as before
        description="Which action of the agent eq. 3 pulls towards a_v: `sampled`, a_r ~ pi "
        "(as printed; its squared distance holds the sample's variance, so L_V also pulls the "
        "policy's spread down); `mean`, the actor's mean action tanh(mu), which moves the mean "
        "alone. The gate's Q_r is C_R(s, a_r) of the sample either way (not the paper's; a "
        "control for the variance term, see the module doc).",
    )
    ver_target: Literal["printed", "text"] = Field(
        default="printed",
        description="VER's target temperature from the confidence G: `printed` alpha_bar = "
        "sigmoid(G) (eq. 7 as printed: > 0.5, grows with G); `text` alpha_bar = sigmoid(-G) (sec. "
        "3.4's words: lower confidence, more entropy).",
    )
    critic_variant: str | None = Field(
        default=None,
        exclude_if=lambda v: v is None,  # runs without one fingerprint as before
        description="Which C_V of the run's env it reads: null, the env's own (`critic.overrides`"
        "); a name, that C_V of `critic.variants.<env>` (e.g. a pixel run beside a state run).",
    )

    @model_validator(mode="after")
    def _actor_reads_the_critics_features(self) -> Self:
        if self.actor_encoder != "shared":
            raise ValueError(
                "ERPv's actor reads the critic encoder's features (its SAC + DeepMDP, C.3: the "
                "visual encoders share parameters): actor_encoder must be shared"
            )
        return self


def minmax_scale(q: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """Min-max normalisation over the batch (sec. 3.3 step 3, Patro & Sahu 2015):
    q' = (q - min q) / (max q - min q), in [0, 1]. A constant batch (span <= eps) maps to 0: no
    spread, no evidence that any action is better."""
    lo, hi = q.min(), q.max()
    return (q - lo) / (hi - lo).clamp_min(eps)


GateScaling = Literal["per_critic", "joint", "none", "random", "mean"]


def vpg_gate(q_v: torch.Tensor, q_r: torch.Tensor, scaling: GateScaling) -> torch.Tensor:
    """Q_f = max(0, scale(Q_v) - scale(Q_r)) (sec. 3.3 steps 3-4), (N,), without gradient.
    `per_critic`: each of Q_v, Q_r min-max scaled over the rows on its own; `joint`: both by one
    min and max over the two critics' values, so Q_f > 0 exactly where Q_v > Q_r; `none`: no gate,
    Q_f = 1 (table 3's M2); `random`: Q_f ~ U[0, 1] (RSF, sec. 4.1's control, from torch's RNG);
    `mean`: the per_critic gate's batch mean on every row (its weight, not its selection)."""
    if scaling == "none":
        return torch.ones_like(q_v)
    if scaling == "random":
        return torch.rand_like(q_v)
    if scaling == "mean":
        return vpg_gate(q_v, q_r, "per_critic").mean().expand_as(q_v).clone()
    if scaling == "joint":
        lo = torch.minimum(q_v.min(), q_r.min())
        span = (torch.maximum(q_v.max(), q_r.max()) - lo).clamp_min(1e-8)
        diff = (q_v - q_r) / span
    else:
        diff = minmax_scale(q_v) - minmax_scale(q_r)
    return diff.clamp_min(0.0).detach()


def vpg_loss(
    q_v: torch.Tensor,
    q_r: torch.Tensor,
    a_v: torch.Tensor,
    a_r: torch.Tensor,
    scaling: GateScaling = "per_critic",
) -> tuple[torch.Tensor, torch.Tensor]:
    """ERPv eq. 3 over labelled rows: (L_V, Q_f). q_v, q_r (N,); a_v, a_r (N, A) in [-1, 1].
    L_V = mean_i Q_f,i ||a_v,i - a_r,i||^2, Q_f the gate of `vpg_gate`."""
    q_f = vpg_gate(q_v, q_r, scaling)  # (N,)
    return (q_f * (a_v - a_r).pow(2).sum(-1)).mean(), q_f


def action_confidence(
    next_h: torch.Tensor, mu_v: torch.Tensor, sigma_v: torch.Tensor, eps: float
) -> torch.Tensor:
    """ERPv eq. 14 (eq. 6 with the real s_{t+1}): G = 1 / L_T(s_{t+1}, mu~, sigma~), (N,), where
    (mu~, sigma~) = T(s_t, a_v); L_T is eq. 12 per row, floored at eps."""
    return 1.0 / transition_nll(next_h, mu_v, sigma_v).clamp_min(eps)


def ver_target(g: torch.Tensor, reading: Literal["printed", "text"] = "printed") -> torch.Tensor:
    """alpha_bar from G (N,): sigmoid(G) as eq. 7 prints it, or sigmoid(-G) as sec. 3.4 reads
    (a lower confidence, a higher temperature)."""
    return torch.sigmoid(g if reading == "printed" else -g)


def ver_regulariser(
    alpha: torch.Tensor, g: torch.Tensor, reading: Literal["printed", "text"] = "printed"
) -> torch.Tensor:
    """eq. 7's second term without its weight: mean over rows of (alpha - alpha_bar)^2."""
    return (alpha - ver_target(g, reading).detach()).pow(2).mean()


class VLMCritic(nn.Module):
    """C_V (C.3: a visual encoder and two Q heads, the structure of C_R; clipped double Q).
    `forward(obs, action)` takes the stacked observation and an action in [-1, 1]^A."""

    def __init__(
        self,
        obs_shape: tuple[int, ...],
        action_low: np.ndarray,
        action_high: np.ndarray,
        network: NetworkParams,
        data_hashes: dict[str, str] | None = None,
    ) -> None:
        super().__init__()
        self.obs_shape = tuple(int(d) for d in obs_shape)
        self.network = network
        self.input_shape = encoder_input_shape(network, self.obs_shape)
        self.action_low = np.asarray(action_low, np.float32).ravel()
        self.action_high = np.asarray(action_high, np.float32).ravel()
        self.data_hashes = dict(data_hashes or {})
        self.encoder = make_encoder(
            network.obs, self.input_shape, feature_dim=network.feature_dim,
            num_layers=network.encoder_layers, num_filters=network.encoder_filters,
            stride=network.encoder_stride,
        )  # fmt: skip
        self.critic = Critic(network.feature_dim, len(self.action_low), network.hidden_dim)

    def heads(self, obs: torch.Tensor, action: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.critic(self.encoder(obs), action)

    def forward(self, obs: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        return torch.min(*self.heads(obs, action))  # (B,)

    def freeze(self) -> VLMCritic:
        """C_V "remains fixed during training" (sec. 3.3): no gradients, eval mode."""
        self.requires_grad_(False)
        return self.eval()

    def save(self, path: str | Path, data_hashes: dict[str, str] | None = None) -> None:
        """The agents' checkpoint layout (pipeline.learn.agents.checkpoint), architecture `vlm_critic`;
        `data_hashes` (the dataset's sha256) are recorded and come back as `.data_hashes`."""
        if data_hashes is not None:
            self.data_hashes = dict(data_hashes)
        tensors = {k: v.detach().contiguous().cpu() for k, v in self.state_dict().items()}
        meta = {
            "architecture": "vlm_critic",
            "network": self.network.model_dump(mode="json"),
            "obs_shape": list(self.obs_shape),
            "action_low": self.action_low.tolist(),
            "action_high": self.action_high.tolist(),
            "data_hashes": self.data_hashes,
        }
        write_checkpoint(path, tensors, meta)

    @classmethod
    def load(cls, path: str | Path, device: torch.device | str = "cpu") -> VLMCritic:
        """A frozen C_V from `save`."""
        meta, tensors = read_checkpoint(path)
        if meta.get("architecture") != "vlm_critic":
            raise CheckpointError(
                f"{path}: a {meta.get('architecture')!r} checkpoint, not a VLM critic (C_V)"
            )
        critic = cls(
            tuple(meta["obs_shape"]), np.asarray(meta["action_low"]),
            np.asarray(meta["action_high"]), NetworkParams.model_validate(meta["network"]),
            meta["data_hashes"],
        )  # fmt: skip
        load_module(critic, tensors, weights_path(path))
        return critic.to(device).freeze()


class ERPvAgent(SACAgent):
    """SACAgent + VPG (eq. 3-4) + VER (eq. 5-7), with a frozen pre-trained `vlm_critic` (C_V).
    Checkpoints (`save`) hold the SAC networks and the ERPv settings, not C_V (saved by its own
    stage); `SACAgent.load` restores them for acting."""

    algorithm = "erpv"
    params_class = ERPvParams
    cfg: ERPvParams

    def __init__(
        self,
        obs_shape: tuple[int, ...],
        action_space: gym.spaces.Box,
        cfg: ERPvParams | None,
        vlm_critic: VLMCritic,
        *,
        device: torch.device | str | None = None,
        seed: int = 0,
    ) -> None:
        super().__init__(obs_shape, action_space, cfg, device=device, seed=seed)
        if (
            vlm_critic.input_shape != self.input_shape
            or vlm_critic.network.obs != self.cfg.network.obs
        ):
            raise ValueError(
                f"the VLM critic reads {vlm_critic.network.obs} input {vlm_critic.input_shape}, "
                f"the agent {self.cfg.network.obs} input {self.input_shape}"
            )
        if not (
            np.allclose(vlm_critic.action_low, self.scale.low_np)
            and np.allclose(vlm_critic.action_high, self.scale.high_np)
        ):
            raise ValueError(
                f"the VLM critic was trained for actions in [{vlm_critic.action_low}, "
                f"{vlm_critic.action_high}], the agent acts in [{self.scale.low_np}, {self.scale.high_np}]"
            )
        self.vlm_critic = vlm_critic.to(self.device).freeze()

    def _labelled_a_v(
        self, batch: dict[str, torch.Tensor]
    ) -> tuple[torch.Tensor, torch.Tensor] | None:
        mask = batch["has_label"]
        if not bool(mask.any()):
            return None
        return mask, self.scale.normalise(batch["a_v"][mask]).clamp(-1.0, 1.0)

    def policy_guidance(
        self,
        h: torch.Tensor,
        pi: torch.Tensor,
        q_pi: torch.Tensor,
        batch: dict[str, torch.Tensor],
        *,
        mean: torch.Tensor | None = None,
        diagnose: bool = True,
    ) -> tuple[torch.Tensor | None, dict[str, torch.Tensor]]:
        labelled = self._labelled_a_v(batch)
        if labelled is None:
            return None, {}
        mask, a_v = labelled
        a_r = pi[mask]
        if self.cfg.vpg_action == "mean":  # eq. 3 on tanh(mu): no pull on the spread
            if mean is None:
                raise ValueError("vpg_action 'mean' needs the actor's mean action (`mean=`)")
            pulled = mean[mask]
        else:
            pulled = a_r
        q_r = q_pi[mask].detach()  # Q_r = C_R(o, a_r), a_r ~ pi, (N,)
        scaling = self.cfg.gate_scaling
        obs = batch["obs"][mask]
        with torch.no_grad():
            q_v = self.vlm_critic(obs, a_v)  # Q_v = C_V(o, a_v), (N,)
            # the same gate for two controls on the same rows: an all-zero a_v (the Worst
            # Model) and the agent's own action; a gate that tells a_v from these carries the
            # teacher's knowledge, one that opens as often for them does not (diagnostics only:
            # at the metrics interval)
            controls = {"zeros": torch.zeros_like(a_v), "own": a_r.detach()} if diagnose else {}
            gates = {
                name: vpg_gate(self.vlm_critic(obs, a), q_r, scaling)
                for name, a in controls.items()
            }
        l_v, q_f = vpg_loss(q_v, q_r, a_v, pulled, scaling)  # eq. 3
        weight = torch.tensor(self.cfg.lambda_1)
        if self.cfg.vpg_weight == "q_scaled":
            weight = weight * q_r.abs().mean()  # q_r carries no gradient
        guidance = weight * l_v  # eq. 4: L_pi + lambda_1 L_V
        metrics = {
            "vpg/weight": weight.detach(),
            "vpg/loss": l_v.detach(),
            "vpg/q_f": q_f.mean(),
            "vpg/gate_open": (q_f > 0).float().mean(),
            "vpg/q_v_minus_q_r": (q_v - q_r).mean(),
            "vpg/dist_pi_a_v": (a_v - a_r.detach()).pow(2).sum(-1).mean(),
            "labelled_fraction": mask.float().mean(),
        }
        for name, gate in gates.items():
            metrics[f"vpg/{name}/q_f"] = gate.mean()
            metrics[f"vpg/{name}/gate_open"] = (gate > 0).float().mean()
        return guidance, metrics

    def entropy_regulariser(
        self, h: torch.Tensor, next_h: torch.Tensor, batch: dict[str, torch.Tensor]
    ) -> tuple[torch.Tensor | None, dict[str, torch.Tensor]]:
        labelled = self._labelled_a_v(batch)
        if labelled is None:
            return None, {}
        mask, a_v = labelled
        with torch.no_grad():  # C.3: T (encoder and T_D) frozen for VER
            mu_v, sigma_v = self.transition(h[mask].detach(), a_v)  # P(s~_{t+1} | s_t, a_v)
            g = action_confidence(next_h[mask], mu_v, sigma_v, self.cfg.confidence_eps)  # eq. 14
        regulariser = ver_regulariser(self.alpha, g, self.cfg.ver_target)
        metrics = {
            "ver/G": g.mean(),
            "ver/alpha_target": ver_target(g, self.cfg.ver_target).mean(),
            "ver/loss": regulariser.detach(),
        }
        return self.cfg.lambda_2 * regulariser, metrics  # eq. 7


# --- the method -------------------------------------------------------------------------------


NO_CRITIC = "no_critic.json"  # pretrain_critic's output for an env without C_V


class ERPv(OffPolicyMethod):
    name = "erpv"
    params_class = ERPvParams
    labels = ("action",)
    teacher_tasks = ("action",)  # a_v, and C_V's training data
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
        if (critic_dir(inputs.critics / run.env) / NO_CRITIC).exists():
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


# The `erpv` keys that C_V's pre-training reads (pretrain_vlm_critic, the device, the stage's CPU
# threads), and no other:
# dvc.yaml's pretrain_critic stage lists them as its params (tests/learn/test_erpv.py checks both).
CRITIC_KEYS = (
    "network", "batch_size", "gamma", "critic_lr", "adam_betas", "target_update_freq",
    "critic_tau", "encoder_tau", "device", "threads",
)  # fmt: skip


VARIANTS = "variants"  # models/critic/<env>/erpv/variants/<name>/: the env's further C_V


def critic_dir(env_dir: Path, variant: str | None = None) -> Path:
    """Where the C_V `variant` of an env lies in pretrain_critic's output for it, `env_dir`
    (models/critic/<env>): erpv/ for the env's own (None), erpv/variants/<name>/ for a variant.
    Every other method of the table has a folder beside erpv/ holding a marker
    (`pipeline.learn.critic.write_critic_markers`), so that train@<run> depends on
    models/critic/<env>/<its method> alone: a retrained C_V reruns the env's erpv runs, not its
    PPO or Semore ones."""
    own = env_dir / METHOD.name
    return own if variant is None else own / VARIANTS / variant


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


def critic_spec(params: Params, env_id: str) -> dict[str, Any]:
    """What decides `env_id`'s C_V, resolved, and nothing of another env's: whether it is
    listed in `critic.envs`, the TD steps and seed, the CRITIC_KEYS of its settings (`erpv`'s
    with its overrides) and of each of its variants. The DVC gate writes it per env
    (data/critics/<env>.json) and pretrain_critic@<env> depends on that file instead of the
    `critic` section: adding an env to critic.envs trains that env's C_V alone. Call after
    check_params."""
    critic = params.critic
    if critic is None or env_id not in critic.envs:
        return {"env": env_id, "critic": None}

    def keys(hp: ERPvParams) -> dict[str, Any]:
        dumped = hp.model_dump(mode="json")
        return {key: dumped[key] for key in CRITIC_KEYS}

    return {
        "env": env_id,
        "critic": {"steps": critic.steps, "seed": critic.seed},
        "hyper_params": keys(critic_params(params, env_id)),
        VARIANTS: {
            name: keys(critic_params(params, env_id, name))
            for name in sorted(critic.variants.get(env_id, {}))
        },
    }


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
