"""Semore (seed 001): the library core, tiny sizes only (pipeline.learn.methods.semore)."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from pydantic import ValidationError

from pipeline.core.config import load_params
from pipeline.core.stacking import FrameStacker
from pipeline.learn.agents.networks import transition_nll
from pipeline.learn.methods.semore import (
    CrossAttention,
    SemoreAgent,
    SemoreEncoder,
    SemoreParams,
    motion_input,
    reasonable_indices,
    selective_probability,
    selective_sample,
    similarity_loss,
    ssim,
)
from pipeline.learn.methods.table import get_method, load_agent
from tests.conftest import REPO

SIDE = 24  # frames 24x24: 2 convs -> 9x9 feature maps
SPACE = gym.spaces.Box(-2.0, 2.0, (2,), np.float32)

TINY_NETWORK = {
    "obs": "pixels", "frame_stack": 3, "feature_dim": 16, "hidden_dim": 32, "encoder_layers": 2,
    "encoder_filters": 8, "transition_hidden_dim": 32, "transition_learn_sigma": False,
    "log_std_min": -10.0, "log_std_max": 2.0, "attention_dim": 8, "attention_stride": 3,
}  # fmt: skip
TINY_SEMORE = {
    "batch_size": 16, "gamma": 0.99, "actor_lr": 1e-3, "critic_lr": 1e-3, "alpha_lr": 1e-4,
    "model_lr": 1e-3, "adam_betas": (0.9, 0.999), "critic_tau": 0.01, "encoder_tau": 0.05,
    "actor_update_freq": 2, "target_update_freq": 2, "init_temperature": 0.1, "aux_weight": 1.0,
    "start_steps": 0, "update_every": 1, "offline_fraction": 1.0, "replay_capacity": 100,
    "log_every": 10, "variant": "m4", "similarity_weight": 1.0, "transition_weight": 1.0,
    "reward_weight": 1.0, "ssim_alpha": 0.84, "ssim_window": 5, "ssim_sigma": 1.5,
    "selective_start": 1.0, "selective_end": 0.5, "selective_steps": 100,
}  # fmt: skip


def semore_params(network: dict[str, Any] | None = None, **overrides: Any) -> SemoreParams:
    return SemoreParams(network={**TINY_NETWORK, **(network or {})}, **{**TINY_SEMORE, **overrides})


def random_batch(b: int = 16, seed: int = 0, mask_share: float = 0.5) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)

    def frames() -> torch.Tensor:
        return torch.randint(0, 256, (b, 9, SIDE, SIDE), dtype=torch.uint8, generator=g)

    return {
        "obs": frames(),
        "next_obs": frames(),
        "action": torch.rand(b, 2, generator=g) * 4 - 2,
        "reward": torch.randn(b, generator=g),
        "done": torch.zeros(b),
        "mask": (torch.rand(b, 1, SIDE, SIDE, generator=g) > 0.7).to(torch.uint8) * 255,
        "has_mask": torch.arange(b) < round(b * mask_share),
        "judge": torch.randint(-1, 2, (b,), generator=g),
    }


pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


# --- eq. 5 ---------------------------------------------------------------------------------


def test_similarity_loss_by_hand():
    # one 3x3 map, window 3: SSIM is a single Gaussian-weighted window, computed here in numpy
    x = np.array([[0.2, 0.5, 0.1], [0.9, 0.3, 0.4], [0.0, 0.6, 0.8]])
    y = np.array([[0.1, 0.7, 0.2], [1.0, 0.2, 0.3], [0.1, 0.4, 0.9]])  # max 1: scale 1
    g = np.exp(-((np.arange(3) - 1.0) ** 2) / (2 * 1.5**2))
    w = np.outer(g, g) / np.outer(g, g).sum()
    mx, my = (w * x).sum(), (w * y).sum()
    vx, vy = (w * x * x).sum() - mx**2, (w * y * y).sum() - my**2
    cxy = (w * x * y).sum() - mx * my
    c1, c2 = 0.01**2, 0.03**2
    s = (2 * mx * my + c1) * (2 * cxy + c2) / ((mx**2 + my**2 + c1) * (vx + vy + c2))
    expected = 0.84 * (1 - s) + 0.16 * np.abs(x - y).mean()

    tx = torch.tensor(x, dtype=torch.float32)[None, None]
    ty = torch.tensor(y, dtype=torch.float32)[None, None]
    assert ssim(tx, ty, window=3).item() == pytest.approx(s, rel=1e-5)
    loss = similarity_loss(tx, ty, alpha=0.84, window=3, sigma=1.5)
    assert loss.shape == (1,) and loss.item() == pytest.approx(expected, rel=1e-5)
    # the maps are divided by max(F_v): the loss ignores a common scale; identical maps cost 0
    scaled = similarity_loss(7 * tx, 7 * ty, alpha=0.84, window=3, sigma=1.5)
    assert scaled.item() == pytest.approx(expected, rel=1e-4)
    assert similarity_loss(ty, ty, window=3).item() == pytest.approx(0.0, abs=1e-6)
    with pytest.raises(ValueError, match="smaller than the window"):
        ssim(tx, ty, window=5)


# --- eq. 6-7 and the streams ----------------------------------------------------------------


def test_attention_rows_sum_to_one_and_shapes_match():
    torch.manual_seed(0)
    attention = CrossAttention(channels=4, dim=3, stride=3)
    f_s, f_m, f_v = torch.rand(2, 4, 9, 9), torch.rand(2, 4, 9, 9), torch.rand(2, 4, 9, 9)
    new_s, new_m, a_sm, a_ms = attention(f_s, f_m, f_v)
    assert new_s.shape == f_s.shape and new_m.shape == f_m.shape
    assert a_sm.shape == a_ms.shape == (2, 9, 9)  # 9x9 maps, stride 3 -> 3x3 = 9 tokens
    for a in (a_sm, a_ms):
        torch.testing.assert_close(a.sum(-1), torch.ones(2, 9))
        assert (a >= 0).all()
    # bidirectional (eq. 6): one score matrix Q_s K_m^T / sqrt(dim), softmax over either axis
    q = attention.reduce_s(f_v).flatten(2).transpose(1, 2)  # (2, 9, 3)
    k = attention.reduce_m(f_m).flatten(2).transpose(1, 2)
    scores = q @ k.transpose(1, 2) / 3**0.5
    torch.testing.assert_close(a_sm, scores.softmax(-1))
    torch.testing.assert_close(a_ms, scores.transpose(1, 2).softmax(-1))
    _, _, b_sm, _ = attention(f_s, f_m, f_s)
    assert not torch.allclose(a_sm, b_sm)  # the query (F_v vs F_s) sets the weights
    # F_v weighs, never enters the values: with uniform weights the query does not matter
    attention.reduce_s.weight.data.zero_()
    attention.reduce_s.bias.data.zero_()
    out_v, out_s = attention(f_s, f_m, f_v), attention(f_s, f_m, f_s)
    for u, v in zip(out_v, out_s, strict=True):
        torch.testing.assert_close(u, v)


def test_encoder_uses_f_v_only_on_rows_with_a_mask():
    torch.manual_seed(0)
    encoder = SemoreEncoder(
        (9, SIDE, SIDE), semantic_input="current", motion=True, interaction=True,
        num_layers=2, num_filters=8, feature_dim=16, attention_dim=8, attention_stride=3,
    )  # fmt: skip
    obs = torch.randint(0, 256, (3, 9, SIDE, SIDE), dtype=torch.uint8)
    f_v = torch.rand(3, *encoder.semantic.map_shape)
    deployed = encoder(obs)  # no mask: the attention weighs with F_s
    trained = encoder(obs, f_v, torch.tensor([True, False, False]))
    assert deployed["z"].shape == (3, 32) and deployed["attention_sm"].shape == (3, 9, 9)
    torch.testing.assert_close(trained["z"][1:], deployed["z"][1:])
    assert not torch.allclose(trained["z"][0], deployed["z"][0])


def test_motion_input_is_the_residual_of_the_right_frames():
    rng = np.random.default_rng(0)
    o = [rng.integers(0, 256, (5, 5, 3), dtype=np.uint8) for _ in range(3)]
    f = [torch.tensor(x, dtype=torch.float32).permute(2, 0, 1) / 255 for x in o]  # (3, H, W)
    stacker = FrameStacker(3, "pixels")
    stacks = [stacker.reset(o[0]), stacker.step(o[1]), stacker.step(o[2])]  # (9, H, W) each
    got = [motion_input(torch.as_tensor(s)[None])[0] for s in stacks]  # (6, H, W): newest first
    zero = torch.zeros(3, 5, 5)
    # episode start: o_0 repeated, so both residuals vanish
    torch.testing.assert_close(got[0], torch.cat([zero, zero]))
    torch.testing.assert_close(got[1], torch.cat([f[1] - f[0], zero]))  # [o0, o0, o1]
    torch.testing.assert_close(got[2], torch.cat([f[2] - f[1], f[1] - f[0]]))  # [o0, o1, o2]


# --- eq. 8, 9 and the gradient stops ---------------------------------------------------------


def test_transition_and_reward_heads_are_eq_8_and_9():
    agent = SemoreAgent((SIDE, SIDE, 3), SPACE, semore_params(), seed=1)
    batch = random_batch()
    action = agent.scale.normalise(batch["action"])
    with torch.no_grad():
        f_v = agent.knowledge_map(batch["obs"], batch["mask"])
        feats = agent.encoder(batch["obs"], f_v, batch["has_mask"])
        next_z_m = agent.encoder(batch["next_obs"])["z_m"]
        mu, _ = agent.transition(feats["z_m"], action)  # P(z_m,t, a_t)
        transition = ((mu - next_z_m) ** 2).mean()  # eq. 8, squared L2 per feature
        reward_pred = agent.reward_model(torch.cat([feats["z"], action], -1))  # R(z_t, a_t)
        reward = F.mse_loss(reward_pred, batch["reward"])  # eq. 9
    assert agent.transition.fc_mu.out_features == 16  # predicts z_m, not [z_s, z_m]
    metrics = agent.update(batch)
    assert metrics["transition_loss"] == pytest.approx(transition.item(), rel=1e-5)
    assert metrics["reward_loss"] == pytest.approx(reward.item(), rel=1e-5)
    torch.testing.assert_close(transition, transition_nll(next_z_m, mu, torch.ones_like(mu)).mean())


def test_f_v_is_a_stop_gradient_target_of_the_target_encoder():
    agent = SemoreAgent((SIDE, SIDE, 3), SPACE, semore_params(), seed=0)
    batch = random_batch()
    f_v = agent.knowledge_map(batch["obs"], batch["mask"])
    assert not f_v.requires_grad
    # o_t * M: an all-zero mask gives the map of a black frame
    zero_mask = torch.zeros(16, 1, SIDE, SIDE, dtype=torch.uint8)
    black = agent.encoder_target.semantic.feature_map(torch.zeros(16, 3, SIDE, SIDE))
    torch.testing.assert_close(agent.knowledge_map(batch["obs"], zero_mask), black.detach())
    agent.update(batch)
    assert all(p.grad is None for p in agent.encoder_target.parameters())
    assert agent.encoder.semantic.convs[0].weight.grad is not None


def test_rows_without_a_mask_get_no_similarity_loss():
    agent = SemoreAgent((SIDE, SIDE, 3), SPACE, semore_params(variant="m3"), seed=0)
    none = random_batch(mask_share=0.0)
    assert "similarity_loss" not in agent.update(none)
    batch = random_batch(mask_share=0.25)
    metrics = agent.update(batch)
    assert metrics["mask_rows"] == pytest.approx(0.25)
    # the loss is the mean over the masked rows only: their masks alone matter
    other = dict(batch, mask=batch["mask"].clone())
    other["mask"][4:] = 255 - other["mask"][4:]
    a, b = (SemoreAgent((SIDE, SIDE, 3), SPACE, semore_params(variant="m3")) for _ in range(2))
    assert a.update(batch)["similarity_loss"] == b.update(other)["similarity_loss"]


# --- selective replay ------------------------------------------------------------------------


def test_selective_probability_decays_from_1_to_half_then_stops():
    p = [selective_probability(s, 1.0, 0.5, 100) for s in (0, 25, 50, 100, 101, 10_000)]
    assert p == pytest.approx([1.0, 0.875, 0.75, 0.5, 0.0, 0.0])
    assert selective_probability(0, 1.0, 0.5, 0) == 0.0  # selective_steps 0: off
    with pytest.raises(ValueError):
        selective_probability(-1, 1.0, 0.5, 10)


def test_selective_sample_draws_reasonable_rows_with_the_scheduled_probability():
    rng = np.random.default_rng(0)
    judge = np.array([1] * 200 + [0] * 300 + [-1] * 500)  # 20 % judged reasonable
    reasonable = reasonable_indices(judge)
    candidates = np.arange(len(judge))
    n = 40_000
    for step in (0, 50, 100, 150):  # over training: p = 1, 0.75, 0.5, then 0
        p = selective_probability(step, 1.0, 0.5, 100)
        rows = selective_sample(rng, candidates, reasonable, n, p)
        share = (judge[rows] == 1).mean()
        assert share == pytest.approx(p + (1 - p) * 0.2, abs=0.01)
    # without any judged-reasonable row everything comes from the candidates
    rows = selective_sample(rng, candidates, np.array([], np.int64), 100, 1.0)
    assert rows.shape == (100,) and rows.max() < 1000


def test_selective_pool_feeds_the_replay_buffer_the_scheduled_rows():
    """pipeline.learn.methods.semore.selective_pool: update i's offline rows come from the reasonable
    transitions with probability selective_probability(i); off when nothing is judged."""
    from dataclasses import replace

    from pipeline.dataset.transitions import JUDGE_SPEC, OfflineTransitions
    from pipeline.learn.agents.replay import ReplayBuffer
    from pipeline.learn.methods.semore import selective_pool

    n = 1000
    judge = np.array([1] * 200 + [0] * 300 + [-1] * 500, np.int8)  # 20 % judged reasonable
    data = OfflineTransitions(
        obs=np.arange(n + 1, dtype=np.float32)[:, None], episode_start=np.zeros(n + 1, np.int64),
        obs_index=np.arange(n), action=np.zeros((n, 1), np.float32),
        reward=np.zeros(n, np.float32), terminated=np.zeros(n, bool),
        specs=(JUDGE_SPEC,), fields={"judge": judge},
    )  # fmt: skip
    hp = semore_params(batch_size=64, selective_steps=100)
    pool = selective_pool(hp, data)
    assert pool is not None
    buffer = ReplayBuffer(
        "state", (1,), 1, 10, offline=data, offline_fraction=1.0, offline_pool=pool
    )
    rng = np.random.default_rng(0)
    for update, p in ((0, 1.0), (100, 0.5), (101, 0.0)):
        rows = [buffer.sample(64, rng, update=update)["judge"].numpy() for _ in range(300)]
        share = (np.concatenate(rows) == 1).mean()
        assert share == pytest.approx(p + (1 - p) * 0.2, abs=0.02), update
    assert selective_pool(semore_params(selective_steps=0), data) is None  # off
    unjudged = replace(data, fields={"judge": np.full(n, -1, np.int8)})
    assert selective_pool(hp, unjudged) is None  # nothing judged reasonable


def test_reversed_verdicts_draw_from_what_the_judge_rejected_in_both_placements():
    """`selective_verdicts: reversed` (the known-bad judge control): the pool is the rows judged
    unreasonable, unknown rows stay out, and the same data, labels and masks are read."""
    from pipeline.learn.methods.semore import inserted_rows, read_verdicts, selective_pool

    judge = np.array([1] * 200 + [0] * 300 + [-1] * 500, np.int8)
    assert (read_verdicts(judge, "as_judged") == judge).all()
    flipped = read_verdicts(judge, "reversed")
    assert flipped.dtype == judge.dtype
    assert (flipped == np.array([0] * 200 + [1] * 300 + [-1] * 500)).all()
    data = _judged(judge, np.zeros(len(judge), np.int64))
    hp = semore_params(batch_size=64, selective_steps=100, selective_verdicts="reversed")
    pool = selective_pool(hp, data)
    assert pool is not None
    rows = np.concatenate([pool(0, np.random.default_rng(s)) for s in range(50)])  # p(0) = 1
    assert (judge[rows] == 0).all() and len(set(rows.tolist())) > 250  # all 300 rejected rows
    # at insertion with p = 1 only the rows the judge rejected enter
    hp = semore_params(
        selective_steps=100, selective_replay="insert", selective_verdicts="reversed"
    )
    kept = inserted_rows(hp, data, [(0, 7)])
    assert (kept == np.arange(200, 500)).all()
    # the default is left out of a saved agent's params, so older agents load as before
    assert "selective_verdicts" not in semore_params().model_dump()


def _judged(judge: np.ndarray, part: np.ndarray):
    from pipeline.dataset.transitions import JUDGE_SPEC, OfflineTransitions

    n = len(judge)
    return OfflineTransitions(
        obs=np.arange(n + 1, dtype=np.float32)[:, None], episode_start=np.zeros(n + 1, np.int64),
        obs_index=np.arange(n), action=np.zeros((n, 1), np.float32),
        reward=np.zeros(n, np.float32), terminated=np.zeros(n, bool),
        specs=(JUDGE_SPEC,), fields={"judge": judge.astype(np.int8)}, part=part,
    )  # fmt: skip


def test_selective_insertion_leaves_out_unjudged_pairs_as_each_part_enters():
    """The paper's placement: a part entering at update u keeps its reasonable pairs and each
    other pair with probability 1 - p(u); the decision is the part's own, the same in every
    later round, and a part entering after the decay keeps everything."""
    from pipeline.learn.methods.semore import selective_insert

    rng = np.random.default_rng(1)
    judge = rng.choice([1, 0, -1], size=6000, p=[0.2, 0.4, 0.4])
    part = np.repeat([0, 1, 2], 2000)
    entries = [(0, 7), (50, 8), (101, 9)]  # p = 1, 0.75, 0 (past the 100-update decay)
    kept = selective_insert(judge, part, entries, 1.0, 0.5, 100)
    kept_mask = np.zeros(len(judge), bool)
    kept_mask[kept] = True
    reasonable = judge == 1
    assert kept_mask[reasonable].all()  # a reasonable pair always enters
    assert not kept_mask[(part == 0) & ~reasonable].any()  # p(0) = 1: only reasonable ones
    assert kept_mask[part == 2].all()  # past the decay: everything
    others = (part == 1) & ~reasonable
    share = kept_mask[others].mean()
    sd = (0.25 * 0.75 / others.sum()) ** 0.5  # binomial standard deviation of the share
    assert abs(share - 0.25) < 4 * sd, share
    # part 1's decision does not depend on the parts after it (a later round adds one)
    alone = selective_insert(judge[:4000], part[:4000], entries[:2], 1.0, 0.5, 100)
    np.testing.assert_array_equal(alone, kept[kept < 4000])
    # off (selective_steps 0): nothing is left out
    assert len(selective_insert(judge, part, entries, 1.0, 0.5, 0)) == len(judge)
    with pytest.raises(ValueError, match="entries for 2 parts"):
        selective_insert(judge, part, entries[:2], 1.0, 0.5, 100)


def test_semore_with_selective_insertion_draws_only_the_rows_that_entered():
    """`selective_replay: insert` through the method: every batch, early or late, draws from the
    rows kept at insertion, and the checkpoint's meta counts them per part."""
    from pipeline.core.config import TrainRun
    from pipeline.learn.agents.replay import ReplayBuffer
    from pipeline.learn.methods.base import TrainInputs

    judge = np.array([1] * 100 + [0] * 300 + [1] * 50 + [-1] * 150)
    data = _judged(judge, np.repeat([0, 1], [400, 200]))
    hp = semore_params(selective_replay="insert", selective_steps=100)
    run = TrainRun(env="cartpole-swingup", method="semore", steps=10, seed=3)
    inputs = TrainInputs(round_parts=(REPO,), part_entries=((0, 3), (100, 4)))
    pool, chosen = get_method("semore").offline_pool(hp, data, run, inputs)
    # part 0 entered at p = 1 (its 100 reasonable rows), part 1 at p = 0.5
    kept = chosen["selective_insert"]["kept"]
    assert kept[0] == 100 and 50 < kept[1] < 200, kept
    assert chosen["selective_insert"]["of"] == [400, 200]
    buffer = ReplayBuffer("state", (1,), 1, 10, offline=data, offline_fraction=1.0,
                          offline_pool=pool)  # fmt: skip
    allowed = set(pool(0, np.random.default_rng(0)).tolist())
    rng = np.random.default_rng(0)
    for update in (0, 10_000):
        rows = buffer.sample(256, rng, update=update)["obs"].numpy()[:, 0].astype(int)
        assert set(rows.tolist()) <= allowed and len(set(rows.tolist())) > 50
    assert not set(range(100, 400)) & allowed  # part 0's unreasonable rows never enter
    # outside rounds the dataset enters at update 0 with the run's seed
    _, alone = get_method("semore").offline_pool(
        hp, _judged(judge[:400], np.zeros(400, int)), run, TrainInputs()
    )
    assert alone["selective_insert"] == {"entries": [[0, 3]], "kept": [100], "of": [400]}
    with pytest.raises(ValueError, match="left out every offline transition"):
        get_method("semore").offline_pool(
            hp, _judged(np.zeros(400, int), np.zeros(400, int)), run,
            TrainInputs(),
        )  # fmt: skip
    # the default (sampling) is not saved in the config: older agents load as before
    assert "selective_replay" not in semore_params().model_dump()
    assert semore_params(selective_replay="insert").model_dump()["selective_replay"] == "insert"


