"""The networks of SAC + DeepMDP as ERPv builds them (seed 002, appendix C.3, figures 7-11).

- `PixelEncoder`: the visual encoder V(.) of SAC-AE (Yarats et al. 2019), which ERPv's DMControl
  setup inherits through RAD: 3x3 convs (the first with stride 2; the others stride 1, or 2 for
  the small encoder of the CPU pixel preset), ReLU, flatten, Linear,
  LayerNorm, tanh. ERPv figure 8 prints DBC's CARLA variant (128x128 input, four convs of
  64-128-256-256 filters, all stride 2, the first 5x5, then Linear to 50 and LayerNorm); for the
  84x84 DMControl / CarRacing frames the paper defers to RAD, i.e. the SAC-AE stack here.
- `StateEncoder`: Linear + LayerNorm + tanh, so the same actor / critic code runs on states.
- `Actor`: tanh-squashed Gaussian (figure 9: 50 -> 1024 -> 1024 -> 2|A|), log-std bounded.
- `Critic`: two Q heads on [features, action] (figure 10: 52 -> 1024 -> 1024 -> 1); C.3: "the
  final Q-value is the minimum of the outputs from the two Q-networks" (clipped double Q).
- `TransitionModel`: the DeepMDP decoder T_D (figure 11: [s, a] -> 512 -> LayerNorm -> 50),
  giving mean and std of the next latent (appendix B, eq. 12-13).
- `RewardModel`: the reward head of the DeepMDP auxiliary task (latent -> reward).
"""

from __future__ import annotations

import math
from typing import Literal

import torch
from torch import nn


def weight_init(module: nn.Module) -> None:
    """SAC-AE's init (from Denis Yarats' sac_ae.py): orthogonal Linear weights with zero bias,
    delta-orthogonal convs (orthogonal centre tap, ReLU gain)."""
    if isinstance(module, nn.Linear):
        nn.init.orthogonal_(module.weight.data)
        module.bias.data.fill_(0.0)
    elif isinstance(module, nn.Conv2d):
        module.weight.data.fill_(0.0)
        module.bias.data.fill_(0.0)
        mid = module.weight.size(2) // 2
        nn.init.orthogonal_(module.weight.data[:, :, mid, mid], nn.init.calculate_gain("relu"))


def _relu() -> nn.ReLU:
    """In place: each ReLU here follows a conv, a Linear or a LayerNorm, whose backward reads its
    input, not its output, so the same values and gradients come out with one buffer fewer per
    layer (a drq update at 64x64, DrQ's network, batch 128, one CPU thread: 1.03-1.04x)."""
    return nn.ReLU(inplace=True)


