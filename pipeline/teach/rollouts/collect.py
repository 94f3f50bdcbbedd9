"""The collect stage's logic: run a behaviour in an env and write resumable rollout shards.

Resume protocol. While collecting, `.collect-journal.json` lists every finished shard and its
episodes; it is rewritten atomically after each shard is renamed into place. A rerun with the same
settings keeps those shards (after checking their hashes), deletes anything else it wrote (temp
files, a shard renamed just before a kill but not yet journaled) and continues with the next
episode. Shards end on episode boundaries and episode i is seeded from (seed, i) alone, so a
resumed collection is byte-identical to an uninterrupted one. Raising `episodes` extends a finished
collection the same way. The manifest is written last; the journal is then removed.

Why one module of this length: the resume protocol and the loop it constrains (journal, shard
hashes, per-episode seeds) are only correct together, so they stay in one file.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
from tqdm import tqdm

from pipeline.core.config import CollectConfig, EnvConfig
from pipeline.core.envs import CONTEXT, PIXELS, STATE, make_env
from pipeline.core.errors import PipelineError
from pipeline.core.io import TMP_SUFFIX, atomic_write_json, sha256_file
from pipeline.core.kernels import warn_native_kernels
from pipeline.core.policy import PolicyLoader
from pipeline.teach.labels.cache import LabelCache
from pipeline.teach.labels.parsers import PARSER_VERSION
from pipeline.teach.labels.schema import label_schema
from pipeline.teach.labels.tasks import schema_template
from pipeline.teach.rollouts.behaviours import (
    Behaviour,
    check_checkpoint_source,
    checkpoint_sha256,
    make_behaviour,
)
from pipeline.teach.rollouts.format import (
    FORMAT_VERSION,
    JOURNAL_NAME,
    MANIFEST_NAME,
    SHARD_GLOB,
    SHARD_PATTERN,
    TEACHER_CACHE_DIR,
    StepRecord,
    action_space_spec,
    action_to_json,
    sample_key,
)
from pipeline.teach.rollouts.reader import load_manifest
from pipeline.teach.rollouts.writer import AtomicShardWriter, encode_json, encode_png
from pipeline.teach.teachers.base import Teacher

log = logging.getLogger(__name__)


class CollectError(PipelineError, RuntimeError):
    """The output directory holds data that this collection may not silently reuse or delete."""


@dataclass
class EpisodeEntry:
    episode: int
    seed: int
    shard: str
    steps: int  # agent steps; the episode has steps + 1 samples
    episode_return: float
    terminated: bool
    truncated: bool
    # the label-cache keys the acting teacher was asked in this episode, in order ([] for
    # behaviours without one; None in manifests written before they were recorded): the teacher
    # cache holds exactly their answers, whatever earlier collections left there
    teacher_keys: list[str] | None = None


@dataclass
class ShardEntry:
    name: str
    sha256: str
    bytes: int
    samples: int
    episodes: list[int]  # [first, last], inclusive


def episode_seed(base_seed: int, episode: int) -> int:
    """Episode i's reset seed depends on (base seed, i) only: resume and extension reproduce it."""
    return int(np.random.SeedSequence([base_seed, episode]).generate_state(1)[0])


@dataclass(frozen=True)
class Acting:
    """A behaviour the caller built (behaviour `agent`: a labelling round's previous agent) and
    what identifies it (its weights' hash, how it explores): recorded in the manifest as
    `acting_agent` and part of the collection's fingerprint."""

    behaviour: Behaviour
    record: dict[str, Any]


# settings that decide nothing about the samples: out of the fingerprint and the manifest, so
# that adding one leaves existing collections (and their DVC hashes) as they are
_NOT_DATA = {"trust_checkpoint_code"}


def collection_fingerprint(
    env_id: str,
    env_cfg: EnvConfig,
    collect_cfg: CollectConfig,
    teacher: Teacher | None = None,
    acting: Acting | None = None,
) -> str:
    """Hash of everything that determines the samples, except the budget (`episodes`)."""
    settings: dict[str, Any] = {
        "format_version": FORMAT_VERSION,
        "env_id": env_id,
        "env": env_cfg.model_dump(),
        # the acting teacher is identified below by what decides its answers, not its settings
        "collect": collect_cfg.model_dump(exclude={"episodes", "teacher", *_NOT_DATA}),
    }
    if acting is not None:
        settings["acting_agent"] = acting.record
    if collect_cfg.checkpoint is not None:
        # the actor's bytes, not its path, decide what it does
        settings["checkpoint_sha256"] = checkpoint_sha256(collect_cfg.checkpoint)
    if collect_cfg.uses_teacher:
        if teacher is None:
            raise CollectError(
                f"behaviour {collect_cfg.behaviour!r} needs a teacher (params "
                f"`collect.<env>.teacher`)"
            )
        # who answers, how, what is asked and how it is read decide the teacher's actions
        schema = label_schema(env_id)
        settings["teacher"] = {
            "id": teacher.teacher_id,
            "decoding": teacher.decoding,
            "parser_version": PARSER_VERSION,
            "prompt": schema_template(schema, "action"),
        }
    return hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()