# --- ablations --------------------------------------------------------------------------------

_EXPECTED = {
    # variant: (semantic channels, motion stream, attention, transition head, losses)
    "sac": (9, False, False, True, {"transition_loss", "reward_loss"}),
    "m1": (9, False, False, False, {"reward_loss"}),
    "m2": (3, True, False, False, {"reward_loss"}),
    "m3": (3, True, False, False, {"reward_loss", "similarity_loss"}),
    "m4": (3, True, True, True, {"reward_loss", "similarity_loss", "transition_loss"}),
}
_SAC_KEYS = {"critic_loss", "q", "loss", "actor_loss", "alpha_loss", "alpha", "entropy",
             "action_spread"}  # fmt: skip


@pytest.mark.parametrize("variant", list(_EXPECTED))
def test_each_ablation_builds_and_trains_exactly_its_parts(variant):
    channels, motion, attention, transition, losses = _EXPECTED[variant]
    agent = SemoreAgent((SIDE, SIDE, 3), SPACE, semore_params(variant=variant))
    assert agent.encoder.semantic.in_channels == channels
    assert (agent.encoder.motion is not None) == motion
    assert (agent.encoder.attention is not None) == attention
    assert (agent.transition is not None) == transition
    assert agent.encoder.feature_dim == (32 if motion else 16)  # z = [z_s, z_m] or z_s
    agent.update(random_batch())
    metrics = agent.update(random_batch(seed=1))  # update 2: actor and alpha too
    assert agent.update_step == 2
    extra = {"mask_rows"} if "similarity_loss" in losses else set()
    assert set(metrics) == _SAC_KEYS | losses | extra


