import itertools

import numpy as np
import pytest

from pipeline.learn.shaping.potential import HysteresisPotential
from pipeline.learn.shaping.prototypes import GreyEmbedder, OpenClipEmbedder, PrototypeCache
from pipeline.learn.shaping.reward import HybridReward, kinematic_reward, shaping_term
from tests.conftest import build_stage_one, collect_cfg, env_cfg, label_cfg


@pytest.mark.parametrize(
    ("x", "expected"), [(-1.2, 0.0), (-0.4, 0.0), (-0.3, 0.2), (0.1, 1.0), (0.5, 1.8)]
)
def test_kinematic_reward_eq_1(x, expected):
    assert kinematic_reward(x) == pytest.approx(expected)


def test_pbrs_telescopes():
    rng = np.random.default_rng(0)
    phi = rng.uniform(0, 1, 50)
    gamma = 0.99
    discounted = sum(gamma**t * shaping_term(phi[t], phi[t + 1], gamma) for t in range(49))
    assert discounted == pytest.approx(gamma**49 * phi[49] - phi[0])
    loop = [0.1, 0.3, 0.6, 0.3, 0.1]  # a closed loop of states: back where it started
    assert sum(shaping_term(a, b, 1.0) for a, b in itertools.pairwise(loop)) == pytest.approx(0.0)
    back_and_forth = [0.2, 0.7] * 10 + [0.2]  # the reward hack the paper rules out
    assert sum(
        shaping_term(a, b, 1.0) for a, b in itertools.pairwise(back_and_forth)
    ) == pytest.approx(0.0)


def test_hybrid_reward_eq_2_and_its_switches():
    reward = HybridReward(gamma=0.99, alpha=10.0)
    assert reward(-1.0, 0.1, 0.3, 0.6) == pytest.approx(-1.0 + 1.0 + 10.0 * (0.99 * 0.6 - 0.3))
    assert (
        HybridReward(0.99, 10.0, use_kinematic=False, use_potential=False)(-1.0, 0.1, 0.3, 0.6)
        == -1.0
    )
    assert HybridReward(0.99, 10.0, use_env=False, use_potential=False)(
        -1.0, 0.1, 0.3, 0.6
    ) == pytest.approx(1.0)


def _cache(bandwidth=0.5):
    embeddings = np.array([[0, 0], [1, 0], [2, 0], [3, 0]], np.float32)
    return PrototypeCache(embeddings, np.array([0.0, 0.3, 0.6, 1.0], np.float32), bandwidth)


def test_rbf_potential_in_range_and_continuous():
    cache = _cache()
    rng = np.random.default_rng(1)
    for e in rng.normal(1.5, 3.0, (200, 2)).astype(np.float32):
        assert 0.0 <= cache.potential(e) <= 1.0
    e = np.array([1.4, 0.2], np.float32)
    gaps = [abs(cache.potential(e + d) - cache.potential(e)) for d in (1e-1, 1e-2, 1e-3)]
    assert gaps[0] > gaps[1] > gaps[2] and gaps[2] < 1e-3
    assert _cache(bandwidth=0.05).potential(np.array([2.0, 0.0], np.float32)) == pytest.approx(
        0.6, abs=1e-4
    )
    far = np.array(
        [1e3, 0.0], np.float32
    )  # far from everything: the nearest still dominates, no NaN
    assert cache.potential(far) == pytest.approx(1.0)


def test_hysteresis_locks_a_confirmed_milestone_and_ignores_flicker():
    potential = HysteresisPotential(_cache(bandwidth=0.05), confirm_steps=3)
    at = {level: np.array([i, 0], np.float32) for i, level in enumerate([0.0, 0.3, 0.6, 1.0])}
    assert potential(at[1.0]) == pytest.approx(1.0)  # one flickering frame at the top level
    assert potential(at[0.0]) == pytest.approx(0.0)  # not confirmed: nothing locked
    for _ in range(3):
        potential(at[0.6])
    assert potential.locked == pytest.approx(0.6)
    assert potential(at[0.0]) == pytest.approx(0.6)  # back in the valley, the lock holds
    potential.reset()  # a new episode
    assert potential(at[0.0]) == pytest.approx(0.0)


