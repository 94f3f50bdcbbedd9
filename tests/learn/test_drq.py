"""Method `drq`: the random shift is a whole-pixel crop of the replicate-padded frame, and a DrQ
run trains from pixels and comes back through the method table's `load_agent`."""

from __future__ import annotations

import math
import warnings

import gymnasium as gym
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from pipeline.core.config import ConfigError, parse_params
from pipeline.core.stacking import FrameStacker
from pipeline.learn.agents.augment import random_shift, shift, shift_offsets
from pipeline.learn.agents.off_policy import SACParams
from pipeline.learn.agents.sac import SACAgent
from pipeline.learn.methods.base import TrainInputs
from pipeline.learn.methods.drq import DrQAgent, DrQParams
from pipeline.learn.methods.table import METHODS, check_params, get_method, load_agent
from tests.conftest import TINY_COLLECT


def test_random_shift_is_a_crop_of_the_padded_frame():
    torch.manual_seed(0)
    pad = 3
    x = torch.randint(0, 256, (64, 6, 12, 12), dtype=torch.uint8)
    out = random_shift(x, pad)
    assert out.dtype == torch.uint8 and out.shape == x.shape  # frames stay uint8
    padded = F.pad(x.float(), (pad,) * 4, mode="replicate")
    offsets = set()
    for i in range(len(x)):
        matches = [
            (dy, dx)
            for dy in range(2 * pad + 1)
            for dx in range(2 * pad + 1)
            if torch.equal(out[i].float(), padded[i, :, dy : dy + 12, dx : dx + 12])
        ]
        assert matches, f"row {i} is not a whole-pixel shift of its frame"
        offsets.add(matches[0])
    assert len(offsets) > 10  # rows shift independently, over the whole range
    assert {dy for dy, _ in offsets} == set(range(2 * pad + 1))


def test_a_row_and_its_mask_take_the_same_offset():
    """Semore's mask map must move with its frame: `shift` applies one offset to both."""
    pad = 2
    frames = torch.randint(0, 256, (16, 9, 10, 10), dtype=torch.uint8)
    masks = frames[:, -1:].clone()  # a mask equal to one channel of the frame
    offsets = shift_offsets(16, pad, "cpu")
    assert torch.equal(shift(frames, offsets, pad)[:, -1:], shift(masks, offsets, pad))
    with pytest.raises(ValueError, match="one \\(dy, dx\\) offset per row"):
        shift(frames, offsets[:3], pad)


def test_augment_shifts_the_mask_with_obs_and_next_obs_on_its_own():
    cfg = SACParams.model_validate(_params()["drq"])
    agent = SACAgent((24, 24, 3), gym.spaces.Box(-1.0, 1.0, (1,), np.float32), cfg, seed=0)
    frames = torch.randint(0, 256, (32, 6, 24, 24), dtype=torch.uint8)
    batch = {"obs": frames, "next_obs": frames.clone(), "mask": frames[:, -1:].clone()}
    out = agent.augment(batch)
    assert torch.equal(out["obs"][:, -1:], out["mask"])  # o_t and its mask: one offset
    assert not torch.equal(out["obs"], out["next_obs"])  # o_{t+1}: its own offsets
    assert torch.equal(batch["obs"], frames)  # the sampled batch is not modified


def _params(tmp_steps: int = 40) -> dict:
    net = {"obs": "pixels", "frame_stack": 2, "feature_dim": 8, "hidden_dim": 16,
           "encoder_layers": 2, "encoder_filters": 4, "transition_hidden_dim": 16}  # fmt: skip
    return {
        "envs": ["MountainCarContinuous-v0"],
        "env": {"MountainCarContinuous-v0": {"image_size": 24, "action_repeat": 1,
                                             "max_episode_steps": 15, "include_state": True}},
        "collect": {"MountainCarContinuous-v0": dict(TINY_COLLECT)},
        "train": {"drq-run": {"env": "MountainCarContinuous-v0", "method": "drq",
                              "steps": tmp_steps, "seed": 0}},
        "drq": {"network": net, "batch_size": 8, "start_steps": 10, "aux_weight": 0.0,
                "image_pad": 2, "log_every": 20, "eval_episodes": 0},
    }  # fmt: skip