def _settings_record(
    env_cfg: EnvConfig, collect_cfg: CollectConfig, teacher: Teacher | None, acting: Acting | None
) -> dict[str, Any]:
    """The settings a manifest records beside its data."""
    extra = {} if acting is None else {"acting_agent": acting.record}
    return {
        **extra,
        "env": env_cfg.model_dump(),
        "collect": collect_cfg.model_dump(mode="json", exclude={"teacher", *_NOT_DATA}),
        # who acted in the teacher phases (None: no teacher acted); labels come from label@<env>
        "acting_teacher": None
        if teacher is None or not collect_cfg.uses_teacher
        else {"id": teacher.teacher_id, "config": collect_cfg.teacher.model_dump(mode="json")},
    }


def _our_files(out_dir: Path) -> list[Path]:
    names = [
        *out_dir.glob(SHARD_GLOB),
        *out_dir.glob("*" + TMP_SUFFIX),
        *out_dir.glob(".*" + TMP_SUFFIX),
    ]
    names += [p for p in (out_dir / MANIFEST_NAME, out_dir / JOURNAL_NAME) if p.exists()]
    return sorted(set(names))


def _clear(out_dir: Path) -> None:
    for path in _our_files(out_dir):
        path.unlink()


def _load_previous(out_dir: Path) -> dict[str, Any] | None:
    """The journal of an unfinished run, else the manifest of a finished one, else None."""
    for name in (JOURNAL_NAME, MANIFEST_NAME):
        path = out_dir / name
        if path.exists():
            try:
                return json.loads(path.read_text())
            except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as exc:
                raise CollectError(
                    f"{path} is not valid JSON ({exc}); rerun with --replace to recollect"
                ) from exc
    return None


def _resume_point(
    out_dir: Path, fingerprint: str, episodes: int, replace: bool
) -> tuple[list[ShardEntry], list[EpisodeEntry]]:
    """Decide what of `out_dir` to keep; return the kept shards and episodes."""
    previous = _load_previous(out_dir)
    reason = None
    if previous is None:
        if any(out_dir.glob(SHARD_GLOB)):
            reason = "it holds shards but no journal or manifest (not written by collect?)"
    elif previous.get("format_version", FORMAT_VERSION) != FORMAT_VERSION:  # journals have none
        reason = (
            f"they are of rollout format {previous['format_version']}, this code writes "
            f"{FORMAT_VERSION} (older formats are recollected, never rewritten)"
        )
    elif previous.get("fingerprint") != fingerprint:
        reason = "they were collected with different settings (env, behaviour, seed or format)"
    elif len(previous["episodes"]) > episodes:
        reason = f"they hold {len(previous['episodes'])} episodes and params ask for {episodes}"
    if reason is not None:
        if not replace:
            raise CollectError(
                f"cannot reuse the rollouts in {out_dir}: {reason}. Rerun with --replace to "
                f"delete them and recollect (`dvc repro` does; its cache keeps the old version)."
            )
        log.warning("replacing the rollouts in %s: %s", out_dir, reason)
        _clear(out_dir)
        return [], []
    if previous is None:
        _clear(out_dir)  # only temp files of a run killed before its first shard
        return [], []

    shards = [ShardEntry(**s) for s in previous["shards"]]
    kept = {s.name for s in shards}
    for shard in shards:
        path = out_dir / shard.name
        if not path.exists() or sha256_file(path) != shard.sha256:
            problem = "is missing" if not path.exists() else "does not match its recorded sha256"
            if not replace:
                raise CollectError(f"{path} {problem}; rerun with --replace to recollect {out_dir}")
            log.warning("%s %s; recollecting %s from scratch", path, problem, out_dir)
            _clear(out_dir)
            return [], []
    for path in _our_files(out_dir):
        if path.name not in kept and path.name not in (JOURNAL_NAME, MANIFEST_NAME):
            path.unlink()  # temp files, shards renamed but never journaled
    return shards, [EpisodeEntry(**e) for e in previous["episodes"]]


def _write_journal(
    out_dir: Path, fingerprint: str, shards: list[ShardEntry], episodes: list[EpisodeEntry]
) -> None:
    atomic_write_json(
        out_dir / JOURNAL_NAME,
        {
            "fingerprint": fingerprint,
            "shards": [asdict(s) for s in shards],
            "episodes": [asdict(e) for e in episodes],
        },
    )