class PixelEncoder(nn.Module):
    """V(.): frames stacked on channels (B, C, H, W) -> (B, F). `forward` takes uint8 frames and
    scales them by 1/255; `feature_map` (the conv stack, F's map (B, filters, h, w)) and `project`
    (FC + LayerNorm + tanh) take float input, as Semore's two streams do (its semantic stream reads
    frames in [0, 1], its motion stream residuals in [-1, 1])."""

    def __init__(
        self,
        obs_shape: tuple[int, int, int],
        num_layers: int = 4,
        num_filters: int = 32,
        feature_dim: int = 50,
        stride: int = 1,
    ) -> None:
        super().__init__()
        if len(obs_shape) != 3:
            raise ValueError(f"PixelEncoder needs obs_shape (C, H, W), got {obs_shape}")
        if num_layers < 1:
            raise ValueError(f"num_layers must be >= 1, got {num_layers}")
        self.obs_shape = tuple(obs_shape)
        self.in_channels, self.feature_dim = obs_shape[0], feature_dim
        if stride not in (1, 2):
            raise ValueError(f"stride of the later conv layers must be 1 or 2, got {stride}")
        side = list(obs_shape[1:])  # the map's H, W after each 3x3 conv without padding
        for layer in range(num_layers):
            side = [(d - 3) // (2 if layer == 0 else stride) + 1 for d in side]
        if min(side) < 1:
            raise ValueError(
                f"frames {obs_shape[1:]} are too small for {num_layers} conv layers of stride "
                f"2, then {stride}"
            )
        self.map_shape = (num_filters, side[0], side[1])  # (C, h, w) of the feature map
        convs: list[nn.Module] = [nn.Conv2d(obs_shape[0], num_filters, 3, stride=2), _relu()]
        for _ in range(num_layers - 1):
            convs += [nn.Conv2d(num_filters, num_filters, 3, stride=stride), _relu()]
        self.convs = nn.Sequential(*convs)
        self.fc = nn.Linear(num_filters * side[0] * side[1], feature_dim)
        self.ln = nn.LayerNorm(feature_dim)
        self.apply(weight_init)

    def feature_map(self, x: torch.Tensor) -> torch.Tensor:
        # channels-last input: oneDNN's (and cuDNN's) fast conv layout; a drq update at 64x64,
        # batch 128, one CPU thread went from 5.4 to 7.7 updates/s (benchmarks/pixel_throughput)
        return self.convs(x.contiguous(memory_format=torch.channels_last))  # (B, filters, h, w)

    def project(self, fmap: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.ln(self.fc(fmap.flatten(1))))  # (B, F); tanh after LN as SAC-AE

    @staticmethod
    def scale(obs: torch.Tensor) -> torch.Tensor:
        """uint8 frames -> float in [0, 1], channels-last, in one pass."""
        return obs.contiguous(memory_format=torch.channels_last).float().div_(255.0)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.project(self.feature_map(self.scale(obs)))  # (B, F)


class ProjectionHead(nn.Module):
    """A pixel encoder's head of its own over another encoder's conv map: FC + LayerNorm + tanh,
    (B, filters, h, w) -> (B, F). DrQ's actor (denisyarats/drq, drq.py: `Encoder` with
    `copy_conv_weights_from`): the actor ties its convs to the critic's and trains this head with
    its own loss, the conv map detached."""

    def __init__(self, map_shape: tuple[int, int, int], feature_dim: int) -> None:
        super().__init__()
        self.fc = nn.Linear(map_shape[0] * map_shape[1] * map_shape[2], feature_dim)
        self.ln = nn.LayerNorm(feature_dim)
        self.apply(weight_init)

    def forward(self, fmap: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.ln(self.fc(fmap.flatten(1))))  # (B, F)


class StateEncoder(nn.Module):
    """Low-dimensional states (B, D) -> (B, F): the pixel encoder's head without the convs."""

    def __init__(self, obs_dim: int, feature_dim: int = 50) -> None:
        super().__init__()
        self.obs_shape = (obs_dim,)
        self.feature_dim = feature_dim
        self.fc = nn.Linear(obs_dim, feature_dim)
        self.ln = nn.LayerNorm(feature_dim)
        self.apply(weight_init)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.ln(self.fc(obs.float())))  # (B, F)


def make_encoder(
    kind: Literal["pixels", "state"],
    obs_shape: tuple[int, ...],
    *,
    feature_dim: int = 50,
    num_layers: int = 4,
    num_filters: int = 32,
    stride: int = 1,
) -> PixelEncoder | StateEncoder:
    """`obs_shape` is the encoder's input: (C, H, W) with C = 3 * frame stack for pixels, (D,) for
    states; `stride` that of the conv layers after the first."""
    if kind == "pixels":
        shape: tuple[int, int, int] = tuple(obs_shape)  # type: ignore[assignment]
        return PixelEncoder(shape, num_layers, num_filters, feature_dim, stride)
    if kind == "state":
        if len(obs_shape) != 1:
            raise ValueError(f"a state encoder needs obs_shape (D,), got {obs_shape}")
        return StateEncoder(obs_shape[0], feature_dim)
    raise ValueError(f"encoder kind must be 'pixels' or 'state', got {kind!r}")


def _mlp(n_in: int, hidden_dim: int, n_out: int) -> nn.Sequential:
    return nn.Sequential(
        nn.Linear(n_in, hidden_dim),
        _relu(),
        nn.Linear(hidden_dim, hidden_dim),
        _relu(),
        nn.Linear(hidden_dim, n_out),
    )