def test_drq_trains_from_pixels_and_reloads(tmp_path):
    params = parse_params(_params())
    check_params(params)
    inputs = TrainInputs()  # reads no data
    result = get_method("drq").train("drq-run", params.train["drq-run"], params, inputs,
                                     progress=False)  # fmt: skip
    agent = result.agent
    assert isinstance(agent, DrQAgent) and agent.update_step == 40 - 10 + 1
    assert result.meta["method"] == "drq" and result.meta["obs"] == "pixels"
    assert any("critic_loss" in row for row in result.logs)
    agent.save(tmp_path / "agent", result.meta)

    loaded = load_agent(tmp_path / "agent")
    assert type(loaded) is SACAgent  # deployed as SAC's networks, no augmentation
    assert isinstance(loaded.cfg, DrQParams) and loaded.cfg.image_pad == 2
    frames = np.random.default_rng(0).integers(0, 256, (3, 24, 24, 3), dtype=np.uint8)
    stacker = FrameStacker(2, "pixels")
    for i, frame in enumerate(frames):
        x = stacker.reset(frame) if i == 0 else stacker.step(frame)
        np.testing.assert_array_equal(loaded.act(x, True), agent.act(x, True))


def test_drq_update_sees_shifted_frames():
    """The same batch gives another update with the shift than without it (SAC's update)."""
    cfg = DrQParams.model_validate(_params()["drq"])
    space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
    rng = np.random.default_rng(0)
    batch = {
        "obs": torch.as_tensor(rng.integers(0, 256, (8, 6, 24, 24), dtype=np.uint8)),
        "next_obs": torch.as_tensor(rng.integers(0, 256, (8, 6, 24, 24), dtype=np.uint8)),
        "action": torch.zeros(8, 1), "reward": torch.ones(8), "done": torch.zeros(8),
    }  # fmt: skip
    plain = SACParams.model_validate(  # the same agent, unshifted
        {**_params()["drq"], "image_pad": 0, "actor_encoder": "own"}
    )
    drq, sac = (
        DrQAgent((24, 24, 3), space, cfg, seed=1),
        SACAgent((24, 24, 3), space, plain, seed=1),
    )
    torch.manual_seed(0)
    q_drq = drq.update(batch)["q"]
    torch.manual_seed(0)
    q_sac = sac.update(batch)["q"]
    assert q_drq != q_sac


def test_image_pad_is_an_option_of_every_pixel_method_and_refused_on_states():
    for method in ("sac", "erpv", "semore"):
        assert METHODS[method].params_class.model_fields["image_pad"].default == 0
    raw = _params()
    raw["drq"]["network"]["obs"] = "state"
    with pytest.raises(ValueError, match="image_pad shifts frames"):
        SACParams.model_validate({**raw["drq"], "image_pad": 2})


def test_drq_refuses_state_observations():
    raw = _params()
    raw["drq"]["network"]["obs"] = "state"
    with pytest.raises(ConfigError, match=r"network\.obs: pixels"):
        check_params(parse_params(raw))


def test_the_table_lists_drq_as_a_method():
    assert METHODS["drq"].params_class is DrQParams


