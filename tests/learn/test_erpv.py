import math

import gymnasium as gym
import numpy as np
import pytest
import torch

from pipeline.dataset.transitions import OfflineTransitions, action_label_specs
from pipeline.learn.agents.loop import train_off_policy
from pipeline.learn.agents.off_policy import NetworkParams, sac_alpha_loss
from pipeline.learn.agents.replay import ReplayBuffer
from pipeline.learn.agents.sac import SACAgent
from pipeline.learn.critic import pretrain_vlm_critic
from pipeline.learn.evaluation import deployed, play_episodes
from pipeline.learn.methods.erpv import (
    ERPvAgent,
    ERPvParams,
    VLMCritic,
    action_confidence,
    minmax_scale,
    ver_regulariser,
    vpg_loss,
)
from pipeline.learn.methods.table import load_agent
from tests.toy_envs import PointMass

SPACE = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)


pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


def small_cfg(**overrides) -> ERPvParams:
    network = NetworkParams(obs="state", hidden_dim=64, feature_dim=16, transition_hidden_dim=32)
    return ERPvParams(network=network, **{"batch_size": 64, **overrides})


# --- loss terms against hand computations -------------------------------------------------------


def test_minmax_scale():
    torch.testing.assert_close(
        minmax_scale(torch.tensor([1.0, 3.0, 2.0])), torch.tensor([0.0, 1.0, 0.5])
    )
    constant = minmax_scale(torch.tensor([2.0, 2.0, 2.0]))
    assert torch.isfinite(constant).all() and (constant == 0).all()
    assert minmax_scale(torch.tensor([5.0])).item() == 0.0


def test_vpg_gate_closed_gives_no_guidance():
    a_v = torch.tensor([[1.0], [-1.0], [0.5]])
    a_r = torch.zeros(3, 1, requires_grad=True)
    # scaled Q_v (0, 0.1, 1) <= scaled Q_r (0, 0.5, 1) on every row
    loss, q_f = vpg_loss(torch.tensor([0.0, 1.0, 10.0]), torch.tensor([0.0, 5.0, 10.0]), a_v, a_r)
    assert loss.item() == 0.0 and (q_f == 0).all()
    loss.backward()
    assert (a_r.grad == 0).all()
    # scaling is per batch: raw Q_v below Q_r everywhere with the same ranking closes the gate too
    _, q_f = vpg_loss(torch.tensor([1.0, 2.0, 3.0]), torch.tensor([11.0, 12.0, 13.0]), a_v, a_r)
    assert (q_f == 0).all()


def test_vpg_gate_open_by_hand():
    q_v = torch.tensor([0.0, 2.0, 4.0])  # scaled 0, 0.5, 1
    q_r = torch.tensor([10.0, 30.0, 20.0])  # scaled 0, 1, 0.5
    a_v = torch.tensor([[1.0, 0.0], [0.0, 0.0], [0.5, -0.5]])
    a_r = torch.tensor([[0.0, 0.0], [1.0, 1.0], [0.0, 0.5]], requires_grad=True)
    loss, q_f = vpg_loss(q_v, q_r, a_v, a_r)
    torch.testing.assert_close(q_f, torch.tensor([0.0, 0.0, 0.5]))  # max(0, Q_v - Q_r)
    # eq. 3: mean over rows of Q_f * ||a_v - a_r||^2 = (0 + 0 + 0.5 * (0.25 + 1)) / 3
    assert loss.item() == pytest.approx(0.5 * 1.25 / 3)
    loss.backward()
    expected = torch.tensor([[0.0, 0.0], [0.0, 0.0], [-2 * 0.5 * 0.5 / 3, -2 * 0.5 * -1.0 / 3]])
    torch.testing.assert_close(a_r.grad, expected)  # only the open row pulls a_r towards a_v


def test_action_confidence_and_alpha_target_by_hand():
    next_h = torch.tensor([[1.0, 0.0]])
    mu = torch.tensor([[0.0, 0.0]])
    # deterministic T (sigma 1): L_T = mean((mu - s')^2) = 0.5, G = 2
    g = action_confidence(next_h, mu, torch.ones(1, 2), eps=1e-6)
    assert g.item() == pytest.approx(2.0)
    assert torch.sigmoid(g).item() == pytest.approx(1 / (1 + math.exp(-2)))  # alpha_bar
    # learned sigma 2: L_T = mean(((mu - s') / 2)^2 + log 2) = (0.25 + 2 log 2) / 2
    g = action_confidence(next_h, mu, torch.full((1, 2), 2.0), eps=1e-6)
    assert g.item() == pytest.approx(2 / (0.25 + 2 * math.log(2)))
    # a confident, exact prediction has L_T < 0: the floor keeps G finite
    g = action_confidence(next_h, next_h, torch.full((1, 2), 0.01), eps=1e-3)
    assert g.item() == pytest.approx(1e3)


