"""An append-only key -> row store in parquet segments: the storage of the label and mask caches.

Each `put_many` appends one segment written atomically, so a kill loses at most the batch in
flight; segments are never rewritten. A segment is named after the sha256 of its bytes
(`segment-<sha256>.parquet`):

- its checksum travels with it: every segment is verified before its bytes reach the parquet
  reader, and a damaged one is reported by name and never read (a flipped bit in a parquet file
  can otherwise be read silently with changed values, or abort the process inside the reader);
- names do not depend on how many segments exist, so removing any segment costs only its
  entries, and two runs that write the same rows write the same file.

One format is read: segment format 2, checksummed names, and exactly the store's columns. Older
segments are refused with the format found and the command that rebuilds them, never migrated: the
first format (`segment-000000.parquet`, numbered) has no checksum, so a damaged one would be served
and then renamed with a valid-looking checksum of its damaged bytes (issue 26). Read-only layers (`read_also`) let one stage reuse entries
another stage paid for without writing into its output.

A checksum says a segment is intact, not that it is honest: a segment with forged rows renamed to
its own sha256 verifies. Where two segments hold one key, the store serves the row of the segment
whose name sorts last (segments load in name order, later rows replace earlier ones; the store's
own directory after its `read_also` layers); `verify_store` names every key two segments of a
directory answer differently, both segments, and which one is served.
"""

from __future__ import annotations

import hashlib
import io
import json
import re
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import Any

import polars as pl

from pipeline.core.errors import PipelineError
from pipeline.core.io import atomic_write_bytes

SEGMENT_GLOB = "segment-*.parquet"
_CHECKSUMMED = re.compile(r"segment-([0-9a-f]{64})\.parquet")
_NUMBERED = re.compile(r"segment-\d{6}\.parquet")  # format 1: no checksum, refused
SEGMENT_FORMAT = 2  # segment-<sha256>.parquet holding exactly the store's columns


class StoreError(PipelineError, RuntimeError):
    """A store cannot be used as it is; the message names the file and what to do."""


def segment_name(data: bytes) -> str:
    return f"segment-{hashlib.sha256(data).hexdigest()}.parquet"


def _first_format(path: Path, rebuild: str) -> str:
    return (
        f"{path}: segment format 1 (numbered, no checksum), this code reads format "
        f"{SEGMENT_FORMAT} (segment-<sha256>.parquet). Its bytes cannot be verified, so none of "
        f"its entries are used: move it out of the directory (e.g. `mv {path} {path}.v1`) and "
        f"rerun {rebuild}; only its entries are recomputed."
    )


def verify_segment(path: Path, rebuild: str = "the stage that writes it") -> bytes:
    """The bytes of a checksummed segment, or StoreError if they do not match its name."""
    if _NUMBERED.fullmatch(path.name):
        raise StoreError(_first_format(path, rebuild))
    match = _CHECKSUMMED.fullmatch(path.name)
    if match is None:
        raise StoreError(f"{path}: not a checksummed segment name (segment-<sha256>.parquet)")
    data = path.read_bytes()
    if hashlib.sha256(data).hexdigest() != match.group(1):
        raise StoreError(
            f"{path} is damaged: its bytes do not match the checksum in its name, so none of its "
            f"entries are used. Move it out of the directory (e.g. `mv {path} {path}.damaged`) "
            f"and rerun {rebuild}: only its entries are recomputed."
        )
    return data