def _write_sample(
    writer: AtomicShardWriter,
    episode: int,
    t: int,
    seed: int,
    obs: dict[str, np.ndarray],
    info: dict[str, Any],
    **outcome: Any,
) -> None:
    """One sample: frame o_t as PNG, the rest as a StepRecord (`outcome`: action, reward, ...).
    A NaN or infinite state or reward is refused here, naming the episode and step: JSON has no
    token for it, and prompts would quote it to the teacher."""
    state = obs.get(STATE)
    bad = []
    if state is not None and not np.isfinite(np.asarray(state, dtype=float)).all():
        bad.append(f"state {np.asarray(state).tolist()}")
    reward = outcome.get("reward")
    if reward is not None and not np.isfinite(reward):
        bad.append(f"reward {reward}")
    if bad:
        raise CollectError(
            f"episode {episode}, step {t}: the env returned a non-finite {' and '.join(bad)[:200]}; "
            "fix the env (or its factory in `env.<id>.make`) so that observations and rewards "
            "are finite numbers"
        )
    record = StepRecord(
        episode=episode,
        t=t,
        seed=seed,
        is_first=t == 0,
        context=info[CONTEXT],
        state=None if state is None else state.astype(float).tolist(),
        **outcome,
    )
    writer.write(sample_key(episode, t), encode_png(obs[PIXELS]), encode_json(record.to_json()))


def run_episode(
    env: gym.Env,
    behaviour: Behaviour,
    episode: int,
    seed: int,
    writer: AtomicShardWriter,
    action_spec: dict[str, Any],
) -> tuple[int, float, bool, bool]:
    """Play one episode, writing T + 1 samples. Returns (steps T, return, terminated, truncated)."""
    obs, info = env.reset(seed=seed)
    behaviour.reset(seed)
    t, episode_return = 0, 0.0
    while True:
        action, tag = behaviour.act(obs, info)
        next_obs, reward, terminated, truncated, next_info = env.step(action)
        terminated, truncated = bool(terminated), bool(truncated)  # numpy bools are not JSON
        _write_sample(
            writer, episode, t, seed, obs, info,
            action=action_to_json(action, action_spec), reward=float(reward),
            terminated=terminated, truncated=truncated, is_last=False, behaviour=tag,
        )  # fmt: skip
        episode_return += float(reward)
        t += 1
        obs, info = next_obs, next_info
        if terminated or truncated:
            # RLDS-style final sample: o_T with no action, and the flags of the step into it
            _write_sample(
                writer, episode, t, seed, obs, info,
                action=None, reward=None,
                terminated=terminated, truncated=truncated, is_last=True, behaviour=None,
            )  # fmt: skip
            return t, episode_return, terminated, truncated