def test_alpha_loss_eq7_by_hand():
    log_alpha = torch.tensor(math.log(0.5), requires_grad=True)
    log_pi, target_entropy = torch.tensor([-1.0, -3.0]), -1.0
    g = torch.tensor([0.0, 2.0])  # alpha_bar = 0.5, sigmoid(2)
    # as ERPvAgent adds it (SACAgent.update_actor_and_alpha + entropy_regulariser)
    alpha = log_alpha.exp()
    loss = sac_alpha_loss(alpha, log_pi, target_entropy) + 10.0 * ver_regulariser(alpha, g)
    l_alpha = (0.5 * 2 + 0.5 * 4) / 2  # eq. 11: E[-alpha (log pi + H_bar)]
    reg = ((0.5 - 0.5) ** 2 + (0.5 - 1 / (1 + math.exp(-2))) ** 2) / 2
    assert loss.item() == pytest.approx(l_alpha + 10.0 * reg)
    loss.backward()
    # d/dlog_alpha = alpha * (-(log pi + H_bar)).mean() + 10 * alpha * 2 * mean(alpha - alpha_bar)
    expected = 0.5 * 3.0 + 10 * 0.5 * 2 * ((0.5 - 0.5) + (0.5 - 1 / (1 + math.exp(-2)))) / 2
    assert log_alpha.grad.item() == pytest.approx(expected)


# --- the agent wires them to labelled rows ------------------------------------------------------


def vlm_critic(seed: int = 0, cfg: ERPvParams | None = None) -> VLMCritic:
    torch.manual_seed(seed)
    return VLMCritic((1,), SPACE.low, SPACE.high, (cfg or small_cfg()).network).freeze()


def test_guidance_uses_labelled_rows_only():
    agent = ERPvAgent((1,), SPACE, small_cfg(lambda_1=3.0, lambda_2=5.0), vlm_critic())
    calls = []

    def fake_c_v(obs, a_v):  # Q_v = C_V(o, a_v) on the labelled rows
        calls.append((obs.clone(), a_v.clone()))
        return obs[:, 0] * 2.0

    agent.vlm_critic.forward = fake_c_v
    batch = {
        "obs": torch.tensor([[0.0], [1.0], [2.0], [3.0]]),
        "a_v": torch.tensor([[0.5], [-0.5], [0.9], [1.0]]),
        "has_label": torch.tensor([True, True, False, True]),
    }
    h = agent.encoder(batch["obs"]).detach()
    pi = torch.tensor([[0.0], [0.0], [0.0], [0.2]], requires_grad=True)
    q_pi = torch.tensor([5.0, 1.0, 0.0, 3.0])  # Q_r on rows 0, 1, 3: scaled 1, 0, 0.5
    loss, metrics = agent.policy_guidance(h, pi, q_pi, batch)
    (obs_seen, a_v_seen) = calls[0]
    torch.testing.assert_close(obs_seen, torch.tensor([[0.0], [1.0], [3.0]]))
    torch.testing.assert_close(a_v_seen, torch.tensor([[0.5], [-0.5], [1.0]]))
    # Q_v scaled 0, 1/3, 1 -> Q_f = (0, 1/3, 0.5); L_V = (0 + 1/3 * 0.25 + 0.5 * 0.64) / 3
    expected_l_v = (0.25 / 3 + 0.5 * 0.64) / 3
    assert loss.item() == pytest.approx(3.0 * expected_l_v)  # eq. 4: lambda_1 L_V
    assert metrics["vpg/gate_open"].item() == pytest.approx(2 / 3)
    assert metrics["vpg/q_f"].item() == pytest.approx((1 / 3 + 0.5) / 3)
    assert metrics["labelled_fraction"].item() == pytest.approx(0.75)

    next_h = agent.encoder(batch["obs"] + 1).detach()
    reg, ver = agent.entropy_regulariser(h, next_h, batch)
    with torch.no_grad():
        rows = batch["has_label"]
        mu, sigma = agent.transition(h[rows], batch["a_v"][rows])
        g = 1 / (((mu - next_h[rows]) / sigma).pow(2) + sigma.log()).mean(-1)
        expected_reg = (0.1 - torch.sigmoid(g)).pow(2).mean()  # alpha_0 = 0.1
    torch.testing.assert_close(ver["ver/G"], g.mean())
    assert reg.item() == pytest.approx(5.0 * expected_reg.item(), rel=1e-5)  # eq. 7

    unlabelled = {**batch, "has_label": torch.zeros(4, dtype=torch.bool)}
    assert agent.policy_guidance(h, pi, q_pi, unlabelled) == (None, {})
    assert agent.entropy_regulariser(h, next_h, unlabelled) == (None, {})