def test_semantic_input_replaces_the_variants_and_keeps_its_other_parts():
    agent = SemoreAgent((SIDE, SIDE, 3), SPACE, semore_params(variant="m2", semantic_input="stack"))
    assert agent.encoder.semantic.in_channels == 9  # the stack, as m1's
    assert agent.encoder.motion is not None and agent.encoder.attention is None  # m2's streams
    assert agent.encoder.feature_dim == 32
    assert agent.w_similarity == 0.0 and agent.transition is None
    agent.update(random_batch())
    assert set(agent.update(random_batch(seed=1))) == _SAC_KEYS | {"reward_loss"}
    current = SemoreAgent(
        (SIDE, SIDE, 3), SPACE, semore_params(variant="m1", semantic_input="current")
    )
    assert current.encoder.semantic.in_channels == 3 and current.encoder.motion is None
    plain = SemoreAgent((SIDE, SIDE, 3), SPACE, semore_params(variant="m2"))
    assert plain.encoder.semantic.in_channels == 3  # null: the variant's own input


def test_weights_switch_their_terms_off():
    zero = {"similarity_weight": 0.0, "transition_weight": 0.0, "reward_weight": 0.0}
    agent = SemoreAgent((SIDE, SIDE, 3), SPACE, semore_params(**zero))
    agent.update_step = 1  # the next update is the 2nd: actor and alpha too
    assert set(agent.update(random_batch())) == _SAC_KEYS
    plain = SemoreAgent((SIDE, SIDE, 3), SPACE, semore_params(variant="sac", aux_weight=0.0))
    plain.update_step = 1
    assert set(plain.update(random_batch())) == _SAC_KEYS  # plain pixel SAC


