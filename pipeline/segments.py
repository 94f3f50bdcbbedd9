"""An append-only key -> row store in parquet segments: the storage of the label and mask caches.

Each `put_many` appends one segment (`segment-000000.parquet`, ...) written atomically, so a kill
loses at most the batch in flight; segments are never rewritten. Read-only layers (`read_also`)
let one stage reuse entries another stage paid for without writing into its output.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import polars as pl

from pipeline.io import atomic_write_bytes

SEGMENT_PATTERN = "segment-%06d.parquet"
SEGMENT_GLOB = "segment-*.parquet"


class StoreError(RuntimeError):
    pass


class SegmentStore:
    def __init__(
        self,
        root: str | Path,
        schema: dict[str, pl.DataType],
        read_also: Sequence[str | Path] = (),
        name: str = "cache",
    ) -> None:
        if "key" not in schema:
            raise ValueError("a segment store schema needs a `key` column")
        self.root, self.schema, self.name = Path(root), schema, name
        self.root.mkdir(parents=True, exist_ok=True)
        self._rows: dict[str, dict[str, Any]] = {}
        for other in read_also:
            self._load(Path(other))
        self._segments = self._load(self.root)

    def _load(self, directory: Path) -> int:
        segments = sorted(directory.glob(SEGMENT_GLOB)) if directory.is_dir() else []
        for path in segments:
            try:
                frame = pl.read_parquet(path)
            except (pl.exceptions.ComputeError, OSError) as exc:
                raise StoreError(
                    f"{self.name} segment {path} is unreadable ({exc}); move it away to recompute "
                    f"its entries"
                ) from exc
            for row in frame.iter_rows(named=True):
                self._rows[row["key"]] = row
        return len(segments)

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
        # Numbered after the segments present: one writer per store directory at a time.
        path = self.root / (SEGMENT_PATTERN % self._segments)
        if path.exists():
            raise StoreError(f"{path} appeared meanwhile: is another run writing to {self.root}?")
        atomic_write_bytes(path, buf.getvalue())
        self._segments += 1
        self._rows.update(new)