def test_ver_on_own_reads_the_agents_own_labelled_rows_only():
    """`ver_on: own`: G on the labelled rows of labelling rounds' parts (part >= 1: transitions
    the agent collected) and no other; none in the batch, no VER term. The default reads every
    labelled row (part 0, the dataset's recorded transitions, included)."""
    batch = {
        "obs": torch.tensor([[0.0], [1.0], [2.0], [3.0], [4.0]]),
        "a_v": torch.tensor([[0.5], [-0.5], [0.9], [1.0], [0.1]]),
        "has_label": torch.tensor([True, True, False, True, False]),
        # the dataset, round 1, round 1 unlabelled, round 2, online
        "part": torch.tensor([0, 1, 1, 2, -1]),
    }
    own = ERPvAgent((1,), SPACE, small_cfg(lambda_2=5.0, ver_on="own"), vlm_critic())
    recorded = ERPvAgent((1,), SPACE, small_cfg(lambda_2=5.0), vlm_critic())
    h = own.encoder(batch["obs"]).detach()
    next_h = own.encoder(batch["obs"] + 1).detach()
    reg, ver = own.entropy_regulariser(h, next_h, batch)
    with torch.no_grad():
        for agent, rows in ((own, [1, 3]), (recorded, [0, 1, 3])):
            h, next_h = agent.encoder(batch["obs"]), agent.encoder(batch["obs"] + 1)
            mu, sigma = agent.transition(h[rows], batch["a_v"][rows])
            g = 1 / (((mu - next_h[rows]) / sigma).pow(2) + sigma.log()).mean(-1)
            expected = 5.0 * (0.1 - torch.sigmoid(g)).pow(2).mean()
            got, metrics = agent.entropy_regulariser(h, next_h, batch)
            assert got.item() == pytest.approx(expected.item(), rel=1e-5)
            torch.testing.assert_close(metrics["ver/G"], g.mean())
    assert ver["ver/own_rows"].item() == pytest.approx(2 / 5)
    assert reg is not None
    dataset_only = {**batch, "part": torch.tensor([0, 0, 0, 0, -1])}
    assert own.entropy_regulariser(h, next_h, dataset_only) == (None, {})
    assert recorded.entropy_regulariser(h, next_h, dataset_only)[0] is not None


def test_ver_on_own_needs_a_round():
    """A run with `ver_on: own` that no round continues would never have a VER term: refused,
    naming the run and the fix; the same run continued by a round passes."""
    from pipeline.core.config import TrainRun, load_params
    from pipeline.learn.methods.table import get_method
    from tests.conftest import REPO

    params = load_params(REPO / "params.yaml")
    run = TrainRun(env="cartpole-swingup", method="erpv", steps=10, seed=0,
                   overrides={"ver_on": "own"})  # fmt: skip
    problems = get_method("erpv").check_run("solo", run, params)
    assert any("train.solo: ver_on own" in p and "no round of `rounds`" in p for p in problems)
    rounds = [name for name, r in params.rounds.items() if params.train[r.run].method == "erpv"]
    if rounds:  # a run that a round continues
        continued = params.rounds[rounds[0]].run
        problems = get_method("erpv").check_run(continued, run, params)
        assert not any("ver_on own" in p for p in problems)


def chain_transitions(
    episodes: int, a_v: dict[int, float], missing_label_at_3: bool = False, seed: int = 0
) -> OfflineTransitions:
    """States 0..5 one-hot; from s the step goes to s + 1 whatever the action; reward = action;
    the step from 4 terminates. The VLM's label at s is a_v[s] (none at 5); with
    `missing_label_at_3`, every other episode has no label at state 3."""
    rng = np.random.default_rng(seed)
    eye = np.eye(6, dtype=np.float32)
    cols: dict[str, list] = {k: [] for k in ("obs", "start", "index", "action", "a_v", "has")}
    labels, has_label = [], []
    for e in range(episodes):
        first = len(cols["obs"])
        for s in range(6):
            cols["obs"].append(eye[s])
            cols["start"].append(first)
            missing = s == 5 or (missing_label_at_3 and s == 3 and e % 2 == 0)
            labels.append([0.0 if missing else a_v[s]])
            has_label.append(not missing)
        for s in range(5):
            cols["index"].append(first + s)
            cols["action"].append([rng.uniform(-1, 1)])
    index = np.asarray(cols["index"])
    labels, has_label = np.asarray(labels, np.float32), np.asarray(has_label)
    action = np.asarray(cols["action"], np.float32)
    return OfflineTransitions(
        obs=np.stack(cols["obs"]),
        episode_start=np.asarray(cols["start"]),
        obs_index=index,
        action=action,
        reward=action[:, 0].copy(),
        terminated=np.tile([False, False, False, False, True], episodes),
        specs=action_label_specs(1),
        fields={
            "a_v": labels[index],
            "has_label": has_label[index],
            "next_a_v": labels[index + 1],
            "has_next_label": has_label[index + 1],
        },
    )


