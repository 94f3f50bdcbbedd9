import tarfile

import numpy as np
import pytest

from pipeline.core.io import sha256_file
from pipeline.teach.rollouts.reader import iter_shard
from pipeline.teach.rollouts.writer import AtomicShardWriter, encode_json, encode_png


def _write(writer, n):
    frame = np.arange(8 * 8 * 3, dtype=np.uint8).reshape(8, 8, 3)
    for t in range(n):
        writer.write(f"000000/{t:06d}", encode_png(frame), encode_json({"t": t}))


def test_shard_appears_only_when_closed(tmp_path):
    path = tmp_path / "shard-000000.tar"
    writer = AtomicShardWriter(path)
    _write(writer, 3)
    assert not path.exists() and writer.tmp_path.exists()
    closed = writer.close()
    assert path.exists() and not writer.tmp_path.exists()
    assert closed.samples == 3 and closed.sha256 == sha256_file(path)
    assert closed.bytes == path.stat().st_size
    assert [s.t for s in iter_shard(path)] == [0, 1, 2]


def test_abort_leaves_nothing(tmp_path):
    path = tmp_path / "shard-000000.tar"
    writer = AtomicShardWriter(path)
    _write(writer, 2)
    writer.abort()
    assert list(tmp_path.iterdir()) == []


def test_an_exception_mid_shard_leaves_no_final_shard(tmp_path):
    path = tmp_path / "shard-000000.tar"
    writer = AtomicShardWriter(path)
    with pytest.raises(RuntimeError):
        try:
            _write(writer, 2)
            raise RuntimeError("env crashed")
        finally:
            writer.abort()
    assert not path.exists()


def test_same_samples_same_bytes(tmp_path):
    hashes = []
    for name in ("a.tar", "b.tar"):
        writer = AtomicShardWriter(tmp_path / name)
        _write(writer, 4)
        hashes.append(writer.close().sha256)
    assert hashes[0] == hashes[1]


def test_shard_is_a_plain_tar_with_png_and_json_members(tmp_path):
    writer = AtomicShardWriter(tmp_path / "s.tar")
    _write(writer, 1)
    writer.close()
    with tarfile.open(tmp_path / "s.tar") as tar:
        assert tar.getnames() == ["000000/000000.json", "000000/000000.png"]


def test_shards_are_webdatasets_own_bytes_and_samples(tmp_path):
    """The writer and reader use `tarfile` so that stage one loads no torch (webdataset imports
    it): the shard is the byte-for-byte tar webdataset's `TarWriter(encoder=False, mtime=0.0)`
    writes, and `wds.WebDataset` and `iter_tar_samples` read the same samples from it."""
    import io

    import webdataset as wds

    from pipeline.teach.rollouts.reader import iter_tar_samples

    frame = np.arange(8 * 8 * 3, dtype=np.uint8).reshape(8, 8, 3)
    samples = [
        {"__key__": f"{e:06d}/{t:06d}", "png": encode_png(frame + t), "json": encode_json({"t": t}),
         "mask.npy": bytes([t]) * 5}
        for e in range(2) for t in range(3)
    ]  # fmt: skip
    ours = AtomicShardWriter(tmp_path / "ours.tar")
    for s in samples:
        ours.write(s["__key__"], s["png"], s["json"], {"mask.npy": s["mask.npy"]})
    ours.close()
    buffer = io.BytesIO()
    with wds.TarWriter(buffer, encoder=False, mtime=0.0) as theirs:
        for s in samples:
            theirs.write(s)
    assert (tmp_path / "ours.tar").read_bytes() == buffer.getvalue()

    read_by_wds = [
        {k: v for k, v in s.items() if not k.startswith("__") or k == "__key__"}
        for s in wds.WebDataset(str(tmp_path / "ours.tar"), shardshuffle=False, empty_check=False)
    ]
    assert list(iter_tar_samples(tmp_path / "ours.tar")) == read_by_wds == samples
