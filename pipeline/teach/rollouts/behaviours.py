"""Behaviour policies that drive collection.

A behaviour is reset with each episode's seed and then asked for one action per step, given the
observation and info (pixels, state, context) the env returned. It answers the action and a tag
naming who chose it; the collector stores both and knows nothing else about the behaviour. So a
teacher-driven or RAE behaviour (ERPv D.1: alternating explorer and teacher phases) is one more
class here, with no change to the collector or the shard writer.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import pickle
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Protocol

import numpy as np
from gymnasium import spaces

from pipeline.core.config import CollectConfig
from pipeline.core.config.stages import untrusted_checkpoint_message
from pipeline.core.envs import CONTEXT, PIXELS, STATE
from pipeline.core.errors import PipelineError
from pipeline.core.io import sha256_file
from pipeline.core.policy import AGENT_JSON, AGENT_WEIGHTS, PolicyLoader, needs_loader
from pipeline.teach.labels.cache import LabelCache
from pipeline.teach.labels.tasks import parse_answer, render_prompt
from pipeline.teach.rollouts.format import action_space_spec
from pipeline.teach.rollouts.writer import encode_png
from pipeline.teach.teachers.base import Reply, Teacher
from pipeline.teach.teachers.cached import ask_through_cache, prompt_cache_key


class Behaviour(Protocol):
    def reset(self, seed: int) -> None:
        """Start an episode; all randomness of the episode derives from `seed`."""

    def act(self, obs: dict[str, np.ndarray], info: dict[str, Any]) -> tuple[Any, str]:
        """Return (action, tag): an element of the action space and who chose it."""


class RandomBehaviour:
    """Uniform samples from the action space, seeded per episode."""

    tag = "random"

    def __init__(self, action_space: spaces.Space) -> None:
        self.action_space = action_space

    def reset(self, seed: int) -> None:
        self.action_space.seed(seed)

    def act(self, obs: dict[str, np.ndarray], info: dict[str, Any]) -> tuple[Any, str]:
        return self.action_space.sample(), self.tag


class UnsafeActorError(ValueError):
    """A saved actor that could run code when loaded (it holds pickled objects)."""


class CheckpointSourceError(PipelineError, ValueError):
    """`collect.<env>.checkpoint` names nothing collect may load: a missing path, or a file (a
    torch.export program, which can run code when loaded) without `trust_checkpoint_code`."""


def check_checkpoint_source(cfg: CollectConfig, env_id: str) -> Path | None:
    """The checkpoint `cfg` acts with, refused before anything is loaded or written where it is
    missing, or a file without `collect.<env>.trust_checkpoint_code`: torch's deserializer of a
    torch.export program evaluates the program's symbolic sizes as Python (`sympify`), so a
    shared `.pt2` can run any command during collect, with no pickle in it. An agent directory
    (safetensors and a known architecture) loads without running anything from its files."""
    if not cfg.uses_checkpoint:
        return None
    assert cfg.checkpoint is not None  # enforced by CollectConfig
    path = Path(cfg.checkpoint)
    where = f"collect.{env_id}" if env_id else "collect.<env>"
    if path.is_dir():
        return path
    if not path.exists():
        raise CheckpointSourceError(
            f"{where}.checkpoint: {path} does not exist; point it at an agent directory "
            f"(models/<run>, train it first: `dvc repro train@<run>`)"
        )
    if not cfg.trust_checkpoint_code:
        raise CheckpointSourceError(f"{where}: {untrusted_checkpoint_message(str(path), where)}")
    digest = sha256_file(path)
    if digest != cfg.trust_checkpoint_code:
        raise CheckpointSourceError(
            f"{where}.checkpoint: {path} has sha256 {digest}, not the one trusted in "
            f"{where}.trust_checkpoint_code ({cfg.trust_checkpoint_code}): the file changed since "
            "it was trusted; check where it came from before recording its new sha256"
        )
    return path


def checkpoint_sha256(path: str | Path) -> str:
    """What decides a checkpoint's actions, hashed: a file's bytes, or an agent directory's
    agent.json and agent.safetensors (names and bytes; not a training state beside them)."""
    path = Path(path)
    if not path.is_dir():
        return sha256_file(path)
    digest = hashlib.sha256()
    for name in (AGENT_JSON, AGENT_WEIGHTS):
        file = path / name
        digest.update(name.encode() + b"\0")
        digest.update(sha256_file(file).encode() if file.exists() else b"missing")
    return digest.hexdigest()


@contextlib.contextmanager
def _torch_load_weights_only() -> Iterator[None]:
    """Every `torch.load` inside is `weights_only=True`, whatever its call site asks: torch's own
    switch (TORCH_FORCE_WEIGHTS_ONLY_LOAD), read at each call. torch.export.load falls back to
    `weights_only=False` where a payload is not plain tensors."""
    saved = os.environ.get("TORCH_FORCE_WEIGHTS_ONLY_LOAD")
    os.environ["TORCH_FORCE_WEIGHTS_ONLY_LOAD"] = "1"
    try:
        yield
    finally:
        if saved is None:
            del os.environ["TORCH_FORCE_WEIGHTS_ONLY_LOAD"]
        else:
            os.environ["TORCH_FORCE_WEIGHTS_ONLY_LOAD"] = saved


def _pickled_members(archive: zipfile.ZipFile) -> list[str]:
    """What `torch.export.load` would unpickle in a PT2 archive: weights and constants stored with
    `use_pickle` (tensor subclasses), custom and opaque objects (torchbind, `pickle.loads`), and
    the pre-2.8 constants file. Plain tensors are raw bytes described by JSON."""
    names = archive.namelist()
    configs = [n for n in names if n.endswith(("_weights_config.json", "_constants_config.json"))]
    found = [n for n in names if "/data/constants/" in f"/{n}" and n.endswith(".pt")]
    for name in configs:
        try:
            entries = json.loads(archive.read(name))["config"]
        except (ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"{name} is not a PT2 payload config ({exc})") from None
        for fqn, meta in entries.items():
            if meta.get("use_pickle") or not str(meta.get("path_name", "")).startswith(
                ("weight_", "tensor_")
            ):
                found.append(f"{fqn} ({meta.get('path_name')})")
    return found


def load_actor_program(path: Path) -> Any:
    """`torch.export.load(path)` of a saved actor without unpickling anything: torch.export.load
    unpickles payloads that are not plain tensors (`torch.load(weights_only=False)`,
    `pickle.loads`), and unpickling runs code. An archive with such payloads is refused
    (UnsafeActorError); every other `torch.load` inside is forced to `weights_only=True`.

    That is not enough to make a file from anyone safe: the deserializer also evaluates every
    symbolic size in models/model.json as Python (`sympify`), which no check here can make safe.
    Collect calls this only for a file the user trusts (`check_checkpoint_source`)."""
    import torch

    if not path.is_file():
        raise FileNotFoundError(f"checkpoint actor {path} does not exist")
    hint = "save actors with torch.export.save (plain tensors only)"
    try:
        with zipfile.ZipFile(path) as archive:
            pickled = _pickled_members(archive)
    except (zipfile.BadZipFile, OSError, ValueError) as exc:
        raise ValueError(f"{path} is not a torch.export program ({hint}): {exc}") from None
    if pickled:
        raise UnsafeActorError(
            f"{path} holds pickled objects, which run code when loaded: {pickled[:3]}. A saved "
            f"actor is read without unpickling anything; {hint}, from a module whose parameters "
            f"and buffers are ordinary tensors"
        )
    try:
        with _torch_load_weights_only():
            return torch.export.load(path)
    except (RuntimeError, ValueError, KeyError, OSError, AssertionError, zipfile.BadZipFile,
            pickle.UnpicklingError) as exc:  # fmt: skip
        raise ValueError(f"{path} is not a torch.export program ({hint}): {exc}") from exc


class AgentCheckpointBehaviour:
    """A trained agent of this pipeline (`models/<run>`: agent.json and agent.safetensors, rebuilt
    by the method its agent.json names), acting as deployed: deterministic, frames stacked as in
    training, the observation it was trained on. `load_policy`: its stage's loader
    (`pipeline.learn.methods.table.load_policy`)."""

    tag = "checkpoint"

    def __init__(self, directory: str | Path, load_policy: PolicyLoader | None = None) -> None:
        import torch

        self.policy = needs_loader(load_policy, "collect's checkpoint behaviour")(directory, True)
        self.obs_key, self.directory = self.policy.obs, Path(directory)
        self._torch, self._fresh = torch, True

    def reset(self, seed: int) -> None:
        self._torch.manual_seed(seed)  # deterministic agents ignore it
        self._fresh = True

    def act(self, obs: dict[str, np.ndarray], info: dict[str, Any]) -> tuple[Any, str]:
        if self.obs_key not in obs:
            raise KeyError(
                f"the agent in {self.directory} reads obs[{self.obs_key!r}] but the env returns "
                f"{sorted(obs)}; set env.<id>.include_state: true"
            )
        if self._fresh:
            self.policy.begin(obs)
            self._fresh = False
        return self.policy.act(obs), self.tag


class CheckpointBehaviour:
    """A saved actor: a `torch.export` program (`torch.export.save`) mapping one observation
    batch to actions, deterministic at collection time. Loading one can run code from the file
    (see `check_checkpoint_source`): only with `collect.<env>.trust_checkpoint_code`.

    Input: `state` as float32 (1, n), or `pixels` as uint8 (1, 3, H, W).
    Output: continuous envs, an action (1, action_dim), clipped to the action bounds, because the
    env would clip it anyway and the stored action must be the one the env received; discrete
    envs, logits (1, n), of which the argmax is taken.
    """

    tag = "checkpoint"

    def __init__(self, path: str | Path, obs_key: str, action_space: spaces.Space) -> None:
        import torch

        self._module = load_actor_program(Path(path)).module()
        self._torch = torch
        self.obs_key = obs_key
        self.action_space = action_space

    def reset(self, seed: int) -> None:
        self._torch.manual_seed(seed)  # for actors that sample; deterministic ones ignore it

    def act(self, obs: dict[str, np.ndarray], info: dict[str, Any]) -> tuple[Any, str]:
        torch = self._torch
        if self.obs_key not in obs:
            raise KeyError(
                f"checkpoint actor reads obs[{self.obs_key!r}] but the env returns {sorted(obs)}; "
                f"set env.<id>.include_state: true or collect.<id>.checkpoint_obs: pixels"
            )
        x = torch.from_numpy(np.ascontiguousarray(obs[self.obs_key]))
        x = x.permute(2, 0, 1) if self.obs_key == PIXELS else x.float()  # (3, H, W) or (n,)
        with torch.no_grad():
            out = self._module(x.unsqueeze(0))[0].numpy()
        if isinstance(self.action_space, spaces.Discrete):
            return int(out.argmax()) + int(self.action_space.start), self.tag
        low, high = self.action_space.low, self.action_space.high
        return np.clip(out.reshape(self.action_space.shape), low, high).astype(np.float32), self.tag


def make_behaviour(
    cfg: CollectConfig,
    action_space: spaces.Space,
    env_id: str = "",
    teacher: Teacher | None = None,
    cache: LabelCache | None = None,
    load_policy: PolicyLoader | None = None,
) -> Behaviour:
    """The behaviour of `cfg`; `teacher` and `cache` are needed by `teacher` and `rae`,
    `load_policy` by a `checkpoint` that is an agent directory."""
    if cfg.behaviour == "random":
        return RandomBehaviour(action_space)
    if cfg.behaviour == "checkpoint":
        return _checkpoint(cfg, action_space, env_id, load_policy)
    if cfg.behaviour == "agent":
        raise ValueError("behaviour 'agent' acts with an agent that the round stage passes in")
    if teacher is None or cache is None:
        raise ValueError(f"behaviour {cfg.behaviour!r} needs a teacher and a label cache")
    acting_teacher = TeacherBehaviour(teacher, cache, env_id, action_space, cfg.teacher_every_k)
    if cfg.behaviour == "teacher":
        return acting_teacher
    if cfg.behaviour == "rae":
        explorer = (
            _checkpoint(cfg, action_space, env_id, load_policy)
            if cfg.explorer == "checkpoint"
            else RandomBehaviour(action_space)
        )
        return RAEBehaviour(explorer, acting_teacher, cfg.rae_switch_steps)
    raise ValueError(f"unknown behaviour {cfg.behaviour!r}")


def _checkpoint(
    cfg: CollectConfig, action_space: spaces.Space, env_id: str, load_policy: PolicyLoader | None
) -> AgentCheckpointBehaviour | CheckpointBehaviour:
    path = check_checkpoint_source(cfg, env_id)
    assert path is not None  # the behaviour uses a checkpoint
    if path.is_dir():
        return AgentCheckpointBehaviour(path, load_policy)
    obs_key = STATE if cfg.checkpoint_obs == "state" else PIXELS
    return CheckpointBehaviour(path, obs_key, action_space)


class TeacherBehaviour:
    """Acts on the teacher's `action` answers (ERPv's VLM executor), asked through the label cache
    at t % k == 0 and whenever `act_at` is told a phase starts, held in between. An answer with no
    usable action (a parse failure, no reply) keeps the held action; before the first usable one,
    actions are random and tagged so."""

    tag = "teacher"

    def __init__(
        self,
        teacher: Teacher,
        cache: LabelCache,
        env_id: str,
        action_space: spaces.Space,
        every_k: int,
    ) -> None:

        self.teacher, self.cache, self.env_id, self.every_k = teacher, cache, env_id, every_k
        self.action_space, self.spec = action_space, action_space_spec(action_space)
        self._fallback = RandomBehaviour(action_space)
        self._held: Any = None
        self._t = 0
        self.calls = 0  # teacher calls made (cache misses), for progress and tests
        self.asked_keys: list[str] = []  # this episode's cache keys, in order

    def reset(self, seed: int) -> None:
        self._fallback.reset(seed)
        self._held, self._t = None, 0
        self.asked_keys = []

    def _ask(self, obs: dict[str, np.ndarray], info: dict[str, Any]) -> None:
        # the same frame bytes and prompt the label stage renders, hence the same cache key
        prompt = render_prompt(
            "action", self.env_id, self.spec, encode_png(obs[PIXELS]), info[CONTEXT]
        )
        self.asked_keys.append(prompt_cache_key(prompt, self.teacher))
        answer, hit = ask_through_cache(self.cache, self.teacher, prompt)
        self.calls += not hit
        text = answer.text if isinstance(answer, Reply) else answer.raw_text
        parsed = parse_answer("action", text, self.env_id, self.spec)
        if parsed.value is None:
            return
        if isinstance(self.action_space, spaces.Discrete):
            if self.action_space.contains(int(parsed.value)):
                self._held = int(parsed.value)
        else:  # out-of-range answers are clipped to act, as the env would; the label keeps them raw
            value = np.asarray(parsed.value, dtype=np.float32).reshape(self.action_space.shape)
            self._held = np.clip(value, self.action_space.low, self.action_space.high)

    def act_at(
        self, t: int, obs: dict[str, np.ndarray], info: dict[str, Any], phase_start: bool
    ) -> tuple[Any, str]:
        if phase_start or self._held is None or t % self.every_k == 0:
            self._ask(obs, info)
        if self._held is None:
            return self._fallback.act(obs, info)
        return self._held, self.tag

    def act(self, obs: dict[str, np.ndarray], info: dict[str, Any]) -> tuple[Any, str]:
        action = self.act_at(self._t, obs, info, phase_start=False)
        self._t += 1
        return action


class RAEBehaviour:
    """Random Alternating Exploration (ERPv D.1): each episode draws a phase length
    T_switch ~ U[min, max] and alternates explorer and teacher phases of that length, starting
    with either at random. Step tags say who acted: `explorer` or `teacher`."""

    def __init__(
        self, explorer: Behaviour, teacher: TeacherBehaviour, switch_steps: tuple[int, int]
    ) -> None:
        self.explorer, self.teacher, self.switch_steps = explorer, teacher, switch_steps
        self._rng = np.random.default_rng(0)
        self.t_switch, self._teacher_phase, self._t = switch_steps[0], False, 0

    @property
    def asked_keys(self) -> list[str]:
        """The cache keys its teacher was asked this episode."""
        return self.teacher.asked_keys

    def reset(self, seed: int) -> None:
        self.explorer.reset(seed)
        self.teacher.reset(seed)
        self._rng = np.random.default_rng([seed, 1])  # independent of the explorer's stream
        low, high = self.switch_steps
        self.t_switch = int(self._rng.integers(low, high + 1))
        self._teacher_phase = bool(self._rng.integers(2))
        self._t = 0

    def act(self, obs: dict[str, np.ndarray], info: dict[str, Any]) -> tuple[Any, str]:
        t = self._t
        phase_start = t % self.t_switch == 0
        if phase_start and t > 0:
            self._teacher_phase = not self._teacher_phase
        self._t += 1
        if self._teacher_phase:
            return self.teacher.act_at(t, obs, info, phase_start)
        action, _ = self.explorer.act(obs, info)
        return action, "explorer"