def test_a_run_sees_frames_of_its_own_size(tmp_path):
    """`train.<run>.image_size`: the run's agent sees its env's frames resized (24 -> 16), in
    training and when it acts, while the env (and every other run) keeps its own size."""
    from pipeline.learn.evaluation import deployed, evaluate_policy

    raw = _params()
    raw["train"]["drq-run"]["image_size"] = 16
    params = parse_params(raw)
    check_params(params)
    assert params.env["MountainCarContinuous-v0"].image_size == 24
    inputs = TrainInputs()
    result = get_method("drq").train("drq-run", params.train["drq-run"], params, inputs,
                                     progress=False)  # fmt: skip
    assert result.agent.obs_shape == (16, 16, 3)
    result.agent.save(tmp_path / "agent", result.meta)
    loaded = load_agent(tmp_path / "agent")
    assert loaded.obs_shape == (16, 16, 3)
    # deployed on the env's 24-pixel frames: resized as in training
    evaluation = evaluate_policy(deployed(loaded), "MountainCarContinuous-v0",
                                 params.env["MountainCarContinuous-v0"], 1, 0)  # fmt: skip
    assert evaluation.episodes == 1 and np.isfinite(evaluation.return_mean)
    # without the setting, the run's meta stays as before (no image_size key)
    assert "image_size" not in parse_params(_params()).train["drq-run"].model_dump()


def test_image_size_is_refused_where_no_frame_is_read():
    raw = _params()
    raw["train"]["drq-run"]["image_size"] = 16
    raw["sac"] = {**raw["drq"], "network": {**raw["drq"]["network"], "obs": "state"}}
    raw["sac"].pop("image_pad")
    raw["train"]["state"] = {"env": "MountainCarContinuous-v0", "method": "sac", "steps": 40,
                             "seed": 0, "image_size": 16}  # fmt: skip
    raw["train"]["ppo"] = {"env": "MountainCarContinuous-v0", "method": "ppo", "steps": 64,
                           "seed": 0, "image_size": 16}  # fmt: skip
    raw["ppo"] = {}
    with pytest.raises(ConfigError) as err:
        check_params(parse_params(raw))
    message = str(err.value)
    assert "train.ppo.image_size: applies to method" in message
    assert "train.state.image_size: the run's agent reads the state" in message


def test_offline_frames_and_masks_are_resized_with_the_run():
    from pipeline.core.envs.wrappers import resize_frame
    from pipeline.dataset.transitions import OfflineTransitions, mask_specs, with_frame_size

    rng = np.random.default_rng(0)
    obs = rng.integers(0, 256, (4, 24, 24, 3), dtype=np.uint8)
    mask = np.zeros((4, 1, 24, 24), np.uint8)
    mask[:, :, :12] = 255  # the top half
    data = OfflineTransitions(
        obs=obs, episode_start=np.zeros(4, np.int64), obs_index=np.arange(3),
        action=np.zeros((3, 1), np.float32), reward=np.zeros(3, np.float32),
        terminated=np.zeros(3, bool), specs=mask_specs((24, 24)),
        fields={"mask": mask, "has_mask": np.ones(4, bool)},
    )  # fmt: skip
    small = with_frame_size(data, 16)
    assert small.obs.shape == (4, 16, 16, 3) and small["mask"].shape == (4, 1, 16, 16)
    np.testing.assert_array_equal(small.obs[2], resize_frame(obs[2], 16))
    assert small["mask"][0, 0, :7].min() == 255 and small["mask"][0, 0, 9:].max() == 0
    assert with_frame_size(data, 24) is data


def _batch(seed: int = 0, n: int = 8) -> dict[str, torch.Tensor]:
    rng = np.random.default_rng(seed)
    return {
        "obs": torch.as_tensor(rng.integers(0, 256, (n, 6, 24, 24), dtype=np.uint8)),
        "next_obs": torch.as_tensor(rng.integers(0, 256, (n, 6, 24, 24), dtype=np.uint8)),
        "action": torch.as_tensor(rng.uniform(-1, 1, (n, 1)), dtype=torch.float32),
        "reward": torch.ones(n), "done": torch.zeros(n),
    }  # fmt: skip


def _unchanged(before: list[torch.Tensor], module: torch.nn.Module) -> bool:
    return all(torch.equal(a, p) for a, p in zip(before, module.parameters(), strict=True))