def test_params_validate():
    with pytest.raises(ValidationError, match="pixels"):
        semore_params(network={"obs": "state"})
    with pytest.raises(ValidationError, match="frame_stack"):
        semore_params(network={"frame_stack": 1})
    with pytest.raises(ValidationError, match="decays"):
        semore_params(selective_start=0.4, selective_end=0.5)
    with pytest.raises(ValidationError, match="variant"):
        semore_params(variant="m5")
    for variant in ("m3", "m4"):  # eq. 5's knowledge map is of the current frame
        with pytest.raises(ValidationError, match=f"semantic_input 'stack' with variant {variant}"):
            semore_params(variant=variant, semantic_input="stack")
    with pytest.raises(ValidationError, match="semantic_input"):
        semore_params(semantic_input="residuals")
    with pytest.raises(ValueError, match="ssim_window"):
        SemoreAgent((SIDE, SIDE, 3), SPACE, semore_params(ssim_window=11))  # 9x9 maps


# --- deployment, checkpoints, learning ---------------------------------------------------------


def test_deployed_policy_acts_without_any_mask(monkeypatch):
    agent = SemoreAgent((SIDE, SIDE, 3), SPACE, semore_params(), seed=0)
    agent.update_step = 1
    agent.update(random_batch())  # the 2nd update: the actor has trained

    def no_masks(*args: Any) -> None:
        raise AssertionError("acting must not compute F_v")

    monkeypatch.setattr(agent, "knowledge_map", no_masks)
    stacker = FrameStacker(3, "pixels")
    obs = stacker.reset(np.random.default_rng(0).integers(0, 256, (SIDE, SIDE, 3), dtype=np.uint8))
    action = agent.act(obs, deterministic=True)
    assert action.shape == (2,) and np.all(np.abs(action) <= 2.0)
    with torch.no_grad():
        z = agent.encoder(torch.as_tensor(obs)[None])["z"]  # attention with F_s
        expected = agent.scale.unnormalise(agent.actor(z, deterministic=True)[0])[0].numpy()
    np.testing.assert_allclose(action, expected)
    with pytest.raises(ValueError, match="expects one observation"):
        agent.act(obs[:3])


