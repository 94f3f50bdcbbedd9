"""A person's corrections of the teacher's labels: an overlay on the base teacher, in their own
git-versioned file.

`corrections/<env>.jsonl` holds one JSON object per corrected (frame, task):

    {"answer": "...", "frame_sha256": "...", "reviewer": "alice", "sample_key": "000003/000040",
     "task": "milestone"}

`answer` is written in the answer format the task's prompt asks for, so it is parsed by the very
parser that reads the teacher's answers. `python -m stages.review import` writes the file from a
Label Studio export; the label stage (`label@<env>` depends on `corrections/`) labels every
queried frame with `label.teacher` as always (cache hits cost nothing) and then replaces the rows
that have a correction with it (`teacher_id` `human:<reviewer>`; pipeline.teach.labelling.label). Unreviewed prompts keep the base
teacher's answers. The file is not a DVC output: no `dvc checkout`, `dvc repro` or cache
rebuild deletes it; commit it with git like params.yaml.

One correction per (sample_key, task): importing a new correction of the same frame and task
replaces the older one (git keeps the history). A correction whose frame is not the frame the
rollouts hold now (recollected rollouts) is refused by name; one for a frame the label stage does
not query under the current `label.tasks` is reported as unused.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from pipeline.core.errors import PipelineError
from pipeline.core.io import atomic_write_bytes
from pipeline.teach.labels.parsers import MAX_ANSWER_CHARS
from pipeline.teach.labels.tasks import TASKS, parse_answer

CORRECTIONS_DIR = Path("corrections")
HUMAN_PREFIX = "human:"


class CorrectionsError(PipelineError, ValueError):
    pass


@dataclass(frozen=True)
class Correction:
    sample_key: str
    task: str
    frame_sha256: str
    answer: str
    reviewer: str

    @property
    def teacher_id(self) -> str:
        return f"{HUMAN_PREFIX}{self.reviewer}"


def corrections_path(env_id: str, root: str | Path = CORRECTIONS_DIR) -> Path:
    return Path(root) / f"{env_id}.jsonl"


def check_reviewer(name: str) -> str:
    if not re.fullmatch(r"[A-Za-z0-9_.-]+", name):
        raise CorrectionsError(f"reviewer name {name!r}: use letters, digits, '.', '_' or '-'")
    return name


def read_corrections(path: str | Path) -> dict[tuple[str, str], Correction]:
    """(sample_key, task) -> correction; a missing file holds none. A line that is not a
    correction is refused with its file and line number."""
    path = Path(path)
    if not path.exists():
        return {}
    out: dict[tuple[str, str], Correction] = {}
    fields = set(Correction.__dataclass_fields__)
    try:
        lines = path.read_text(encoding="utf-8").split("\n")
    except UnicodeDecodeError as exc:
        raise CorrectionsError(
            f"{path}: not UTF-8 text ({exc}); restore it from git (`git checkout -- {path}`) or "
            "fix or delete the damaged lines"
        ) from None
    for n, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        where = f"{path}:{n}"
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise CorrectionsError(f"{where}: not JSON ({exc}); fix or delete the line") from None
        if not isinstance(obj, dict) or set(obj) != fields:
            got = sorted(obj) if isinstance(obj, dict) else type(obj).__name__
            raise CorrectionsError(f"{where}: a correction has the keys {sorted(fields)}, got {got}")  # fmt: skip
        if not all(isinstance(obj[k], str) for k in fields):
            raise CorrectionsError(f"{where}: every value of a correction is a string")
        if obj["task"] not in TASKS:
            raise CorrectionsError(f"{where}: unknown task {obj['task']!r}; known: {sorted(TASKS)}")  # fmt: skip
        try:
            check_reviewer(obj["reviewer"])
        except CorrectionsError as exc:
            raise CorrectionsError(f"{where}: {exc}") from None
        if len(obj["answer"]) > MAX_ANSWER_CHARS:
            raise CorrectionsError(
                f"{where}: an answer of {len(obj['answer']):,} characters, over the "
                f"{MAX_ANSWER_CHARS:,} any answer may have; fix or delete the line"
            )
        key = (obj["sample_key"], obj["task"])
        if key in out:
            raise CorrectionsError(f"{where}: a second correction of {key}; keep one")
        out[key] = Correction(**obj)
    return out


def check_corrections(path: str | Path, env_id: str, space: dict[str, Any]) -> int:
    """Read the file and parse each answer as the label stage will (`space`: the rollouts'
    action space): a correction that is no valid label is refused here, before DVC deletes
    the label table to rebuild it. Returns how many corrections the file holds."""
    corrections = read_corrections(path)
    for (sample_key, task), c in corrections.items():
        parsed = parse_answer(task, c.answer, env_id, space)
        if not parsed.status.has_value:
            raise CorrectionsError(
                f"{path}: the correction of {sample_key} ({task}), {quote_clipped(c.answer)}, is not a "
                f"valid {task} label for {env_id}: {parsed.status}, {quote_clipped(parsed.detail)}; fix or "
                "delete its line"
            )
    return len(corrections)


def quote_clipped(text: str, chars: int = 120) -> str:
    """`text` quoted for a message, at most `chars` of it (a correction may be any size)."""
    return repr(text) if len(text) <= chars else f"{text[:chars]!r}... ({len(text):,} characters)"


def write_corrections(path: str | Path, corrections: Iterable[Correction]) -> None:
    """The file, sorted by (sample_key, task), one line each: the same corrections always give
    the same bytes (a clean `git diff`)."""
    lines = [
        json.dumps(asdict(c), sort_keys=True, ensure_ascii=False)
        for c in sorted(corrections, key=lambda c: (c.sample_key, c.task))
    ]
    atomic_write_bytes(path, "".join(line + "\n" for line in lines).encode())


@dataclass
class MergeSummary:
    changed: list[Correction] = field(default_factory=list)  # added, or replacing another
    replaced: int = 0
    unchanged: int = 0


def merge_corrections(path: str | Path, new: Iterable[Correction]) -> MergeSummary:
    """Add `new` to the file at `path`: a correction of a (sample_key, task) already there
    replaces it."""
    current = read_corrections(path)
    summary = MergeSummary()
    for c in new:
        old = current.get((c.sample_key, c.task))
        if old == c:
            summary.unchanged += 1
            continue
        summary.replaced += old is not None
        summary.changed.append(c)
        current[(c.sample_key, c.task)] = c
    if summary.changed:
        write_corrections(path, current.values())
    return summary
