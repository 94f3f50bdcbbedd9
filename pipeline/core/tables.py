"""The label and mask tables: their schemas (what label@<env> and masks@<env> write) and their one
reader, which names the file and the command that rebuilds it when the table is missing,
unreadable, or of another format. Tables are never migrated: a table with other columns (e.g. the
`latency_s` / `attempts` columns label tables held before call telemetry moved out) is refused."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import polars as pl

from pipeline.core.errors import PipelineError

LABEL_TABLE_SCHEMA: dict[str, pl.DataType] = {
    "sample_key": pl.String(),
    "episode": pl.Int64(),
    "t": pl.Int64(),
    "task": pl.String(),
    "queried": pl.Boolean(),
    "source_key": pl.String(),  # the queried frame whose answer this row holds
    "teacher_id": pl.String(),
    "cache_key": pl.String(),
    "frame_sha256": pl.String(),
    "prompt_sha256": pl.String(),
    "parser_version": pl.String(),
    "parse_status": pl.String(),
    "parse_detail": pl.String(),
    "action": pl.List(pl.Float64),  # continuous envs (out_of_range values kept raw)
    "action_index": pl.Int64(),  # discrete envs
    "milestone": pl.String(),
    "potential": pl.Float64(),  # Phi_raw of the milestone
    "objects": pl.List(pl.String),
    "judge": pl.Boolean(),
    "raw_text": pl.String(),
    "finish_reason": pl.String(),
    "system_fingerprint": pl.String(),  # the server's build, where the teacher's API reports one
}

MASK_TABLE_SCHEMA: dict[str, pl.DataType] = {
    "sample_key": pl.String(),
    "episode": pl.Int64(),
    "t": pl.Int64(),
    # ok | no_objects (the frame's objects label has no usable phrases) | no_backend (the masks
    # back end has none for this env: the scripted one for a brought env)
    "status": pl.String(),
    "backend_id": pl.String(),
    "cache_key": pl.String(),
    "phrases": pl.List(pl.String),
    "masks": pl.List(pl.Binary),  # one 8-bit PNG per phrase, at the frame's resolution
    "combined": pl.Binary(),  # Semore eq. 4's sum, clipped to [0, 1] to fit 8 bits
}


class TableError(PipelineError, ValueError):
    """A label or mask table cannot be read as this code writes it; the message names the file
    and the command that rebuilds it."""


def _read(
    path: str | Path,
    schema: dict[str, pl.DataType],
    what: str,
    stage: str,
    columns: Sequence[str] | None,
) -> pl.DataFrame:
    path = Path(path)
    rebuild = f"`dvc repro {stage}@<env>` rebuilds it"
    if not path.is_file():
        raise TableError(f"{path}: no such {what}; {rebuild}")
    try:
        found = dict(pl.read_parquet_schema(path))
    except (Exception, pl.exceptions.PanicException) as exc:
        raise TableError(
            f"{path} is not a readable {what} ({type(exc).__name__}: {exc}); restore it with "
            f"`dvc checkout {path}`, or {rebuild}"
        ) from None
    if found != schema:
        raise TableError(
            f"{path}: a {what} written by another version of the pipeline ({_diff(found, schema)}"
            f"); it is not migrated: {rebuild}"
        )
    try:
        return pl.read_parquet(path, columns=list(columns) if columns is not None else None)
    except (Exception, pl.exceptions.PanicException) as exc:
        raise TableError(
            f"{path} is damaged ({type(exc).__name__}: {exc}); restore it with "
            f"`dvc checkout {path}`, or {rebuild}"
        ) from None


def _diff(found: dict[str, pl.DataType], wanted: dict[str, pl.DataType]) -> str:
    """How a table's columns differ from the schema, e.g. `has latency_s, attempts, which this
    code does not write`."""
    parts = []
    if missing := [c for c in wanted if c not in found]:
        parts.append(f"lacks {', '.join(missing)}")
    if extra := [c for c in found if c not in wanted]:
        parts.append(f"has {', '.join(extra)}, which this code does not write")
    if retyped := [f"{c} is {found[c]}, not {wanted[c]}" for c in wanted if c in found and found[c] != wanted[c]]:  # fmt: skip
        parts.append("; ".join(retyped))
    return "; ".join(parts) or "its columns are in another order"


def read_label_table(path: str | Path, columns: Sequence[str] | None = None) -> pl.DataFrame:
    """The label table at `path` (label@<env>'s output), all columns or `columns`."""
    return _read(path, LABEL_TABLE_SCHEMA, "label table", "label", columns)


def read_mask_table(path: str | Path, columns: Sequence[str] | None = None) -> pl.DataFrame:
    """The mask table at `path` (masks@<env>'s output), all columns or `columns`."""
    return _read(path, MASK_TABLE_SCHEMA, "mask table", "masks", columns)