def test_save_load_gives_the_same_actions(tmp_path):
    agent = SemoreAgent((SIDE, SIDE, 3), SPACE, semore_params(), seed=3)
    for step in range(4):
        agent.update(random_batch(seed=step))
    agent.save(tmp_path / "semore")
    loaded = SemoreAgent.load(tmp_path / "semore")
    assert loaded.update_step == 4 and loaded.cfg == agent.cfg
    obs = random_batch(b=5, seed=9)["obs"].numpy()
    for x in obs:
        np.testing.assert_array_equal(loaded.act(x, True), agent.act(x, True))
        torch.manual_seed(0)
        sampled = agent.act(x)
        torch.manual_seed(0)
        np.testing.assert_array_equal(loaded.act(x), sampled)
    other = SemoreAgent((SIDE, SIDE, 3), SPACE, semore_params(variant="m3"))
    with pytest.raises(ValueError, match="another config"):
        other.load_weights(tmp_path / "semore")
    by_method = load_agent(tmp_path / "semore")  # the method the checkpoint records: semore
    assert isinstance(by_method, SemoreAgent) and by_method.cfg == agent.cfg
    np.testing.assert_array_equal(by_method.act(obs[0], True), agent.act(obs[0], True))


def test_a_tiny_update_loop_reduces_the_losses():
    agent = SemoreAgent((SIDE, SIDE, 3), SPACE, semore_params(gamma=0.01), seed=0)
    batch = random_batch(b=16)
    rows = [agent.update(batch) for _ in range(60)]

    def mean(key: str, part: slice) -> float:
        return float(np.mean([r[key] for r in rows[part]]))

    assert mean("loss", slice(-5, None)) < 0.25 * mean("loss", slice(0, 5))  # eq. 12 in all
    for key in ("critic_loss", "reward_loss", "similarity_loss", "transition_loss"):
        # the similarity target moves with the target encoder: it falls slowest (0.25 -> 0.15)
        assert mean(key, slice(-5, None)) < 0.8 * mean(key, slice(0, 5)), key