def test_drqs_actor_has_its_own_head_on_the_critics_convs():
    """DrQ's actor (the default of `drq`): an FC + LayerNorm head of its own over the critic's
    conv map. The actor's loss trains that head and no conv (the map is read detached); the
    critic's step trains the convs and not the head; SAC keeps SAC-AE's shared features."""
    space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
    drq = DrQAgent((24, 24, 3), space, DrQParams.model_validate(_params()["drq"]), seed=1)
    sac = SACAgent((24, 24, 3), space, SACParams.model_validate(_params()["drq"]), seed=1)
    assert drq.cfg.actor_encoder == "own" and sac.cfg.actor_encoder == "shared"
    assert sac.actor_head is None and drq.actor_head is not None
    assert "actor_head" in drq._modules() and "actor_head" not in sac._modules()
    # the actor's optimiser holds the head; the critic's does not
    actor_params = {id(p) for g in drq.actor_optimizer.param_groups for p in g["params"]}
    critic_params = {id(p) for g in drq.critic_optimizer.param_groups for p in g["params"]}
    head = {id(p) for p in drq.actor_head.parameters()}
    assert head <= actor_params and not head & critic_params
    # the networks SAC shares are built as SAC builds them: the head comes last
    for name in ("encoder", "critic", "actor"):
        assert _unchanged(list(sac._modules()[name].parameters()), drq._modules()[name]), name

    b = _batch()
    convs = [p.detach().clone() for p in drq.encoder.convs.parameters()]
    heads = [p.detach().clone() for p in drq.actor_head.parameters()]
    step = drq.update_critic(b)
    assert not _unchanged(convs, drq.encoder.convs) and _unchanged(heads, drq.actor_head)
    assert step.obs_map is not None and not step.obs_map.requires_grad
    convs = [p.detach().clone() for p in drq.encoder.convs.parameters()]
    drq.update_actor_and_alpha(step.h, step.next_h, b, step.obs_map)
    assert _unchanged(convs, drq.encoder.convs) and not _unchanged(heads, drq.actor_head)
    # the actor acts on its own head: unlike the critic's features, the head's output
    x = b["obs"][:1]
    with torch.no_grad():
        fmap = drq.encoder.feature_map(drq.encoder.scale(x))
        torch.testing.assert_close(drq.actor_features(x), drq.actor_head(fmap))
        assert not torch.equal(drq.actor_features(x), drq.features(x))


def _conv_passes(agent, run) -> int:
    """How many times `run()` runs the first conv of the agent's online and target encoders."""
    calls = []
    hooks = [
        encoder.convs[0].register_forward_hook(lambda *_: calls.append(1))
        for encoder in (agent.encoder, agent.encoder_target)
    ]
    try:
        run()
    finally:
        for hook in hooks:
            hook.remove()
    return len(calls)


def test_drqs_actor_step_reuses_the_critic_steps_conv_map():
    """DrQ-v2 encodes o_t once for the critic and the actor: with its own actor head drq makes
    as many conv passes per two updates as SAC (6: o_t, o_t+1 online and target, twice), and
    the actor's head reads the map the critic step computed, before the critic's optimiser step,
    as the shared actor reads the critic's features."""
    space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
    cfg = _params()["drq"]
    drq = DrQAgent((24, 24, 3), space, DrQParams.model_validate(cfg), seed=1)
    sac = SACAgent((24, 24, 3), space, SACParams.model_validate(cfg), seed=1)
    assert drq.cfg.actor_update_freq == 2
    for agent in (drq, sac):
        assert _conv_passes(agent, lambda a=agent: [a.update(_batch(i)) for i in range(2)]) == 6
    b = _batch(5)
    with torch.no_grad():
        before = drq.encoder.feature_map(drq.encoder.scale(b["obs"]))
    step = drq.update_critic(b)
    torch.testing.assert_close(step.obs_map, before)  # the map before the critic's step
    with torch.no_grad():
        after = drq.encoder.feature_map(drq.encoder.scale(b["obs"]))
    assert not torch.equal(after, before)  # the step moved the convs