class Actor(nn.Module):
    """pi_phi: tanh-squashed Gaussian over actions in [-1, 1]^A (SAC, Haarnoja et al. 2018)."""

    def __init__(
        self,
        feature_dim: int,
        action_dim: int,
        hidden_dim: int = 1024,
        log_std_min: float = -10.0,
        log_std_max: float = 2.0,
    ) -> None:
        super().__init__()
        if not log_std_min < log_std_max:
            raise ValueError(f"log_std_min {log_std_min} must be < log_std_max {log_std_max}")
        self.log_std_min, self.log_std_max = log_std_min, log_std_max
        self.trunk = _mlp(feature_dim, hidden_dim, 2 * action_dim)
        self.apply(weight_init)

    def forward(
        self, h: torch.Tensor, deterministic: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(action, log_prob, mean) for features h (B, F): (B, A), (B,), (B, A); the action is a
        reparameterised sample (the mean when `deterministic`), both squashed by tanh."""
        mu, log_std = self.trunk(h).chunk(2, dim=-1)  # (B, A) each
        # SAC-AE: squash log_std into [min, max] smoothly instead of clipping it
        log_std = torch.tanh(log_std)
        log_std = self.log_std_min + 0.5 * (self.log_std_max - self.log_std_min) * (log_std + 1)
        noise = torch.zeros_like(mu) if deterministic else torch.randn_like(mu)
        pre_tanh = mu + noise * log_std.exp()
        log_prob = (-0.5 * noise.pow(2) - log_std).sum(-1) - 0.5 * math.log(2 * math.pi) * mu.shape[
            -1
        ]
        action = torch.tanh(pre_tanh)
        # change of variables through tanh (SAC appendix C); relu + 1e-6 keep the log finite
        log_prob = log_prob - torch.log(torch.relu(1 - action.pow(2)) + 1e-6).sum(-1)
        return action, log_prob, torch.tanh(mu)


class Critic(nn.Module):
    """Two Q heads on [features, action]: (B, F), (B, A) -> (B,), (B,)."""

    def __init__(self, feature_dim: int, action_dim: int, hidden_dim: int = 1024) -> None:
        super().__init__()
        self.q1 = _mlp(feature_dim + action_dim, hidden_dim, 1)
        self.q2 = _mlp(feature_dim + action_dim, hidden_dim, 1)
        self.apply(weight_init)

    def forward(self, h: torch.Tensor, action: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = torch.cat([h, action], dim=-1)  # (B, F + A)
        return self.q1(x).squeeze(-1), self.q2(x).squeeze(-1)

    def q_min(self, h: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        """Clipped double Q (ERPv C.3): the smaller of the two heads, (B,)."""
        return torch.min(*self(h, action))


class TransitionModel(nn.Module):
    """DeepMDP's T_D (ERPv eq. 13): [s_t, a_t] -> (mu, sigma) of s_{t+1}, both (B, F).

    `learn_sigma=False` is figure 11's DeterministicTransitionModel: sigma is 1, so eq. 12 is the
    squared error. With `learn_sigma`, sigma = min + (max - min) * sigmoid(.) as in the DBC code
    base (Zhang et al. 2021) whose DeepMDP agent ERPv's figures print.
    """

    def __init__(
        self,
        feature_dim: int,
        action_dim: int,
        hidden_dim: int = 512,
        learn_sigma: bool = False,
        min_sigma: float = 1e-4,
        max_sigma: float = 10.0,
    ) -> None:
        super().__init__()
        self.trunk = nn.Sequential(
            nn.Linear(feature_dim + action_dim, hidden_dim), nn.LayerNorm(hidden_dim), _relu()
        )
        self.fc_mu = nn.Linear(hidden_dim, feature_dim)
        self.fc_sigma = nn.Linear(hidden_dim, feature_dim) if learn_sigma else None
        self.min_sigma, self.max_sigma = min_sigma, max_sigma
        self.apply(weight_init)

    def forward(self, h: torch.Tensor, action: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = self.trunk(torch.cat([h, action], dim=-1))  # (B, hidden)
        mu = self.fc_mu(x)  # (B, F)
        if self.fc_sigma is None:
            return mu, torch.ones_like(mu)
        sigma = self.min_sigma + (self.max_sigma - self.min_sigma) * torch.sigmoid(self.fc_sigma(x))
        return mu, sigma


def transition_nll(next_h: torch.Tensor, mu: torch.Tensor, sigma: torch.Tensor) -> torch.Tensor:
    """ERPv eq. 12 per row: mean over features of ((mu - s') / sigma)^2 + log sigma, (B,).

    The paper writes the expectation over the batch only; the mean over the F features (rather
    than the sum) follows the DBC / DeepMDP code, which averages every element."""
    return (((mu - next_h) / sigma).pow(2) + sigma.log()).mean(-1)


class RewardModel(nn.Module):
    """Reward head of the DeepMDP auxiliary task: latent (B, F) -> reward (B,) (DBC's decoder)."""

    def __init__(self, feature_dim: int, hidden_dim: int = 512) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(feature_dim, hidden_dim),
            nn.LayerNorm(hidden_dim),
            _relu(),
            nn.Linear(hidden_dim, 1),
        )
        self.apply(weight_init)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return self.net(h).squeeze(-1)