def test_updates_on_replay_buffer_batches_without_masks():
    """Online rows as the ReplayBuffer samples them (no mask, no judge): plain Semore losses."""
    from pipeline.learn.agents.replay import ReplayBuffer

    rng = np.random.default_rng(0)
    buffer = ReplayBuffer("pixels", (SIDE, SIDE, 3), 2, capacity=50, frame_stack=3)
    buffer.begin_episode(rng.integers(0, 256, (SIDE, SIDE, 3), dtype=np.uint8))
    for _ in range(10):
        frame = rng.integers(0, 256, (SIDE, SIDE, 3), dtype=np.uint8)
        buffer.add(SPACE.sample(), 1.0, frame, False)
    agent = SemoreAgent((SIDE, SIDE, 3), SPACE, semore_params())
    agent.update_step = 1
    metrics = agent.update(buffer.sample(8, rng))
    assert "similarity_loss" not in metrics and np.isfinite(metrics["loss"])


@pytest.fixture(scope="module")
def semore_pipeline(tmp_path_factory):
    """collect -> label -> masks -> dataset (CarRacing frames, tiny) and params for one run."""
    import yaml

    from stages import collect, dataset, label, masks

    env = "CarRacing-v3"
    d = tmp_path_factory.mktemp("semore")
    raw = yaml.safe_load((REPO / "params.yaml").read_text())
    raw["rounds"] = {}  # the shipped rounds follow runs replaced here
    raw["envs"] = [env]
    raw["env"][env].update(image_size=48, max_episode_steps=40)
    raw["collect"][env].update(episodes=2)
    raw["semore"].update(start_steps=20, log_every=40, batch_size=8, ssim_window=5)
    raw["train"] = {"s": {"env": env, "method": "semore", "steps": 40, "seed": 0}}
    raw["evaluate"]["episodes"] = 1
    raw["critic"]["envs"] = []
    (d / "params.yaml").write_text(yaml.safe_dump(raw))
    p = str(d / "params.yaml")
    assert collect.main(["--params", p, "--env", env, "--out", f"{d}/r"]) == 0
    assert label.main(["--params", p, "--rollouts", f"{d}/r", "--cache", f"{d}/lc", "--out",
                       f"{d}/labels.parquet"]) == 0  # fmt: skip
    assert masks.main(["--params", p, "--rollouts", f"{d}/r", "--labels", f"{d}/labels.parquet",
                       "--cache", f"{d}/mc", "--out", f"{d}/masks.parquet"]) == 0  # fmt: skip
    assert dataset.main(["--params", p, "--rollouts", f"{d}/r", "--labels",
                         f"{d}/labels.parquet", "--masks", f"{d}/masks.parquet", "--out",
                         f"{d}/ds"]) == 0  # fmt: skip
    return d, p


