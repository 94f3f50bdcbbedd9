"""A teacher's competence, measured: the labelling teacher ACTS alone for N episodes (ERPv's
"Only VLMs" / VBE row) and uniform random actions play the same episode seeds beside it.

The teacher is asked through the label cache, as every stage asks it: an answer that the label
stage or a collect stage already paid for costs nothing here, and one paid here is never paid
again. It is asked every `every_k`-th agent step and its answer held in between (k = 1: a fresh
answer every step; k = 10: ERPv C.4's query interval, how RAE acts and how labels are carried).

What it reports is a pure function of (env, teacher, seeds, the caches it only reads): returns,
their mean and std (ddof = 1), success rate where the env defines one, the parse-status mix of the
answers acted on, and the prompts a fresh build pays for (those not already in the label stage's
caches). Calls made by this run (which depend on what an interrupted earlier run left in this
stage's own cache) are printed, never written into the metrics.
"""

from __future__ import annotations

import warnings
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from gymnasium import spaces
from tqdm import tqdm

from pipeline.core.config import EnvConfig, TeacherConfig
from pipeline.core.envs import CONTEXT, PIXELS, env_info, make_env
from pipeline.teach.labels.cache import LabelCache
from pipeline.teach.labels.tasks import Prompt, parse_answer, render_prompt
from pipeline.teach.rollouts.behaviours import RandomBehaviour
from pipeline.teach.rollouts.format import action_space_spec
from pipeline.teach.rollouts.writer import encode_png
from pipeline.teach.teachers.base import Reply, Teacher
from pipeline.teach.teachers.cached import prompt_cache_key, store_replies


class _EmptyCache:
    """No answers: where the label stage has not cached any yet."""

    def __contains__(self, key: str) -> bool:
        return False


@dataclass
class PlayResult:
    """Episodes of one acting policy (the teacher at one query interval, or random actions)."""

    policy: str
    returns: list[float]
    lengths: list[int]
    successes: list[bool] | None  # None where the env defines no success
    statuses: Counter[str] = field(default_factory=Counter)  # answers per ask, by parse status
    asks: int = 0  # times the teacher was asked (a frame seen twice is asked twice, paid once)
    prompts: int = 0  # distinct prompts asked (cache keys)
    paid_fresh: int = 0  # of those, not in the label stage's caches: a fresh build pays them

    def summary(self) -> dict[str, Any]:
        r = np.asarray(self.returns, dtype=np.float64)
        out: dict[str, Any] = {
            "policy": self.policy,
            "episodes": len(r),
            "return_mean": float(r.mean()),
            # ddof = 1: the sample std over episodes (0 for a single episode)
            "return_std": float(r.std(ddof=1)) if len(r) > 1 else 0.0,
            "length_mean": float(np.mean(self.lengths)),
            "returns": [float(x) for x in r],
        }
        if self.successes is not None:
            out["success_rate"] = float(np.mean(self.successes))
        if self.policy != "random":
            out["asks"] = self.asks
            out["prompts"] = self.prompts
            out["prompts_paid_on_a_fresh_build"] = self.paid_fresh
            out["parse_status"] = dict(sorted(self.statuses.items()))
        return out


class _ActingTeacher:
    """The teacher's `action` answer at t % k == 0, held in between; before its first usable
    answer of an episode (and after unusable ones, which keep the held action) the action is
    uniform random, as collect's TeacherBehaviour acts. Batched per step over one episode."""

    def __init__(
        self,
        teacher: Teacher,
        cache: LabelCache,
        shared: LabelCache | _EmptyCache,
        env_id: str,
        action_space: spaces.Space,
        every_k: int,
    ) -> None:
        self.teacher, self.cache, self.shared = teacher, cache, shared
        self.env_id, self.every_k = env_id, every_k
        self.action_space, self.spec = action_space, action_space_spec(action_space)
        self.fallback = RandomBehaviour(action_space)
        self.statuses: Counter[str] = Counter()
        self.keys: set[str] = set()
        self.asks = 0
        self.paid_fresh: set[str] = set()
        self.calls = 0  # made by this process (cache misses)
        self._held: Any = None
        self._pending: dict[str, tuple[Prompt, Reply]] = {}  # answered, not yet cached

    def reset(self, seed: int) -> None:
        self.fallback.reset(seed)
        self._held = None

    def flush(self) -> None:
        """Cache the episode's new answers as one segment (not one file per answer): an
        interrupted run loses at most one episode's calls."""
        if self._pending:
            prompts, replies = zip(*self._pending.values(), strict=True)
            store_replies(self.cache, self.teacher, prompts, replies)
            self._pending = {}

    def act(self, t: int, obs: dict[str, np.ndarray], info: dict[str, Any]) -> Any:
        if t % self.every_k == 0:
            self._ask(obs, info)
        if self._held is None:
            return self.fallback.act(obs, info)[0]
        return self._held

    def _ask(self, obs: dict[str, np.ndarray], info: dict[str, Any]) -> None:
        prompt = render_prompt(
            "action", self.env_id, self.spec, encode_png(obs[PIXELS]), info[CONTEXT]
        )
        key = prompt_cache_key(prompt, self.teacher)
        self.asks += 1
        if key not in self.keys:
            self.keys.add(key)
            if key not in self.shared:
                self.paid_fresh.add(key)
        hit = self.cache.get(key)
        if hit is not None:
            text = hit.raw_text
        else:
            if key in self._pending:
                reply = self._pending[key][1]
            else:
                (reply,) = self.teacher.answer([prompt])
                self.calls += 1
                if reply.error is None:  # transport failures are asked again, never cached
                    self._pending[key] = (prompt, reply)
            if reply.error is not None:
                self.statuses[str(reply.error)] += 1
                return
            text = reply.text
        parsed = parse_answer("action", text, self.env_id, self.spec)
        self.statuses[str(parsed.status)] += 1
        if parsed.value is None:
            return
        if isinstance(self.action_space, spaces.Discrete):
            if self.action_space.contains(int(parsed.value)):
                self._held = int(parsed.value)
        else:  # out-of-range answers are clipped to act, as the env would
            value = np.asarray(parsed.value, dtype=np.float32).reshape(self.action_space.shape)
            self._held = np.clip(value, self.action_space.low, self.action_space.high)