class SegmentStore:
    def __init__(
        self,
        root: str | Path,
        schema: dict[str, pl.DataType],
        read_also: Sequence[str | Path] = (),
        name: str = "cache",
        rebuild: str = "the stage that writes it",
        added_later: Sequence[str] = (),
    ) -> None:
        """`name` and `rebuild` (the command that recomputes the entries, e.g. `dvc repro
        label@<env>`) go into every error about a segment. `added_later`: trailing columns of
        `schema` that segments written before them lack; such a segment reads them as null."""
        if "key" not in schema:
            raise ValueError("a segment store schema needs a `key` column")
        self.root, self.schema, self.name, self.rebuild = Path(root), schema, name, rebuild
        self.added_later = tuple(added_later)
        self.root.mkdir(parents=True, exist_ok=True)
        self._rows: dict[str, dict[str, Any]] = {}
        for other in read_also:
            self._load(Path(other))
        self._load(self.root)

    def _read(self, path: Path, data: bytes) -> pl.DataFrame:
        try:
            frame = pl.read_parquet(io.BytesIO(data))
        except (Exception, pl.exceptions.PanicException) as exc:
            raise StoreError(
                f"{self.name} segment {path} is unreadable ({type(exc).__name__}: {exc}); move it "
                f"out of the directory and rerun {self.rebuild} to recompute its entries"
            ) from None
        older = [c for c in self.schema if c not in self.added_later]
        if self.added_later and frame.columns == older:
            frame = frame.with_columns(
                pl.lit(None, dtype=self.schema[c]).alias(c) for c in self.added_later
            )
        if frame.columns != list(self.schema):
            raise StoreError(
                f"{self.name} segment {path} has columns {frame.columns}, this code reads "
                f"{list(self.schema)} (segment format {SEGMENT_FORMAT}): it was written by "
                f"another version of this store. Move it out of the directory and rerun "
                f"{self.rebuild}; only its entries are recomputed."
            )
        return frame

    def _load(self, directory: Path) -> None:
        segments = sorted(directory.glob(SEGMENT_GLOB)) if directory.is_dir() else []
        for path in segments:
            try:
                data = verify_segment(path, self.rebuild)
            except StoreError as exc:
                raise StoreError(f"{self.name} segment {exc}") from None
            frame = self._read(path, data)
            for row in frame.iter_rows(named=True):
                self._rows[row["key"]] = row

    def __len__(self) -> int:
        return len(self._rows)

    def __contains__(self, key: str) -> bool:
        return key in self._rows

    def get(self, key: str) -> dict[str, Any] | None:
        return self._rows.get(key)

    def put_many(self, rows: Sequence[dict[str, Any]]) -> None:
        """Append one segment holding `rows` (skipping keys already stored)."""
        new = {r["key"]: r for r in rows if r["key"] not in self._rows}
        if not new:
            return
        buf = io.BytesIO()
        pl.DataFrame(list(new.values()), schema=self.schema).write_parquet(buf)
        data = buf.getvalue()
        path = self.root / segment_name(data)
        if not path.exists():  # the same rows, already written (by a run killed after it)
            atomic_write_bytes(path, data)
        self._rows.update(new)

    def retain(self, keys: Collection[str]) -> int:
        """Delete this store's own rows whose key is not in `keys` (caches read through
        `read_also` are untouched); return how many. A segment keeps its bytes when all its rows
        stay, goes when none do, and is rewritten with the staying rows otherwise."""
        keep, dropped = set(keys), 0
        for path in sorted(self.root.glob(SEGMENT_GLOB)):
            frame = self._read(path, verify_segment(path, self.rebuild))
            staying = frame.filter(pl.col("key").is_in(list(keep)))
            if staying.height == frame.height:
                continue
            if staying.height:
                buf = io.BytesIO()
                staying.write_parquet(buf)
                data = buf.getvalue()
                atomic_write_bytes(self.root / segment_name(data), data)
            path.unlink()
            for key in frame["key"].to_list():
                if key not in keep:
                    self._rows.pop(key, None)
            dropped += frame.height - staying.height
        return dropped


def verify_store(root: str | Path) -> list[str]:
    """Problems of a store directory, one line each with what to do (empty: all segments match
    their checksums and no two segments answer one key differently). For `vlmrl-verify`."""
    problems = []
    answers: dict[str, dict[str, list[Path]]] = {}  # key -> digest of a row -> its segments
    last: dict[str, Path] = {}  # key -> the segment whose row the store serves
    for path in sorted(Path(root).glob(SEGMENT_GLOB)):
        try:
            data = verify_segment(path)
            frame = pl.read_parquet(io.BytesIO(data))
        except StoreError as exc:
            problems.append(str(exc))
            continue
        except (Exception, pl.exceptions.PanicException) as exc:  # the reader's own errors
            problems.append(f"{path} is unreadable ({type(exc).__name__}: {exc}); move it out of the directory and rerun the stage that writes it")  # fmt: skip
            continue
        if "key" not in frame.columns:
            problems.append(f"{path} has no `key` column; move it out of the directory")
            continue
        for row in frame.iter_rows(named=True):
            text = json.dumps(row, sort_keys=True, default=str)  # NaN equals NaN here
            digest = hashlib.sha256(text.encode()).hexdigest()
            answers.setdefault(row["key"], {}).setdefault(digest, []).append(path)
            last[row["key"]] = path
    disputed: dict[tuple[tuple[str, ...], str], list[str]] = {}  # (segments, served) -> keys
    for key, rows in answers.items():
        if len(rows) > 1:
            names = tuple(sorted(p.name for paths in rows.values() for p in paths))
            disputed.setdefault((names, last[key].name), []).append(key)
    for (names, served), keys in disputed.items():
        problems.append(
            f"{' and '.join(names)} in {root} answer {len(keys)} key(s) differently (first: "
            f"{keys[0]}); the cache serves {served} (segments load in name order, the last "
            f"wins). One of them is wrong or forged: move the one you do not trust out of the "
            f"directory (e.g. `mv {Path(root) / served} {Path(root) / served}.suspect`) and rerun "
            f"the stage that writes it; only its entries are recomputed"
        )
    return problems