def test_pretrained_vlm_critic_reaches_the_td_fixed_point_of_the_vlm_policy():
    """Q(s, a) = a + gamma Q(s + 1, a_v(s + 1)): the VLM says +1 everywhere but at state 2."""
    a_v = {0: 1.0, 1: 1.0, 2: -1.0, 3: 1.0, 4: 1.0}
    gamma = 0.9
    offset = [0.0] * 5  # Q(s, a) - a
    for s in (3, 2, 1, 0):
        offset[s] = gamma * (a_v[s + 1] + offset[s + 1])
    data = chain_transitions(200, a_v, missing_label_at_3=True)
    cfg = small_cfg(gamma=gamma, batch_size=128, critic_tau=0.05, target_update_freq=1)
    critic, logs = pretrain_vlm_critic(
        data, SPACE, cfg, 1500, seed=0, log_every=500, progress=False
    )
    assert logs[-1]["td_loss"] < logs[0]["td_loss"]
    assert not any(p.requires_grad for p in critic.parameters())
    obs = torch.eye(6)[:5]
    with torch.no_grad():
        q_plus = critic(obs, torch.ones(5, 1)).numpy()
        q_minus = critic(obs, -torch.ones(5, 1)).numpy()
    assert (q_plus > q_minus + 1.0).all()  # the better action ranks higher in every state
    # within 0.1 of the fixed point; transitions into state 3 without a label are left out
    # (bootstrapping from a_v = 0 there would pull Q(2, .) down by 0.45)
    np.testing.assert_allclose(q_plus, 1 + np.array(offset), atol=0.1)
    np.testing.assert_allclose(q_minus, -1 + np.array(offset), atol=0.1)


def test_an_interrupted_critic_pretraining_resumes_to_the_uninterrupted_result(
    tmp_path, monkeypatch
):
    """Interrupted after its resume state at update 50, C_V's pre-training goes on from it to the
    uninterrupted run's weights and logs; a state of other settings is not read."""
    from pipeline.learn.agents.replay import TransitionStore
    from pipeline.learn.agents.resume import Resume
    from tests.conftest import count_calls

    data = chain_transitions(120, dict.fromkeys(range(5), 1.0))
    cfg = small_cfg()
    run = dict(steps=100, seed=3, log_every=30, progress=False)
    whole, whole_logs = pretrain_vlm_critic(data, SPACE, cfg, **run)

    count_calls(monkeypatch, TransitionStore, "sample", interrupt_at=70)
    with pytest.raises(KeyboardInterrupt):
        pretrain_vlm_critic(data, SPACE, cfg, **run, resume=Resume(tmp_path, "this run", 50))
    monkeypatch.undo()
    assert (tmp_path / Resume.STATE).exists()
    assert Resume(tmp_path, "other settings", 50).load() is None  # another fingerprint

    calls = count_calls(monkeypatch, TransitionStore, "sample")
    resumed, logs = pretrain_vlm_critic(
        data, SPACE, cfg, **run, resume=Resume(tmp_path, "this run", 50)
    )
    assert calls[0] == 50  # updates 51-100 only
    assert logs == whole_logs and len(logs) == 4  # steps 30, 60, 90, 100
    for (name, a), b in zip(whole.state_dict().items(), resumed.state_dict().values(), strict=True):
        assert torch.equal(a, b), name


class _Reads:
    """A config that records which of its fields are read."""

    def __init__(self, cfg):
        self._cfg, self.read = cfg, set()

    def __getattr__(self, name):
        self.read.add(name)
        return getattr(self._cfg, name)