def test_prototypes_from_the_datasets_milestone_labels(tmp_path):
    """Stage two reads the dataset alone: the prototypes are its frames whose milestone the
    teacher was asked and answered, with the label table's potentials."""
    import polars as pl

    from pipeline.core.tables import read_label_table
    from pipeline.teach.labels.status import LABELLED_STATUSES

    dataset = build_stage_one(
        tmp_path, env=env_cfg(max_episode_steps=40), collect=collect_cfg(episodes=2),
        label=label_cfg(tasks={"milestone": 4}),
    )  # fmt: skip
    labelled = read_label_table(tmp_path / "labels.parquet").filter(
        (pl.col("task") == "milestone")
        & pl.col("queried")
        & pl.col("parse_status").is_in(LABELLED_STATUSES)
    )
    assert 0 < labelled.height < 80  # every 4th frame of 2 x 40 steps
    cache = PrototypeCache.from_dataset(dataset, GreyEmbedder(16), bandwidth=1.0)
    assert cache.embeddings.shape == (labelled.height, 256)
    np.testing.assert_array_equal(
        cache.potentials, labelled["potential"].to_numpy().astype(np.float32)
    )
    levels = np.array([0.0, 0.15, 0.3, 0.6, 1.0], np.float32)  # MountainCar's Phi_raw values
    assert np.isin(cache.potentials, levels).all()


def test_open_clip_embedder_on_a_tiny_random_model(tmp_path):
    import open_clip

    from tests.factories import build_tiny_open_clip

    name, config_file, checkpoint = build_tiny_open_clip(tmp_path)
    open_clip.add_model_config(config_file)
    embedder = OpenClipEmbedder(name, str(checkpoint))
    frames = np.random.default_rng(0).integers(0, 255, (3, 40, 40, 3), dtype=np.uint8)
    out = embedder.embed(frames)
    assert out.shape == (3, 16)
    np.testing.assert_allclose(np.linalg.norm(out, axis=1), 1.0, rtol=1e-5)


def test_hybrid_reward_wrapper_adds_eq_2_terms_and_resets_the_lock():
    from pipeline.core.config import EnvConfig
    from pipeline.core.envs import make_env
    from pipeline.learn.shaping.wrapper import HybridRewardWrapper

    embedder = GreyEmbedder(8)
    env = make_env(
        "MountainCar-v0",
        EnvConfig(image_size=32, action_repeat=1, max_episode_steps=30, include_state=False),
    )
    frames = [env.reset(seed=0)[0]["pixels"]]
    for _ in range(5):
        frames.append(env.step(2)[0]["pixels"])
    cache = PrototypeCache(
        embedder.embed(np.stack(frames)), np.linspace(0, 1, len(frames), dtype=np.float32), 0.5
    )
    reward = HybridReward(gamma=0.99, alpha=5.0)
    wrapped = HybridRewardWrapper(
        env, HysteresisPotential(cache, confirm_steps=1), embedder, reward
    )
    wrapped.reset(seed=0)
    phi, steps, done = wrapped._phi, 0, False
    while not done:
        _, r, terminated, truncated, info = wrapped.step(2)
        expected = info["r_env"] + info["r_kinematic"] + 5.0 * (0.99 * info["phi"] - phi)
        assert r == pytest.approx(expected)
        phi, done, steps = info["phi"], terminated or truncated, steps + 1
    locked_before = wrapped.potential.locked
    assert steps == 30 and locked_before > 0.5  # pushed right: later milestones confirmed
    wrapped.reset(seed=0)
    assert wrapped.potential.locked < locked_before  # a new episode starts a new lock