def _play(
    env_id: str,
    env_cfg: EnvConfig,
    act: Any,
    reset: Any,
    end: Any,
    episodes: int,
    seed: int,
    pixels: bool,
    desc: str,
) -> tuple[list[float], list[int], list[bool]]:
    env = make_env(env_id, env_cfg, pixels=pixels)
    returns, lengths, successes = [], [], []
    try:
        bar = tqdm(range(episodes), desc=desc, unit="episode")
        for i in bar:
            obs, info = env.reset(seed=seed + i)
            reset(seed + i)
            total, t, done, terminated = 0.0, 0, False, False
            while not done:
                obs, reward, terminated, truncated, info = env.step(act(t, obs, info))
                total += float(reward)
                t += 1
                done = terminated or truncated
            end()
            returns.append(total)
            lengths.append(t)
            successes.append(bool(terminated))
            bar.set_postfix(return_mean=f"{np.mean(returns):.1f}")
    finally:
        env.close()
    return returns, lengths, successes


def play_teacher(
    env_id: str,
    env_cfg: EnvConfig,
    teacher: Teacher,
    cache: LabelCache,
    shared: LabelCache | _EmptyCache,
    every_k: int,
    episodes: int,
    seed: int,
) -> tuple[PlayResult, int]:
    """The teacher acting alone, asked every `every_k` steps: (result, calls this run made)."""
    if every_k < 1:
        raise ValueError(f"every_k must be >= 1, got {every_k}")
    probe = make_env(env_id, env_cfg, pixels=True)
    action_space = probe.action_space
    probe.close()
    actor = _ActingTeacher(teacher, cache, shared, env_id, action_space, every_k)
    returns, lengths, successes = _play(
        env_id, env_cfg, actor.act, actor.reset, actor.flush, episodes, seed, True,
        f"teacher_eval {env_id} k={every_k}",
    )  # fmt: skip
    success = env_info(env_id).success_on_termination
    result = PlayResult(
        f"teacher:k={every_k}", returns, lengths, successes if success else None,
        actor.statuses, actor.asks, len(actor.keys), len(actor.paid_fresh),
    )  # fmt: skip
    return result, actor.calls


def play_random(env_id: str, env_cfg: EnvConfig, episodes: int, seed: int) -> PlayResult:
    """Uniform random actions on the same episode seeds (the floor a teacher must beat)."""
    env = make_env(env_id, env_cfg, pixels=not env_cfg.include_state)
    behaviour = RandomBehaviour(env.action_space)
    env.close()
    returns, lengths, successes = _play(
        env_id, env_cfg, lambda t, obs, info: behaviour.act(obs, info)[0], behaviour.reset,
        lambda: None, episodes, seed, not env_cfg.include_state, f"teacher_eval {env_id} random",
    )  # fmt: skip
    success = env_info(env_id).success_on_termination
    return PlayResult("random", returns, lengths, successes if success else None)


def welch_p(a: Sequence[float], b: Sequence[float]) -> float | None:
    """Two-sided Welch t-test p-value of mean(a) != mean(b); None with fewer than 2 per arm or
    no spread in either."""
    from scipy import stats

    if len(a) < 2 or len(b) < 2 or (np.std(a) == 0 and np.std(b) == 0):
        return None
    with warnings.catch_warnings():  # one arm without spread (random on MountainCar): exact
        warnings.simplefilter("ignore", RuntimeWarning)
        return float(stats.ttest_ind(a, b, equal_var=False).pvalue)


def evaluate_teacher(
    env_id: str,
    env_cfg: EnvConfig,
    teacher_cfg: TeacherConfig,
    teacher: Teacher,
    cache_dir: str | Path,
    read_also: Sequence[str | Path],
    every_k: Sequence[int],
    episodes: int,
    seed: int,
) -> tuple[dict[str, Any], int]:
    """The metrics of one env's teacher (one row per query interval, and random actions) and the
    teacher calls this run made."""
    existing = [p for p in read_also if Path(p).is_dir()]
    cache = LabelCache(cache_dir, read_also=existing, rebuild="dvc repro teacher_eval")
    # what the label stage's caches hold: answers a fresh build does not pay for here
    shared = LabelCache(existing[0], read_also=existing[1:]) if existing else _EmptyCache()
    rows, calls = [], 0
    for k in every_k:
        result, made = play_teacher(env_id, env_cfg, teacher, cache, shared, k, episodes, seed)
        rows.append(result)
        calls += made
    floor = play_random(env_id, env_cfg, episodes, seed)
    out_rows = []
    for row in rows:
        summary = row.summary()
        summary["margin_over_random"] = summary["return_mean"] - float(np.mean(floor.returns))
        summary["welch_p_vs_random"] = welch_p(row.returns, floor.returns)
        out_rows.append(summary)
    metrics = {
        "env": env_id,
        "teacher_id": teacher.teacher_id,
        "teacher": teacher_cfg.model_dump(mode="json", exclude_none=True),
        "episodes": episodes,
        "seed": seed,
        "std_ddof": 1,
        "teacher_rows": out_rows,
        "random": floor.summary(),
    }
    return metrics, calls
