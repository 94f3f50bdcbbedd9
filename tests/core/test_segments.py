"""The segment store under the label and mask caches: checksummed names, older formats refused
(never migrated), verification for vlmrl-verify."""

import shutil

import polars as pl
import pytest

from pipeline.core.segments import SegmentStore, StoreError, segment_name, verify_store
from pipeline.teach.labels.cache import CachedAnswer, LabelCache

SCHEMA = {"key": pl.String, "value": pl.Int64}


def test_segments_are_named_after_their_bytes_and_rewrites_are_idempotent(tmp_path):
    store = SegmentStore(tmp_path, SCHEMA)
    store.put_many([{"key": "a", "value": 1}, {"key": "b", "value": 2}])
    (path,) = tmp_path.glob("segment-*.parquet")
    assert path.name == segment_name(path.read_bytes())
    again = SegmentStore(tmp_path / "other", SCHEMA)
    again.put_many([{"key": "a", "value": 1}, {"key": "b", "value": 2}])
    assert [p.name for p in (tmp_path / "other").glob("segment-*")] == [path.name]  # same bytes
    assert SegmentStore(tmp_path, SCHEMA).get("b") == {"key": "b", "value": 2}
    assert verify_store(tmp_path) == []


def test_a_numbered_segment_of_the_first_format_is_refused_never_renamed(tmp_path):
    """Format 1 had no checksum: it was read and renamed to the sha256 of its (maybe damaged)
    bytes, laundering a flipped bit into a valid-looking name (issue 26: 129 of 300 flips served).
    Now it is refused with the format found, the format read, and the command that rebuilds,
    and nothing in the directory is renamed, by the store or by vlmrl-verify."""
    pl.DataFrame({"key": ["x"], "value": [7]}, schema=SCHEMA).write_parquet(
        tmp_path / "segment-000000.parquet"
    )
    with pytest.raises(StoreError) as err:
        SegmentStore(tmp_path, SCHEMA, name="label cache", rebuild="`dvc repro label@X`")
    message = str(err.value)
    assert "segment format 1" in message and "reads format 2" in message
    assert "`dvc repro label@X`" in message and "segment-000000.parquet" in message
    assert [p.name for p in tmp_path.iterdir()] == ["segment-000000.parquet"]
    (problem,) = verify_store(tmp_path)
    assert "segment format 1" in problem


@pytest.mark.parametrize(
    "columns",
    [
        {"key": ["x"]},  # a column added since (e.g. system_fingerprint): was read as null
        {"key": ["x"], "value": [7], "latency_s": [0.1]},  # telemetry before it moved out
    ],
)
def test_a_segment_with_other_columns_is_refused_by_name(tmp_path, columns):
    frame = pl.DataFrame(columns)
    SegmentStore(tmp_path / "w", {c: frame.schema[c] for c in frame.columns}).put_many(
        frame.to_dicts()
    )
    with pytest.raises(StoreError, match=r"has columns .* this code reads \['key', 'value'\]"):
        SegmentStore(tmp_path / "w", SCHEMA, rebuild="`dvc repro masks@X`")


def test_verify_store_names_a_damaged_segment_and_says_what_to_do(tmp_path):
    SegmentStore(tmp_path, SCHEMA).put_many([{"key": "a", "value": 1}])
    (path,) = tmp_path.glob("segment-*.parquet")
    path.write_bytes(path.read_bytes()[:-3])
    (problem,) = verify_store(tmp_path)
    assert str(path) in problem and "mv " in problem
    with pytest.raises(StoreError, match="is damaged"):
        SegmentStore(tmp_path, SCHEMA)


def test_vlmrl_verify_checks_caches_and_names_the_damaged_segment(tmp_path, capsys):
    from pipeline.tools.integrity import main

    SegmentStore(tmp_path / "good", SCHEMA).put_many([{"key": "a", "value": 1}])
    SegmentStore(tmp_path / "bad", SCHEMA).put_many([{"key": "a", "value": 1}])
    (path,) = (tmp_path / "bad").glob("segment-*.parquet")
    path.write_bytes(b"\0" + path.read_bytes()[1:])
    assert main(["--caches", str(tmp_path / "good")]) == 0
    assert main(["--caches", str(tmp_path / "good"), str(tmp_path / "bad")]) == 1
    out = capsys.readouterr().out
    assert f"{tmp_path / 'good'} (cache): ok" in out and f"{path} is damaged" in out


def _answer(key: str, text: str) -> CachedAnswer:
    return CachedAnswer(key, "scripted:v2", "action", "f" * 64, "p" * 64, text, "stop")


def test_two_segments_answering_one_key_differently_are_flagged(tmp_path, capsys):
    """Issue 47: with two segments holding one key, the later name won silently and vlmrl-verify
    said ok. Now both segments and the key are named, with the one the cache serves."""
    from pipeline.tools.integrity import main

    LabelCache(tmp_path / "honest").put_many([_answer("k1", "LEFT"), _answer("k2", "UP")])
    LabelCache(tmp_path / "forged").put_many([_answer("k1", "RIGHT")])
    (honest,) = (tmp_path / "honest").glob("segment-*.parquet")
    (forged,) = (tmp_path / "forged").glob("segment-*.parquet")
    shutil.move(forged, tmp_path / "honest" / forged.name)
    served = LabelCache(tmp_path / "honest").get("k1").raw_text
    served_name = forged.name if served == "RIGHT" else honest.name
    (problem,) = verify_store(tmp_path / "honest")
    assert honest.name in problem and forged.name in problem and "k1" in problem
    assert f"serves {served_name}" in problem, problem
    assert main(["--caches", str(tmp_path / "honest")]) == 1
    assert "k1" in capsys.readouterr().out


def test_two_segments_holding_the_same_answer_are_not_flagged(tmp_path):
    """Two runs that paid for one key and got the same answer disagree on nothing."""
    LabelCache(tmp_path / "a").put_many([_answer("k1", "LEFT"), _answer("k2", "UP")])
    LabelCache(tmp_path / "b").put_many([_answer("k1", "LEFT")])
    for path in (tmp_path / "b").glob("segment-*.parquet"):
        shutil.move(path, tmp_path / "a" / path.name)
    assert len(list((tmp_path / "a").glob("segment-*.parquet"))) == 2
    assert verify_store(tmp_path / "a") == []