def collect(
    env_id: str,
    env_cfg: EnvConfig,
    collect_cfg: CollectConfig,
    out_dir: str | Path,
    *,
    teacher: Teacher | None = None,
    replace: bool = False,
    telemetry_dir: str | Path | None = None,
    progress: bool = True,
    acting: Acting | None = None,
    load_policy: PolicyLoader | None = None,
) -> dict[str, Any]:
    """Collect `collect_cfg.episodes` episodes of `env_id` into `out_dir`; return the manifest.

    Resumes an interrupted or shorter collection made with the same settings. Data made with
    other settings is an error unless `replace`, which deletes it first. Behaviours `teacher` and
    `rae` need `teacher`; its answers are cached in `out_dir/teacher_cache`, the calls' latency
    and attempts in `telemetry_dir` (outside the rollouts: not hashed by DVC) when given.
    `load_policy`: how a `checkpoint` that is an agent directory is loaded (the stage's).
    """
    warn_native_kernels(out_dir)
    out_dir = Path(out_dir)
    check_checkpoint_source(collect_cfg, env_id)  # before anything is loaded or written
    out_dir.mkdir(parents=True, exist_ok=True)
    if (collect_cfg.behaviour == "agent") != (acting is not None):
        raise CollectError(
            "behaviour 'agent' is a labelling round's previous agent, passed by the round stage "
            f"(got behaviour {collect_cfg.behaviour!r} with{'' if acting else 'out'} an agent); "
            "in collect.<env> choose random, checkpoint, teacher or rae"
        )
    fingerprint = collection_fingerprint(env_id, env_cfg, collect_cfg, teacher, acting)
    shards, episodes = _resume_point(out_dir, fingerprint, collect_cfg.episodes, replace)
    if episodes and (out_dir / MANIFEST_NAME).exists() and len(episodes) == collect_cfg.episodes:
        log.info("%s: %d episodes already collected; nothing to do", out_dir, len(episodes))
        (out_dir / JOURNAL_NAME).unlink(missing_ok=True)  # killed after the manifest was written
        # the same fingerprint (format version included): the manifest is the one this code writes
        if collect_cfg.uses_teacher:  # killed between the manifest and the cache's pruning
            root = out_dir / TEACHER_CACHE_DIR
            _keep_asked_answers(LabelCache(root, rebuild=f"`dvc repro collect@{env_id}`"), episodes)
        return load_manifest(out_dir)
    if episodes:
        log.info("%s: resuming after %d episodes in %d shards", out_dir, len(episodes), len(shards))
    _write_journal(out_dir, fingerprint, shards, episodes)
    (out_dir / MANIFEST_NAME).unlink(missing_ok=True)  # the journal now speaks for the data

    env = make_env(env_id, env_cfg)
    cache = (
        LabelCache(
            out_dir / TEACHER_CACHE_DIR,
            telemetry=telemetry_dir,
            rebuild=f"`dvc repro collect@{env_id}`",
        )
        if collect_cfg.uses_teacher
        else None
    )
    behaviour = (
        acting.behaviour
        if acting is not None
        else make_behaviour(collect_cfg, env.action_space, env_id, teacher, cache, load_policy)
    )
    spec = action_space_spec(env.action_space)
    writer: AtomicShardWriter | None = None
    pending: list[EpisodeEntry] = []
    first_episode = len(episodes)
    steps_done, started = 0, time.perf_counter()
    bar = tqdm(
        total=collect_cfg.episodes, initial=len(episodes), unit="ep",
        desc=f"collect {env_id}", disable=not progress,
    )  # fmt: skip
    try:
        for episode in range(len(episodes), collect_cfg.episodes):
            if writer is None:
                writer = AtomicShardWriter(out_dir / (SHARD_PATTERN % len(shards)))
                first_episode = episode
            seed = episode_seed(collect_cfg.seed, episode)
            steps, ret, terminated, truncated = run_episode(
                env, behaviour, episode, seed, writer, spec
            )
            keys = list(getattr(behaviour, "asked_keys", []))
            pending.append(
                EpisodeEntry(
                    episode, seed, writer.path.name, steps, ret, terminated, truncated, keys
                )
            )
            steps_done += steps
            bar.update(1)
            bar.set_postfix(steps_per_s=f"{steps_done / (time.perf_counter() - started):.0f}")
            if (
                writer.samples >= collect_cfg.shard_max_samples
                or episode == collect_cfg.episodes - 1
            ):
                closed = writer.close()
                writer = None
                shards.append(ShardEntry(**asdict(closed), episodes=[first_episode, episode]))
                episodes.extend(pending)
                pending = []
                _write_journal(out_dir, fingerprint, shards, episodes)
    finally:
        bar.close()
        if writer is not None:
            writer.abort()  # the episodes of an unfinished shard are recollected on resume
        env.close()

    observation: dict[str, Any] = {PIXELS: list(env.observation_space[PIXELS].shape)}
    if STATE in env.observation_space.spaces:
        observation[STATE] = list(env.observation_space[STATE].shape)
    manifest = {
        "format_version": FORMAT_VERSION,
        "env_id": env_id,
        **_settings_record(env_cfg, collect_cfg, teacher, acting),
        "fingerprint": fingerprint,
        "observation": observation,
        "action_space": spec,
        "shards": [asdict(s) for s in shards],
        "episodes": [asdict(e) for e in episodes],
        "totals": {
            "shards": len(shards),
            "episodes": len(episodes),
            "steps": sum(e.steps for e in episodes),
            "samples": sum(s.samples for s in shards),
        },
    }
    atomic_write_json(out_dir / MANIFEST_NAME, manifest)
    (out_dir / JOURNAL_NAME).unlink()
    if cache is not None:
        _keep_asked_answers(cache, episodes)
    return manifest


def _keep_asked_answers(cache: LabelCache, episodes: list[EpisodeEntry]) -> None:
    """Leave the teacher cache holding the answers the kept episodes asked for, and nothing else:
    answers of episodes an interrupted, longer or replaced collection played are dropped, so the
    collection's bytes depend on its params, not on its history. (A replaced collection's
    answers stay in the cache until the new one finishes: what it asks again is not paid twice.)
    Episodes of a manifest that predates the record keep the cache as it is."""
    if any(e.teacher_keys is None for e in episodes):
        return
    dropped = cache.retain({key for e in episodes for key in e.teacher_keys or ()})
    if dropped:
        log.info("%s: dropped %d answers no kept episode asked for", cache.root, dropped)