def test_the_critic_stage_depends_on_exactly_the_erpv_keys_pretraining_reads():
    """pretrain_critic@<env> depends on its env's critic_spec (data/critics/<env>.json), which
    holds CRITIC_KEYS, what pretrain_vlm_critic reads (plus the device it is given and the
    stage's thread count): a new read breaks this test, not the reruns. One env's spec holds
    nothing of another's, so listing a new env in critic.envs leaves the others' specs as they
    were."""
    import yaml

    from pipeline.core.config import parse_params
    from pipeline.learn.methods.erpv import CRITIC_KEYS, critic_spec
    from tests.conftest import REPO

    cfg = _Reads(small_cfg())
    pretrain_vlm_critic(chain_transitions(50, dict.fromkeys(range(5), 1.0)), SPACE, cfg, 3,
                        seed=0, progress=False)  # fmt: skip
    assert cfg.read | {"device", "threads"} == set(CRITIC_KEYS)
    stage = yaml.safe_load((REPO / "dvc.yaml").read_text())["stages"]["pretrain_critic"]["do"]
    assert "params" not in stage and "data/critics/${item}.json" in stage["deps"]
    raw = yaml.safe_load((REPO / "params.yaml").read_text())
    listed = raw["critic"]["envs"]
    before = {env: critic_spec(parse_params(raw), env) for env in raw["envs"]}
    assert set(before[listed[0]]["hyper_params"]) == set(CRITIC_KEYS)
    extra = next(env for env in raw["envs"] if env not in listed)
    raw["critic"]["envs"] = [*listed, extra]
    after = {env: critic_spec(parse_params(raw), env) for env in raw["envs"]}
    assert [env for env in raw["envs"] if after[env] != before[env]] == [extra]
    raw["erpv"]["lambda_1"] = 123.0  # a key C_V does not read: no spec changes
    assert {env: critic_spec(parse_params(raw), env) for env in raw["envs"]} == after


def test_vlm_critic_save_load_and_compatibility_checks(tmp_path):
    critic = vlm_critic(seed=4)
    critic.save(tmp_path / "cv", data_hashes={"dataset": "abc123"})
    loaded = VLMCritic.load(tmp_path / "cv")
    assert loaded.data_hashes == {"dataset": "abc123"}
    assert not any(p.requires_grad for p in loaded.parameters()) and not loaded.training
    obs, act = torch.randn(7, 1), torch.rand(7, 1) * 2 - 1
    torch.testing.assert_close(loaded(obs, act), critic(obs, act))
    with pytest.raises(ValueError, match="acts in"):
        ERPvAgent((1,), gym.spaces.Box(-2.0, 2.0, (1,), np.float32), small_cfg(), critic)
    with pytest.raises(ValueError, match="reads state input"):
        ERPvAgent((3,), SPACE, small_cfg(), critic)


def point_mass_dataset(episodes: int, seed: int = 0) -> OfflineTransitions:
    """Random play in PointMass with a half-right VLM: it says 'towards 0' except where x > 0.5."""
    env, rng = PointMass(), np.random.default_rng(seed)
    obs, start, index, action, reward, term, labels = [], [], [], [], [], [], []
    for e in range(episodes):
        o, _ = env.reset(seed=seed + e)
        first = len(obs)
        done = False
        while True:
            obs.append(o["state"])
            start.append(first)
            x = float(o["state"][0])
            labels.append([1.0 if x > 0.5 else -float(np.sign(x))])
            if done:
                break
            a = rng.uniform(-1, 1, 1).astype(np.float32)
            o, r, terminated, truncated, _ = env.step(a)
            index.append(len(obs) - 1)
            action.append(a)
            reward.append(r)
            term.append(terminated)
            done = terminated or truncated
    index, labels = np.asarray(index), np.asarray(labels, np.float32)
    fields = {
        "a_v": labels[index], "has_label": np.ones(len(index), bool),
        "next_a_v": labels[index + 1], "has_next_label": np.ones(len(index), bool),
    }  # fmt: skip
    return OfflineTransitions(
        obs=np.asarray(obs, np.float32), episode_start=np.asarray(start), obs_index=index,
        action=np.asarray(action), reward=np.asarray(reward, np.float32),
        terminated=np.asarray(term), specs=action_label_specs(1), fields=fields,
    )  # fmt: skip


