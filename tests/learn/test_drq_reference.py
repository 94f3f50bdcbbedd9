"""The reference DrQ of benchmarks/drq_reference.py (benchmarks.pixel_throughput's baseline)
keeps the authors' structure: an actor of its own on tied convs, targets every 2nd update at tau
0.01, encoder included."""

from __future__ import annotations

import numpy as np
import torch

from benchmarks.drq_reference import RefDrQAgent, RefReplay

SIZE = 48


def _agent(k: int = 1) -> RefDrQAgent:
    torch.manual_seed(0)
    return RefDrQAgent((9, SIZE, SIZE), 1, stride=2, hidden=32, k=k)


def _batch(n: int = 8) -> tuple[torch.Tensor, ...]:
    rng = np.random.default_rng(0)
    replay = RefReplay((9, SIZE, SIZE), 1, n)
    for _ in range(n):
        frames = rng.integers(0, 256, (2, 9, SIZE, SIZE), dtype=np.uint8)
        replay.add(frames[0], rng.uniform(-1, 1, 1), float(rng.uniform()), frames[1], False)
    assert replay.full and len(replay) == n
    return replay.sample(n, rng)


def test_actor_convs_are_the_critics_and_its_head_its_own():
    agent = _agent()
    for a, c in zip(agent.actor.encoder.convs, agent.critic.encoder.convs, strict=True):
        assert a.weight is c.weight and a.bias is c.bias
    assert agent.actor.encoder.head[0].weight is not agent.critic.encoder.head[0].weight
    head = agent.actor.encoder.head[0].weight.detach().clone()
    agent.update(*_batch())
    assert torch.equal(agent.actor.encoder.head[0].weight, head)  # no actor step on update 1
    agent.update(*_batch())
    assert not torch.equal(agent.actor.encoder.head[0].weight, head)  # the actor loss trains it


def test_targets_move_every_second_update_by_tau_encoder_included():
    agent = _agent()
    target0 = {k: v.clone() for k, v in agent.critic_target.state_dict().items()}
    agent.update(*_batch())
    assert all(torch.equal(v, target0[k]) for k, v in agent.critic_target.state_dict().items())
    agent.update(*_batch())
    online = agent.critic.state_dict()
    for key, value in agent.critic_target.state_dict().items():
        if value.is_floating_point():
            torch.testing.assert_close(value, 0.01 * online[key] + 0.99 * target0[key])
    assert not torch.equal(
        agent.critic_target.state_dict()["encoder.convs.0.weight"],
        target0["encoder.convs.0.weight"],
    )


def test_act_is_the_mean_when_deterministic_and_in_range():
    agent = _agent()
    obs = np.random.default_rng(1).integers(0, 256, (9, SIZE, SIZE), dtype=np.uint8)
    a, b = agent.act(obs, deterministic=True), agent.act(obs, deterministic=True)
    assert a.shape == (1,) and np.array_equal(a, b) and -1 <= a[0] <= 1
    with torch.no_grad():
        mean = agent.actor.mean(torch.as_tensor(obs).float()[None])[0].numpy()
    np.testing.assert_allclose(a, mean)
