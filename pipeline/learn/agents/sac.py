"""SAC + DeepMDP on pixels or states: the base agent of ERPv (seed 002, sec. 3.1, appendix B
eq. 8-13, C.3, table 6), after SAC-AE (Yarats et al. 2019) and the DeepMDP agent of the DBC code
base (Zhang et al. 2021) whose networks ERPv's figures 8-11 print.

- Clipped double Q with target networks (Polyak averaging; the encoder has its own rate, SAC-AE).
- Learned temperature alpha with target entropy -|A| (eq. 11).
- One visual encoder V(.), owned by the critic; the actor reads its features detached (SAC-AE):
  only the critic's TD loss and the DeepMDP auxiliary losses shape it. C.3: "the above visual
  encoders share parameters during visual RL training". With `actor_encoder: own` (DrQ's actor,
  drq's default) the actor has its own FC + LayerNorm + tanh head over the critic's conv map,
  detached: the convs are tied, the head is trained by the actor's loss.
- DeepMDP auxiliary task trained with the critic (Algorithm 1): transition model T_D predicts the
  next latent (eq. 12-13), a reward head predicts r from the predicted latent.

Actions: the networks work in [-1, 1]^A; the agent maps to and from the env's Box bounds, and the
replay buffer stores env units (the dataset's units). What every SAC-family agent shares (act,
alpha, targets, optimisers, checkpoints, resume state) is pipeline.learn.agents.off_policy's.

ERPv's guidance (pipeline.learn.methods.erpv) plugs into the base's two hooks: `policy_guidance`
(eq. 4) and `entropy_regulariser` (eq. 7); here both add nothing.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from pipeline.learn.agents.networks import (
    Actor,
    Critic,
    PixelEncoder,
    ProjectionHead,
    RewardModel,
    TransitionModel,
    make_encoder,
    transition_nll,
)
from pipeline.learn.agents.off_policy import CriticStep, OffPolicyAgent, SACParams, Tensors


class SACAgent(OffPolicyAgent):
    """SAC + DeepMDP. With `aux_weight: 0` it is plain SAC."""

    algorithm = "sac"
    architecture = "sac"  # SAC, DrQ and ERPv: the same networks at deployment
    params_class = SACParams

    def _build(self, action_dim: int) -> None:
        net = self.cfg.network
        self.encoder = make_encoder(
            net.obs, self.input_shape, feature_dim=net.feature_dim,
            num_layers=net.encoder_layers, num_filters=net.encoder_filters,
            stride=net.encoder_stride,
        )  # fmt: skip
        self.critic = Critic(net.feature_dim, action_dim, net.hidden_dim)
        self.actor = Actor(
            net.feature_dim, action_dim, net.hidden_dim, net.log_std_min, net.log_std_max
        )
        self.transition = TransitionModel(
            net.feature_dim, action_dim, net.transition_hidden_dim, net.transition_learn_sigma
        )
        self.reward_model = RewardModel(net.feature_dim, net.transition_hidden_dim)
        if self.cfg.actor_encoder == "own":  # built last: the other networks' init is unchanged
            self.actor_head = ProjectionHead(self.encoder.map_shape, net.feature_dim)

    def _heads(self) -> dict[str, nn.Module]:
        return {"transition": self.transition, "reward_model": self.reward_model}

    def features(self, obs: torch.Tensor) -> torch.Tensor:
        return self.encoder(obs)

    def actor_features(
        self,
        obs: torch.Tensor,
        h: torch.Tensor | None = None,
        obs_map: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """DrQ's actor (`actor_encoder: own`): its own head over the critic's conv map, detached
        (the convs tied, trained by the critic alone; `obs_map`: the critic step's map, as
        DrQ-v2 reuses it); else the critic's features."""
        if self.actor_head is None:
            return super().actor_features(obs, h)
        if obs_map is None:
            with torch.no_grad():
                obs_map = self.encoder.feature_map(self.encoder.scale(obs))
        return self.actor_head(obs_map)

    def update_critic(self, batch: Tensors) -> CriticStep:
        action = self.scale.normalise(batch["action"])  # (B, A)
        reward, done = batch["reward"], batch["done"]
        pixels = isinstance(self.encoder, PixelEncoder)
        obs_map = None
        if self.actor_head is None:
            h = self.encoder(batch["obs"])  # (B, F)
        else:  # one conv pass of o_t for the critic and the actor's head (DrQ-v2)
            obs_map = self.encoder.feature_map(self.encoder.scale(batch["obs"]))
            h = self.encoder.project(obs_map)  # (B, F)
        with torch.no_grad():
            # frames scaled to float once for the online and the target encoder
            next_x = self.encoder.scale(batch["next_obs"]) if pixels else batch["next_obs"]
            # o_{t+1} through the online encoder: the actor's next action and DeepMDP's target
            if self.actor_head is None:
                next_h = self._encode(self.encoder, next_x, pixels)  # (B, F)
                next_actor_h = next_h
            else:  # one conv pass for both heads
                next_map = self.encoder.feature_map(next_x)
                next_h, next_actor_h = self.encoder.project(next_map), self.actor_head(next_map)
            next_h_target = self._encode(self.encoder_target, next_x, pixels)  # (B, F)
            next_action, next_log_pi, _ = self.actor(next_actor_h)
            # ERPv eq. 9: V(s') = E[Q~(s', a') - alpha log pi(a'|s')], Q~ the target critic's min
            next_v = self.critic_target.q_min(next_h_target, next_action) - self.alpha * next_log_pi
            target = reward + self.cfg.gamma * (1.0 - done) * next_v  # eq. 8's backup, (B,)
        q1, q2 = self.critic(h, action)
        critic_loss = F.mse_loss(q1, target) + F.mse_loss(q2, target)  # TD loss on both heads
        loss = critic_loss
        # how much the features tell the batch's observations apart: std over the rows (ddof 1),
        # mean over the features; near 0, a collapsed encoder no head can read a state from (NaN
        # for a batch of one row, which has no spread)
        spread = h.detach().std(0).mean() if len(h) > 1 else h.new_full((), float("nan"))
        metrics = {"critic_loss": critic_loss, "q": q1.mean(), "encoder_spread": spread}
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
        return CriticStep(
            metrics, h.detach(), next_h, None if obs_map is None else obs_map.detach()
        )

    @staticmethod
    def _encode(encoder: nn.Module, x: torch.Tensor, pixels: bool) -> torch.Tensor:
        """`encoder`'s features of input already scaled (frames) or as stored (states)."""
        return encoder.project(encoder.feature_map(x)) if pixels else encoder(x)