def test_erpv_end_to_end_on_point_mass(tmp_path):
    """Offline labelled data -> C_V -> ERPv training with mixed batches -> a checkpoint that
    SACAgent.load acts with; the per-update metrics of ERPv figure 5 are logged."""
    data = point_mass_dataset(30)
    cfg = small_cfg(offline_fraction=0.5, start_steps=100, log_every=100)
    critic, _ = pretrain_vlm_critic(data, SPACE, cfg, 200, seed=0, progress=False)
    env = PointMass()
    agent = ERPvAgent.for_env(env, cfg, vlm_critic=critic, seed=0)
    buffer = ReplayBuffer(
        "state", (1,), 1, 5000, offline=data, offline_fraction=cfg.offline_fraction
    )
    _, logs = train_off_policy(env, agent, buffer, 300, seed=0, progress=False)
    last = logs[-1]
    for key in ("vpg/q_f", "vpg/gate_open", "alpha", "ver/G", "ver/alpha_target", "vpg/loss"):
        assert key in last and math.isfinite(last[key]), key
    assert 0.0 <= last["vpg/gate_open"] <= 1.0 and last["labelled_fraction"] == pytest.approx(0.5)
    # VER pulls alpha towards sigmoid(G) > 0.5 (the paper's eq. 7 as printed), from alpha_0 = 0.1
    assert last["alpha"] > 0.1
    agent.save(tmp_path / "agent")
    loaded = SACAgent.load(tmp_path / "agent", params_class=ERPvParams)  # ERPv's settings
    assert type(loaded) is SACAgent and loaded.cfg == cfg
    by_method = load_agent(tmp_path / "agent")  # the method the checkpoint records: erpv
    assert type(by_method) is SACAgent and by_method.cfg == cfg
    x = np.array([0.3], np.float32)
    np.testing.assert_array_equal(agent.act(x, True), loaded.act(x, True))
    np.testing.assert_array_equal(agent.act(x, True), by_method.act(x, True))
    assert np.isfinite(play_episodes(PointMass(), deployed(loaded), 1, seed=0).returns).all()


def test_an_erpv_checkpoint_needs_its_params_class_to_load_as_sac(tmp_path):
    """SACAgent.load on ERPv's checkpoint without ERPv's params says how to load it."""
    from pipeline.learn.agents.checkpoint import CheckpointError
    from pipeline.learn.methods.erpv import ERPvParams

    cfg = ERPvParams(network=NetworkParams(obs="state", hidden_dim=8, feature_dim=4))
    space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
    agent = SACAgent((3,), space, cfg)
    agent.algorithm = "erpv"  # what ERPvAgent writes, without building a C_V
    agent.save(tmp_path / "a")
    with pytest.raises(CheckpointError, match="load_agent"):
        SACAgent.load(tmp_path / "a")
    assert SACAgent.load(tmp_path / "a", params_class=ERPvParams).cfg == cfg


def test_gate_scalings():
    """per_critic compares ranks under two critics; joint opens exactly where Q_v > Q_r; none is
    table 3's M2 (no gate)."""
    from pipeline.learn.methods.erpv import vpg_gate

    q_v = torch.tensor([10.0, 11.0, 12.0])  # C_V rates a_v below C_R's a_r on every row
    q_r = torch.tensor([20.0, 21.0, 22.0])
    # each scaled to [0, 1] on its own: the same ranks, a gate shut by rounding only
    assert torch.allclose(vpg_gate(q_v, q_r, "per_critic"), torch.zeros(3))
    assert torch.equal(vpg_gate(q_v, q_r, "joint"), torch.zeros(3))
    # a_v worse everywhere, but its per-critic rank is higher on row 0: per_critic opens there
    q_v2, q_r2 = torch.tensor([3.0, 1.0, 2.0]), torch.tensor([10.0, 30.0, 20.0])
    assert vpg_gate(q_v2, q_r2, "per_critic")[0] == 1.0
    assert torch.equal(vpg_gate(q_v2, q_r2, "joint"), torch.zeros(3))
    # joint: open exactly where Q_v > Q_r, by the difference over the joint span
    q_v3, q_r3 = torch.tensor([5.0, 0.0]), torch.tensor([1.0, 4.0])
    assert torch.allclose(vpg_gate(q_v3, q_r3, "joint"), torch.tensor([0.8, 0.0]))
    assert torch.equal(vpg_gate(q_v3, q_r3, "none"), torch.ones(2))


def test_the_gate_controls_random_and_mean_keep_no_selection():
    """`random` (the paper's RSF: Q_f randomly generated) draws Q_f ~ U[0, 1] from torch's RNG,
    whatever the critics say; `mean` gives every row the per_critic gate's batch mean: the same
    total weight on L_V without choosing rows."""
    from pipeline.learn.methods.erpv import vpg_gate

    q_v, q_r = torch.tensor([3.0, 1.0, 2.0, 0.0]), torch.tensor([0.0, 2.0, 1.0, 3.0])
    gate = vpg_gate(q_v, q_r, "per_critic")
    mean = vpg_gate(q_v, q_r, "mean")
    torch.testing.assert_close(mean, gate.mean().expand(4))
    assert mean.sum() == pytest.approx(gate.sum().item()) and len(set(mean.tolist())) == 1
    torch.manual_seed(3)
    first = vpg_gate(q_v, q_r, "random")
    torch.manual_seed(3)
    assert torch.equal(first, vpg_gate(q_v, q_r, "random"))  # reproducible from the seed
    torch.manual_seed(3)
    torch.testing.assert_close(first, torch.rand(4))
    assert (first >= 0).all() and (first < 1).all()