def test_semore_trains_from_a_pipeline_built_dataset_without_any_teacher_or_segmenter(
    semore_pipeline,
):
    """`train` with method semore in a fresh interpreter: it reads the masks and judge labels
    from the dataset and imports no teacher, segmenter, transformers or open_clip; the deployed
    policy acts."""
    import subprocess
    import sys

    from pipeline.learn.agents.checkpoint import read_meta
    from pipeline.learn.evaluation import deployed, evaluate_policy

    env = "CarRacing-v3"
    d, p = semore_pipeline
    argv = ["--params", p, "--run", "s", "--dataset", f"{d}/ds", "--out", f"{d}/model", "--live", f"{d}/live", "--summary",
            f"{d}/summary.json"]  # fmt: skip
    code = (
        "import sys\nfrom stages.train import main\n"
        f"assert main({argv!r}) == 0\nprint('\\n'.join(sorted(sys.modules)))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True
    )
    modules = out.stdout.split()
    assert "pipeline.learn.methods.semore" in modules
    forbidden = ("pipeline.teach.teachers", "pipeline.teach.masks", "transformers", "open_clip")
    assert not [m for m in modules if m.startswith(forbidden)]
    logged = {p.stem for p in (d / "live" / "plots" / "metrics").rglob("*.tsv")}
    assert any(name.startswith("similarity") for name in logged), logged
    policy = deployed(load_agent(d / "model"), read_meta(d / "model"))  # as deployed: no mask
    result = evaluate_policy(policy, env, load_params(p).env[env], 1, seed=0)
    assert result.episodes == 1 and np.isfinite(result.return_mean)


