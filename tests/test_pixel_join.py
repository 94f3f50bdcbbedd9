"""benchmarks.pixel_join: result files of several sweeps become one table, in ARMS order, with
the file each arm came from; a repeated cell, a second budget or a non-result is refused."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from benchmarks.pixel_join import main


def _result(arm, seed, final, steps=100):
    return {"name": f"{arm}-seed{seed}", "arm": arm, "seed": seed, "steps": steps,
            "eval": [(50, 1.0), (100, final)], "final_return": final,
            "train_seconds": 10.0, "updates_per_s": 2.0}  # fmt: skip


def _gz(path, rows):
    path.write_bytes(gzip.compress(json.dumps({r["name"]: r for r in rows}).encode(), mtime=0))
    return path


def test_join_orders_arms_as_the_benchmark_and_names_each_rows_file(tmp_path):
    table_gz = _gz(tmp_path / "results.json.gz", [_result("sac", 1, 30.0), _result("sac", 0, 10.0)])
    later = tmp_path / "erpv-seed0.json"  # one run's result, as a sweep's runs/ holds it
    later.write_text(json.dumps(_result("erpv", 0, 50.0)))
    ref = _gz(tmp_path / "ref.json.gz", [_result("drq-reference", 0, 70.0)])
    out = tmp_path / "table.txt"
    joined = tmp_path / "joined.json.gz"
    main([str(ref), str(table_gz), str(later), "--table", str(out), "--joined", str(joined)])
    lines = out.read_text().splitlines()
    rows = [ln.split() for ln in lines[3:6]]
    assert [r[0] for r in rows] == ["sac", "erpv", "drq-reference"]  # ARMS order, unknown last
    assert rows[0][1:5] == ["2", "20.0", "+-", "14.1"]  # both sac seeds, mean +- std (ddof 1)
    assert lines[-1] == (
        "rows from: sac: results.json.gz; erpv: erpv-seed0.json; drq-reference: ref.json.gz"
    )
    names = list(json.loads(gzip.decompress(joined.read_bytes())))
    assert names == ["sac-seed0", "sac-seed1", "erpv-seed0", "drq-reference-seed0"]
    first = joined.read_bytes()
    main([str(ref), str(table_gz), str(later), "--table", str(out), "--joined", str(joined)])
    assert joined.read_bytes() == first  # no timestamp in the gzip header


def test_join_refuses_a_repeated_cell_a_second_budget_and_a_non_result(tmp_path):
    a = _gz(tmp_path / "a.json.gz", [_result("sac", 0, 10.0)])
    b = _gz(tmp_path / "b.json.gz", [_result("sac", 0, 12.0)])
    out = str(tmp_path / "t.txt")
    with pytest.raises(SystemExit, match=r"sac-seed0 is in both .*a\.json\.gz and .*b\.json\.gz"):
        main([str(a), str(b), "--table", out])
    c = _gz(tmp_path / "c.json.gz", [_result("drq", 0, 10.0, steps=200)])
    with pytest.raises(SystemExit, match=r"c\.json\.gz: drq-seed0 ran 200 steps, .*100"):
        main([str(a), str(c), "--table", out])
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"x": {"arm": "sac"}}))
    with pytest.raises(SystemExit, match=r"bad\.json: not a pixel result file, a row lacks"):
        main([str(bad), "--table", out])
    broken = tmp_path / "broken.json.gz"
    broken.write_bytes(b"\x1f\x8b not gzip")
    with pytest.raises(SystemExit, match=r"broken\.json\.gz: not a readable result file"):
        main([str(broken), "--table", out])
    assert not (tmp_path / "t.txt").exists()  # nothing written from a refused join


RESULTS = Path(__file__).resolve().parents[1] / "benchmarks" / "results" / "pixels"
JOINED_TABLES = sorted(p.name for p in RESULTS.glob("table*.txt") if "rows from: " in p.read_text())


@pytest.mark.parametrize("name", JOINED_TABLES)
def test_committed_tables_are_the_join_of_the_files_they_name(name, tmp_path):
    """A committed table says which result files its rows came from; joining those files again
    must give the same text, or the table was edited by hand or its files changed after it."""
    committed = (RESULTS / name).read_text()
    footer = committed.rsplit("rows from: ", 1)[1].strip()
    files = dict.fromkeys(
        f.strip() for part in footer.split("; ") for f in part.split(": ", 1)[1].split(",")
    )
    out = tmp_path / name
    main([str(RESULTS / f) for f in files] + ["--table", str(out)])
    assert out.read_text() == committed


def test_the_committed_tables_are_checked():
    assert {"table.txt", "table_paper_gpu.txt"} <= set(JOINED_TABLES)


def test_curves_of_more_arms_than_colours_differ_in_colour_or_line_style(tmp_path, monkeypatch):
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    from benchmarks.pixels import plot

    drawn = []
    monkeypatch.setattr(Figure, "savefig", lambda fig, *a, **k: drawn.append(fig))
    arms = [f"arm{i}" for i in range(13)]
    plot([_result(arm, 0, 10.0 * i) for i, arm in enumerate(arms)], arms, tmp_path / "c.png")
    lines = drawn[0].axes[0].get_lines()[: len(arms)]  # the threshold line comes last
    assert [line.get_label() for line in lines] == [f"{arm} (1 seeds)" for arm in arms]
    looks = [(line.get_color(), line.get_linestyle()) for line in lines]
    assert len(set(looks)) == len(arms)  # 13 arms, 10 colours: no two alike
