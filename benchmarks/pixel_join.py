"""Join pixel results made by several sweeps into one table, figure and results file.

A table of `benchmarks.pixels` grows over sessions: arms run later on another `--out`, seeds
resumed elsewhere, reference runs (`benchmarks.drq_reference`). This joins their result files (a
sweep's `results.json`, the committed `results*.json.gz`, one run's `runs/<cell>.json`) and
writes what `benchmarks.pixels` writes for one sweep: the table, the curves and the joined
results (gzip without a timestamp, so that the same inputs give the same bytes):

    python -m benchmarks.pixel_join benchmarks/results/pixels/results.json.gz \\
        benchmarks/results/pixels/results_sac_offline.json.gz \\
        --table benchmarks/results/pixels/table.txt

Rows are ordered as `benchmarks.pixels.ARMS` (arms it does not know last, in input order). A
cell named twice, runs of different budgets, or a file that is not a result is an error naming
the file. The table ends with the file each arm's rows came from.
"""

from __future__ import annotations

import argparse
import gzip
import json
from pathlib import Path
from typing import Any

from benchmarks.pixels import ARMS, RESULT_FIELDS, plot, table


def read_results(path: Path) -> list[dict[str, Any]]:
    """The results in `path`: one result, or a {name: result} mapping; `.gz` is decompressed."""
    try:
        raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
        data = json.loads(raw)
    except (OSError, EOFError, gzip.BadGzipFile, json.JSONDecodeError) as exc:
        raise SystemExit(f"{path}: not a readable result file ({exc})") from exc
    rows = [data] if isinstance(data, dict) and "name" in data else None
    if rows is None and isinstance(data, dict):
        rows = list(data.values())
    for row in rows or [None]:
        if not isinstance(row, dict) or RESULT_FIELDS - set(row):
            lacks = sorted(RESULT_FIELDS - set(row if isinstance(row, dict) else {}))
            raise SystemExit(f"{path}: not a pixel result file, a row lacks {lacks}")
    return rows


def join(paths: list[Path]) -> tuple[list[dict[str, Any]], list[str], dict[str, list[str]]]:
    """Every file's results, ordered by arm then seed; the arms in table order; the files each
    arm's rows came from."""
    results: list[dict[str, Any]] = []
    where: dict[str, Path] = {}
    sources: dict[str, list[str]] = {}
    for path in paths:
        for row in read_results(path):
            if row["name"] in where:
                raise SystemExit(f"{row['name']} is in both {where[row['name']]} and {path}")
            if results and row["steps"] != results[0]["steps"]:
                raise SystemExit(
                    f"{path}: {row['name']} ran {row['steps']} steps, {results[0]['name']} "
                    f"({where[results[0]['name']]}) {results[0]['steps']}: one budget per table"
                )
            where[row["name"]] = path
            results.append(row)
            sources.setdefault(row["arm"], [])
            if path.name not in sources[row["arm"]]:
                sources[row["arm"]].append(path.name)
    if not results:
        raise SystemExit("no result files given")
    present = list(dict.fromkeys(r["arm"] for r in results))
    arms = [a for a in ARMS if a in present] + [a for a in present if a not in ARMS]
    order = {a: i for i, a in enumerate(arms)}
    results.sort(key=lambda r: (order[r["arm"]], r["seed"], r["name"]))
    return results, arms, sources


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("results", type=Path, nargs="+", metavar="RESULTS")
    parser.add_argument("--table", type=Path, required=True, help="the table (text) to write")
    parser.add_argument("--curves", type=Path, help="the figure of the curves (PNG) to write")
    parser.add_argument("--joined", type=Path, help="the joined results to write (.json.gz)")
    args = parser.parse_args(argv)
    results, arms, sources = join(args.results)
    text = (
        table(results, arms)
        + "\n\nrows from: "
        + "; ".join(f"{arm}: {', '.join(sources[arm])}" for arm in arms)
    )
    print(text)
    args.table.write_text(text + "\n")
    if args.curves:
        plot(results, arms, args.curves)
    if args.joined:
        body = json.dumps({r["name"]: r for r in results}, indent=1).encode()
        args.joined.write_bytes(gzip.compress(body, mtime=0))
    return 0


if __name__ == "__main__":
    from benchmarks import run_main

    raise SystemExit(run_main(main))
