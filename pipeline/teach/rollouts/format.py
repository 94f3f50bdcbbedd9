"""The on-disk rollout format: webdataset shards of one sample per step, plus a manifest.

A rollout directory holds:
- `shard-000000.tar`, ...: webdataset tars; a shard always holds whole episodes;
- `manifest.json`: written last, once collection is complete (shards, hashes, counts, seeds);
- `.collect-journal.json`: only while a collection is unfinished; it lets a rerun resume;
- `teacher_cache/`: the teacher answers of `teacher` / `rae` behaviours (a label cache).

Sample `<episode>/<t>` (zero-padded, so keys sort in step order) has two members:
- `png`: the RGB frame o_t;
- `json`: a `StepRecord`: the action a_t taken in o_t, the reward r_t and the end flags that
  followed it, plus context, state, behaviour tag and episode seed.
An episode of T steps has T + 1 samples: the last (`is_last`) carries the final observation o_T
with `action` and `reward` null and the end flags of the step that led to it (RLDS convention).
Frame stacking happens at load time, never on disk.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import Any

# 2: every manifest records who acted (`acting_teacher`); format 1 manifests may not, and are
# refused by every reader (pipeline.teach.rollouts.reader.load_manifest), never rewritten.
FORMAT_VERSION = 2
SHARD_PATTERN = "shard-%06d.tar"
SHARD_GLOB = "shard-*.tar"
MANIFEST_NAME = "manifest.json"
JOURNAL_NAME = ".collect-journal.json"
# Teacher answers paid for while collecting (behaviours `teacher`, `rae`): a label cache that the
# label stage also reads, so no answer is paid twice. Kept across --replace: answers stay valid.
TEACHER_CACHE_DIR = "teacher_cache"
SAMPLE_KEY_PATTERN = "{episode:06d}/{t:06d}"
_SAMPLE_KEY_RE = re.compile(r"^(\d{6,})/(\d{6,})$")


def sample_key(episode: int, t: int) -> str:
    return SAMPLE_KEY_PATTERN.format(episode=episode, t=t)


def parse_sample_key(key: str) -> tuple[int, int]:
    """`000003/000017` -> (3, 17); ValueError naming the key otherwise."""
    match = _SAMPLE_KEY_RE.match(key)
    if match is None:
        raise ValueError(f"sample key {key!r} is not <episode>/<t> ({SAMPLE_KEY_PATTERN})")
    return int(match.group(1)), int(match.group(2))


@dataclass
class StepRecord:
    """The JSON member of one sample."""

    episode: int
    t: int
    action: int | list[float] | None  # a_t; None on the final (is_last) record
    reward: float | None  # r_t, summed over the action repeat; None on the final record
    terminated: bool
    truncated: bool
    is_first: bool
    is_last: bool
    behaviour: str | None  # who chose a_t ("random", "checkpoint", later "teacher", "explorer")
    seed: int  # the episode's reset seed
    context: dict[str, Any]
    state: list[float] | None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


RECORD_FIELDS = frozenset(StepRecord.__dataclass_fields__)


def action_space_spec(space: Any) -> dict[str, Any]:
    """A JSON description of a gymnasium action space, enough to check actions against it."""
    from gymnasium import spaces

    if isinstance(space, spaces.Discrete):
        return {"type": "discrete", "n": int(space.n), "start": int(space.start)}
    if isinstance(space, spaces.Box):
        return {
            "type": "box",
            "shape": list(space.shape),
            "low": space.low.astype(float).ravel().tolist(),
            "high": space.high.astype(float).ravel().tolist(),
        }
    raise TypeError(f"unsupported action space {space!r}: only Discrete and Box are stored")


def action_to_json(action: Any, spec: dict[str, Any]) -> int | list[float]:
    import numpy as np

    if spec["type"] == "discrete":
        return int(action)
    return np.asarray(action, dtype=np.float32).ravel().astype(float).tolist()


def action_problem(action: Any, spec: dict[str, Any]) -> str | None:
    """Why `action` (as stored in JSON) is outside the space, or None if it is inside."""
    if spec["type"] == "discrete":
        if not isinstance(action, int) or isinstance(action, bool):
            return f"action {action!r} is not an integer"
        lo, n = spec["start"], spec["n"]
        return (
            None if lo <= action < lo + n else f"action {action} outside Discrete({n}, start={lo})"
        )
    if not isinstance(action, list) or len(action) != len(spec["low"]):
        return f"action {action!r} is not a list of {len(spec['low'])} floats"
    for i, (a, lo, hi) in enumerate(zip(action, spec["low"], spec["high"], strict=True)):
        if not isinstance(a, int | float) or not lo <= a <= hi:
            return f"action[{i}] = {a!r} outside [{lo}, {hi}]"
    return None