def test_an_agent_saved_without_actor_encoder_loads_with_the_shared_head(tmp_path):
    """A drq agent saved before `actor_encoder` existed (its config has no such key) loads as
    it was trained, reading the critic's features; one with DrQ's own head comes back with it."""
    from pipeline.learn.agents.checkpoint import read_meta

    space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
    old = DrQParams.model_validate({**_params()["drq"], "actor_encoder": "shared"})
    new = DrQParams.model_validate(_params()["drq"])
    frames = torch.as_tensor(np.random.default_rng(3).integers(0, 256, (6, 24, 24), np.uint8))
    for name, cfg in (("old", old), ("new", new)):
        agent = DrQAgent((24, 24, 3), space, cfg, seed=2)
        agent.update(_batch(4))
        agent.save(tmp_path / name)
        config = read_meta(tmp_path / name)["config"]
        assert ("actor_encoder" in config) == (name == "new")  # left out where shared
        loaded = SACAgent.load(tmp_path / name, params_class=DrQParams)
        assert loaded.cfg.actor_encoder == cfg.actor_encoder
        np.testing.assert_array_equal(loaded.act(frames, True), agent.act(frames, True))
        warm = DrQAgent((24, 24, 3), space, cfg, seed=9)
        warm.load_weights(tmp_path / name)  # a labelling round's warm start
        np.testing.assert_array_equal(warm.act(frames, True), agent.act(frames, True))


@pytest.mark.parametrize("method", ["erpv", "semore"])
def test_own_actor_head_is_refused_where_the_paper_shares_features(method):
    from pipeline.learn.methods.table import get_method as method_of

    raw = {**_params()["drq"], "actor_encoder": "own"}
    raw.pop("image_pad")
    with pytest.raises(ValueError, match="actor_encoder must be shared"):
        method_of(method).params_class.model_validate(raw)
    with pytest.raises(ValueError, match=r"which\s+frames have"):
        SACParams.model_validate({**raw, "network": {**raw["network"], "obs": "state"}})


def test_a_coupled_actor_trains_the_critics_encoder_by_its_own_loss():
    """`actor_encoder: coupled`: the actor reads the critic encoder's features with their
    gradient, so its step moves the encoder (by the actor's optimiser), while `shared` (SAC-AE)
    leaves the encoder to the critic's step. Q reads the features detached: the critic's
    weights get no actor gradient."""
    space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
    raw = {**_params()["drq"], "image_pad": 0}
    moved = {}
    for mode in ("shared", "coupled"):
        agent = SACAgent(
            (24, 24, 3), space, SACParams.model_validate({**raw, "actor_encoder": mode}), seed=1
        )
        b = _batch(3)
        step = agent.update_critic(b)
        encoder = [p.detach().clone() for p in agent.encoder.parameters()]
        actor = [p.detach().clone() for p in agent.actor.parameters()]
        agent.critic_optimizer.zero_grad(set_to_none=True)
        agent.update_actor_and_alpha(step.h, step.next_h, b)
        moved[mode] = not _unchanged(encoder, agent.encoder)
        assert not _unchanged(actor, agent.actor)
        assert all(p.grad is None or not p.grad.any() for p in agent.critic.parameters())
        x = _batch(4)["obs"][:1]
        with torch.no_grad():  # it acts on the critic's features either way
            torch.testing.assert_close(agent.actor_features(x), agent.features(x))
    assert moved == {"shared": False, "coupled": True}


def test_a_coupled_actor_is_erpvs_option_and_resumes_exactly():
    """ERPv takes `coupled` (its actor still reads the critic's encoder) and refuses `own`;
    a coupled agent's training state (the actor's optimiser holds the encoder's moments) comes
    back so that the next updates are the same as without the stop."""
    from pipeline.learn.methods.erpv import ERPvParams

    raw = {**_params()["drq"], "image_pad": 0, "actor_update_freq": 1}
    assert ERPvParams.model_validate({**raw, "actor_encoder": "coupled"}).actor_encoder == "coupled"
    space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
    cfg = SACParams.model_validate({**raw, "actor_encoder": "coupled"})
    straight = SACAgent((24, 24, 3), space, cfg, seed=1)
    stopped = SACAgent((24, 24, 3), space, cfg, seed=1)
    for i in range(2):
        torch.manual_seed(i)
        straight.update(_batch(i))
        torch.manual_seed(i)
        stopped.update(_batch(i))
    state = stopped.training_state()  # networks, optimisers (the encoder's moments), counters
    resumed = SACAgent((24, 24, 3), space, cfg, seed=7)
    resumed.load_training_state(state)
    for i in range(2, 4):
        torch.manual_seed(i)
        straight.update(_batch(i))
        torch.manual_seed(i)
        resumed.update(_batch(i))
    for name, module in straight._modules().items():
        assert _unchanged(list(module.parameters()), resumed._modules()[name]), name