def test_ver_target_readings():
    from pipeline.learn.methods.erpv import ver_target

    g = torch.tensor([0.1, 1.0, 10.0])
    printed, text = ver_target(g, "printed"), ver_target(g, "text")
    assert torch.all(printed > 0.5) and torch.all(printed[1:] > printed[:-1])
    # sec. 3.4's reading: lower confidence, higher target temperature
    assert torch.all(text < 0.5) and torch.all(text[1:] < text[:-1])
    assert torch.allclose(printed + text, torch.ones(3))


def three_labelled_rows(gate_scaling: str) -> tuple[ERPvAgent, tuple]:
    """An agent with that gate, and policy_guidance's arguments on three labelled rows where
    the actor's action is zero."""
    agent = ERPvAgent((1,), SPACE, small_cfg(lambda_1=1.0, gate_scaling=gate_scaling), vlm_critic())
    batch = {
        "obs": torch.tensor([[0.0], [1.0], [2.0]]),
        "a_v": torch.tensor([[0.5], [-0.5], [0.9]]),
        "has_label": torch.tensor([True, True, True]),
    }
    h = agent.encoder(batch["obs"]).detach()
    pi = torch.zeros(3, 1, requires_grad=True)
    return agent, (h, pi, torch.tensor([0.0, 1.0, 2.0]), batch)


def test_gate_diagnostics_are_logged_for_the_controls():
    agent, rows = three_labelled_rows("joint")
    _, metrics = agent.policy_guidance(*rows)
    for name in ("vpg/gate_open", "vpg/zeros/gate_open", "vpg/own/gate_open", "vpg/dist_pi_a_v"):
        assert name in metrics
    # the agent's own action (zeros here) and the all-zero a_v are the same control
    assert metrics["vpg/zeros/q_f"] == metrics["vpg/own/q_f"]
    assert metrics["vpg/dist_pi_a_v"] == pytest.approx((0.25 + 0.25 + 0.81) / 3)


def test_c_v_runs_once_an_actor_step_and_the_gate_controls_at_the_metrics_interval_only():
    """The gate's controls (an all-zero a_v, the agent's own action) cost two C_V passes; they
    are computed at the first actor step after each metrics row (the loop re-arms
    `diagnostics_due`), every other actor step runs C_V once, for Q_v. The loss is the same
    either way."""
    agent = ERPvAgent((1,), SPACE, small_cfg(lambda_1=1.0), vlm_critic())
    calls = []
    forward = agent.vlm_critic.forward
    agent.vlm_critic.forward = lambda obs, a: calls.append(1) or forward(obs, a)
    rng = np.random.default_rng(0)

    def batch():
        return {
            "obs": torch.as_tensor(rng.normal(size=(8, 1)), dtype=torch.float32),
            "next_obs": torch.as_tensor(rng.normal(size=(8, 1)), dtype=torch.float32),
            "action": torch.as_tensor(rng.uniform(-1, 1, (8, 1)), dtype=torch.float32),
            "reward": torch.ones(8), "done": torch.zeros(8),
            "a_v": torch.as_tensor(rng.uniform(-1, 1, (8, 1)), dtype=torch.float32),
            "has_label": torch.ones(8, dtype=torch.bool),
        }  # fmt: skip

    rows = [agent.update(batch()) for _ in range(6)]  # actor steps at updates 2, 4, 6
    assert len(calls) == 3 + 1 + 1  # the first actor step with its controls, then Q_v alone
    assert "vpg/zeros/gate_open" in rows[1] and "vpg/own/q_f" in rows[1]
    assert "vpg/zeros/gate_open" not in rows[3] and "vpg/gate_open" in rows[3]
    agent.diagnostics_due = True  # what train_off_policy does after each metrics row
    calls.clear()
    row = agent.update(batch()) | agent.update(batch())
    assert len(calls) == 3 and "vpg/own/gate_open" in row
    assert agent.training_state()["diagnostics_due"] is False