def test_kinematic_potential_form_telescopes_and_stops_paying_for_hovering():
    """Eq. 1 as printed pays max(0, 2(x + 0.4)) every step: hovering at x = 0.4 for 100 steps
    earns 160 (the hovering optimum). Our potential form pays gamma R(s') - R(s): hovering earns
    about (gamma - 1) R per step, <= 0, and a whole trajectory telescopes."""
    printed = HybridReward(1.0, 0.0, use_env=False, use_potential=False)
    ours = HybridReward(0.99, 0.0, use_env=False, use_potential=False, kinematic="potential")
    assert sum(printed(0.0, 0.4, 0, 0) for _ in range(100)) == pytest.approx(160.0)
    hover = sum(ours(0.0, 0.4, 0, 0, position_prev=0.4) for _ in range(100))
    assert hover == pytest.approx(100 * (0.99 - 1.0) * 1.6) and hover < 0
    path = [-0.5, -0.3, 0.0, 0.2, 0.1, 0.45]
    total = sum(
        0.99**t * ours(0.0, b, 0, 0, position_prev=a)
        for t, (a, b) in enumerate(itertools.pairwise(path))
    )
    assert total == pytest.approx(
        0.99 ** (len(path) - 1) * kinematic_reward(path[-1]) - kinematic_reward(path[0])
    )
    # reaching the flag: the terminal state's potential is 0
    assert ours(0.0, 0.5, 0, 0, position_prev=0.49, terminated=True) == pytest.approx(
        -kinematic_reward(0.49)
    )
    with pytest.raises(ValueError, match="previous position"):
        ours(0.0, 0.4, 0, 0)


def test_position_table_gives_the_labelled_frames_their_own_potentials(tmp_path):
    """The table of Phi by cart position holds each labelled frame's position exactly: its entry
    is the potential of that frame, rendered in the rollouts. Elsewhere the nearest entry."""
    from pipeline.core.config import EnvConfig
    from pipeline.learn.shaping.tabulated import PositionPotentialTable, mountaincar_frames_at

    env = EnvConfig(image_size=84, action_repeat=1, max_episode_steps=60, include_state=True)
    positions = np.array([-0.9, -0.52, -0.3, 0.05, 0.42])
    frames = mountaincar_frames_at(positions, 84)
    embedder = GreyEmbedder(16)
    cache = PrototypeCache(
        embedder.embed(frames), np.array([0.0, 0.2, 0.4, 0.7, 1.0], np.float32), 0.1, positions
    )
    table = PositionPotentialTable.build(
        cache, embedder, env, spacing=0.01, exact_positions=positions
    )
    for p, e, level in zip(positions, embedder.embed(frames), cache.potentials, strict=True):
        assert table.lookup(float(p)) == (
            pytest.approx(level),
            pytest.approx(cache.potential(e), abs=0),
        )
    error = table.max_error(cache, embedder, 84, samples=40, seed=0)
    assert 0.0 <= error < 0.2
    with pytest.raises(ValueError, match="spacing"):
        PositionPotentialTable.build(cache, embedder, env, spacing=0.0)


def test_mountaincar_frames_at_match_the_env_observations():
    from pipeline.core.config import EnvConfig
    from pipeline.core.envs import make_env
    from pipeline.learn.shaping.tabulated import mountaincar_frames_at

    env = make_env(
        "MountainCar-v0",
        EnvConfig(image_size=32, action_repeat=1, max_episode_steps=20, include_state=True),
    )
    obs, info = env.reset(seed=3)
    seen = [(info["context"]["position"], obs["pixels"])]
    for _ in range(10):
        obs, _, _, _, info = env.step(2)
        seen.append((info["context"]["position"], obs["pixels"]))
    rendered = mountaincar_frames_at([p for p, _ in seen], 32)
    for (_, frame), again in zip(seen, rendered, strict=True):
        np.testing.assert_array_equal(frame, again)