def test_the_critic_step_logs_how_far_the_features_tell_rows_apart():
    """`encoder_spread`: the std over the batch's rows (ddof 1) of the critic's features, mean
    over features; 0 for a batch of one frame repeated, where nothing tells the rows apart."""
    space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
    agent = SACAgent((24, 24, 3), space, SACParams.model_validate(_params()["drq"]), seed=1)
    b = _batch(2)
    with torch.no_grad():
        expected = agent.features(b["obs"]).std(0, correction=1).mean()
    torch.testing.assert_close(agent.update_critic(b).metrics["encoder_spread"], expected)
    assert float(expected) > 0
    same = dict(b, obs=b["obs"][:1].expand_as(b["obs"]).clone())
    assert float(agent.update_critic(same).metrics["encoder_spread"]) == 0.0
    one = {k: v[:1] for k, v in b.items()}  # one row has no spread, and no warning says so
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert math.isnan(float(agent.update_critic(one).metrics["encoder_spread"]))


def test_the_actor_step_logs_how_far_its_mean_action_varies_over_the_rows():
    """`action_spread`: the std over the batch's rows (ddof 1) of the actor's mean action (the
    deterministic action, before the step), mean over the action's dimensions; 0 for a batch of
    one frame repeated; NaN, silently, for one row."""
    space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    cfg = SACParams.model_validate(_params()["drq"])
    agent = SACAgent((24, 24, 3), space, cfg, seed=1)
    b = _batch(2)
    step = agent.update_critic(b)
    with torch.no_grad():
        _, _, mean = agent.actor(agent.actor_features(b["obs"], step.h.detach(), step.obs_map))
        expected = mean.std(0, correction=1).mean()
    logged = agent.update_actor_and_alpha(step.h.detach(), step.next_h, b, step.obs_map)
    torch.testing.assert_close(logged["action_spread"], expected)
    assert float(expected) > 0
    same = dict(b, obs=b["obs"][:1].expand_as(b["obs"]).clone())
    step = agent.update_critic(same)
    logged = agent.update_actor_and_alpha(step.h.detach(), step.next_h, same, step.obs_map)
    assert float(logged["action_spread"]) == 0.0
    one = {k: v[:1] for k, v in b.items()}
    step = agent.update_critic(one)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        logged = agent.update_actor_and_alpha(step.h.detach(), step.next_h, one, step.obs_map)
    assert math.isnan(float(logged["action_spread"]))


def test_an_agent_loaded_for_acting_has_no_optimisers_and_says_so(tmp_path):
    """`load` builds the agent for acting (no Adam: building one imports torch._dynamo, about
    2 s of every evaluation); asked to train, it says how to get an agent that trains."""
    space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
    agent = SACAgent((24, 24, 3), space, SACParams.model_validate(_params()["drq"]), seed=1)
    agent.update(_batch(0))
    agent.save(tmp_path / "agent")
    loaded = SACAgent.load(tmp_path / "agent")
    assert not loaded.trains and not hasattr(loaded, "actor_optimizer")
    x = _batch(1)["obs"][0]
    np.testing.assert_array_equal(loaded.act(x, True), agent.act(x, True))
    for call in (lambda: loaded.update(_batch(2)), loaded.training_state):
        with pytest.raises(RuntimeError, match=r"built for acting.*load_weights"):
            call()