def test_q_scaled_vpg_weight_follows_the_critics_scale():
    """`vpg_weight: q_scaled` multiplies lambda_1 by mean |Q_r| over the labelled rows, so the same
    lambda_1 weighs L_V against L_pi = -Q alike on any reward scale; `fixed` is eq. 4 as printed."""
    batch = {
        "obs": torch.tensor([[0.0], [1.0], [2.0]]),
        "a_v": torch.tensor([[0.5], [-0.5], [0.9]]),
        "has_label": torch.tensor([True, False, True]),
    }
    critic = vlm_critic()
    pi = torch.zeros(3, 1, requires_grad=True)
    out = {}
    for weight, scale in (("fixed", 1.0), ("q_scaled", 1.0), ("q_scaled", 100.0)):
        agent = ERPvAgent(
            (1,), SPACE, small_cfg(lambda_1=2.0, gate_scaling="none", vpg_weight=weight), critic
        )
        h = agent.encoder(batch["obs"]).detach()
        q_pi = scale * torch.tensor([-3.0, 50.0, 5.0])
        out[weight, scale] = agent.policy_guidance(h, pi, q_pi, batch)
    (fixed, m_fixed), (scaled, m_scaled) = out["fixed", 1.0], out["q_scaled", 1.0]
    assert float(m_fixed["vpg/weight"]) == 2.0
    assert float(m_scaled["vpg/weight"]) == pytest.approx(2.0 * (3.0 + 5.0) / 2)  # labelled rows
    assert float(scaled) == pytest.approx(float(fixed) * 4.0)
    # a hundred times the reward scale: a hundred times the weight, as -Q's gradient grows
    assert float(out["q_scaled", 100.0][0]) == pytest.approx(100 * float(scaled))


def test_the_coupling_says_whether_the_gated_rows_carry_a_gap():
    """1 when the gate ignores the gap, 0 when it opens only where the actor already takes the
    label, above 1 when it favours large gaps; logged at the metrics interval; nothing when no
    row is gated."""
    from pipeline.learn.methods.erpv import gap_coupling

    gap = torch.tensor([0.0, 0.0, 2.0, 2.0])
    assert float(gap_coupling(torch.ones(4), gap)["vpg/coupling"]) == pytest.approx(1.0)
    assert float(gap_coupling(torch.tensor([1.0, 0.5, 0.0, 0.0]), gap)["vpg/coupling"]) == 0.0
    favours = gap_coupling(torch.tensor([0.0, 0.0, 0.3, 0.1]), gap)["vpg/coupling"]
    assert float(favours) == pytest.approx(2.0)  # all weight on rows of gap 2, mean gap 1
    assert gap_coupling(torch.zeros(4), gap) == {}
    assert gap_coupling(torch.ones(4), torch.zeros(4)) == {}

    agent, rows = three_labelled_rows("none")
    _, metrics = agent.policy_guidance(*rows)
    assert float(metrics["vpg/coupling"]) == pytest.approx(1.0)  # no gate: no selection
    _, quiet = agent.policy_guidance(*rows, diagnose=False)
    assert "vpg/coupling" not in quiet


def test_vpg_action_mean_pulls_the_mean_and_leaves_the_spread():
    """`vpg_action: sampled` (eq. 3 as printed) pulls a sample a_r = tanh(mu + sigma eps) towards
    a_v, so its gradient reaches log sigma; `mean` pulls tanh(mu) alone: the same gate, a loss on
    the mean's distance, no gradient on log sigma."""
    batch = {
        "obs": torch.tensor([[0.0], [1.0], [2.0]]),
        "a_v": torch.tensor([[0.5], [-0.5], [0.9]]),
        "has_label": torch.tensor([True, False, True]),
    }
    critic = vlm_critic()
    eps = torch.tensor([[0.7], [-1.2], [1.5]])
    out = {}
    for action in ("sampled", "mean"):
        agent = ERPvAgent(
            (1,), SPACE, small_cfg(lambda_1=2.0, gate_scaling="none", vpg_action=action), critic
        )
        mu = torch.tensor([[0.1], [0.3], [-0.2]], requires_grad=True)
        log_std = torch.full((3, 1), -0.5, requires_grad=True)
        pi, mean = torch.tanh(mu + eps * log_std.exp()), torch.tanh(mu)
        h = agent.encoder(batch["obs"]).detach()
        loss, _ = agent.policy_guidance(h, pi, torch.zeros(3), batch, mean=mean)
        loss.backward()
        out[action] = loss.detach(), mu.grad, log_std.grad
    with pytest.raises(ValueError, match="mean action"):  # `mean` without the mean action
        agent.policy_guidance(h, pi.detach(), torch.zeros(3), batch)
    mu = torch.tensor([[0.1], [0.3], [-0.2]])
    rows = batch["has_label"]
    pulled = {"sampled": torch.tanh(mu + eps * math.exp(-0.5)), "mean": torch.tanh(mu)}
    for action, a in pulled.items():
        expected = 2.0 * (batch["a_v"][rows] - a[rows]).pow(2).sum(-1).mean()  # Q_f = 1
        assert float(out[action][0]) == pytest.approx(float(expected))
    assert float(out["sampled"][2].abs().sum()) > 0  # the sample's spread is pulled
    assert out["mean"][2] is None  # the mean's loss does not reach it at all
    assert float(out["mean"][1][rows].abs().min()) > 0  # and moves the mean on each labelled row
    assert float(out["mean"][1][~rows].abs().sum()) == 0.0