# three Semore runs on rendered CarRacing; fast: Semore's resume on the pixel pipeline
# (test_pixel_methods.py)
@pytest.mark.slow
def test_an_interrupted_semore_training_resumes_to_the_uninterrupted_result(
    semore_pipeline, monkeypatch
):
    """Interrupted after its second resume checkpoint, the rerun goes on from it and ends with
    the same networks, curve and logs as a run never interrupted."""
    from pipeline.core.config import TrainRun
    from pipeline.learn.methods.base import TrainInputs

    d, p = semore_pipeline
    params = load_params(p)
    params = params.model_copy(update={"semore": {**params.section("semore"), "resume_every": 20}})
    method = get_method("semore")
    assert method.params(params).resume_every == 20
    run = TrainRun(env="CarRacing-v3", method="semore", steps=60, seed=0)
    inputs = TrainInputs(dataset=d / "ds")
    whole = method.train("s", run, params, inputs, progress=False, resume_dir=d / "whole")

    update, calls = SemoreAgent.update, [0]

    def dies_at_update_25(self, *args, **kwargs):
        calls[0] += 1
        if calls[0] == 25:  # after the checkpoint at step 40 (updates start at step 20)
            raise KeyboardInterrupt
        return update(self, *args, **kwargs)

    monkeypatch.setattr(SemoreAgent, "update", dies_at_update_25)
    with pytest.raises(KeyboardInterrupt):
        method.train("s", run, params, inputs, progress=False, resume_dir=d / "killed")
    assert (d / "killed" / "state.json").exists()
    monkeypatch.setattr(SemoreAgent, "update", update)
    resumed = method.train("s", run, params, inputs, progress=False, resume_dir=d / "killed")
    assert resumed.curve == whole.curve and resumed.logs == whole.logs
    a, b = whole.agent.training_state(), resumed.agent.training_state()
    for name, state in a["modules"].items():
        for key, tensor in state.items():
            assert torch.equal(tensor, b["modules"][name][key]), (name, key)
