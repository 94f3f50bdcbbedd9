"""Sharing that cannot be tampered with (issue 47, item 3): what a collaborator pulls is checked
against hashes they trust (DVC's records in git, not a file beside the data), a dataset card
cannot point `load_dataset` at files the dataset does not record, and training shards are checked
before use. (Two cache segments answering one key differently: tests/core/test_segments.py.)"""

import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import polars as pl
import pytest
import yaml

from pipeline.core.io import sha256_file
from pipeline.dataset.layout import CARD_NAME, INFO_PATH, DatasetIntegrityError, verify_dataset
from pipeline.dataset.loader import iter_stacked
from pipeline.tools.integrity import main as vlmrl_verify
from tests.conftest import REPO

GUIDE = REPO / "docs" / "guide.md"


@pytest.fixture(scope="module")
def built(stage_one_dataset):
    """The wing's tiny dataset, built as the dataset stage builds it (read only)."""
    return stage_one_dataset / "ds"


@pytest.fixture
def dataset(built, tmp_path):
    copy = tmp_path / "ds"
    shutil.copytree(built, copy)
    return copy


def _negate_a_v(parquet: Path) -> None:
    """The attack of the issue: the labels an agent learns from, negated, in a valid file."""
    frame = pl.read_parquet(parquet)
    frame = frame.with_columns(pl.col("a_v").list.eval(-pl.element()))
    frame.write_parquet(parquet)


def _fix_up_info(dataset: Path, name: str) -> None:
    """What an attacker does next: record the tampered file's sha256 in meta/info.json."""
    info = json.loads((dataset / INFO_PATH).read_text())
    info["files"][name] = sha256_file(dataset / name)
    (dataset / INFO_PATH).write_text(json.dumps(info))


# --- the card's `configs` ------------------------------------------------------------------


def _point_card_at(dataset: Path, data_files) -> Path:
    card = dataset / CARD_NAME
    _, header, body = card.read_text().split("---\n", 2)
    header = yaml.safe_load(header)
    header["configs"][0]["data_files"] = data_files
    card.write_text("---\n" + yaml.safe_dump(header) + "---\n" + body)
    return card


def test_a_card_pointing_load_dataset_at_an_unrecorded_parquet_is_refused(dataset):
    """Today the card's `configs` are not checked: `load_dataset(dir)` serves any parquet the card
    names (the issue's reward 1000 on every row) and vlmrl-verify says ok."""
    parquet = sorted(dataset.glob("data/*.parquet"))[0]
    evil = dataset / "extra" / "train.parquet"
    evil.parent.mkdir()
    pl.read_parquet(parquet).with_columns(pl.lit(1000.0).alias("reward")).write_parquet(evil)
    card = _point_card_at(dataset, [{"split": "train", "path": "extra/*.parquet"}])
    problems = verify_dataset(dataset)
    assert any(
        str(card) in p and "extra/train.parquet" in p and "not recorded" in p for p in problems
    ), problems
    assert vlmrl_verify(["--datasets", str(dataset)]) == 1


@pytest.mark.parametrize(
    "data_files",
    [
        "../elsewhere/*.parquet",  # outside the dataset folder
        {"train": ["data/*.parquet", "/tmp/evil.parquet"]},  # an absolute path
        [{"split": "train", "path": "hf://datasets/someone/else/*.parquet"}],  # another repo
    ],
)
def test_a_card_whose_data_files_leave_the_dataset_is_refused(dataset, data_files):
    card = _point_card_at(dataset, data_files)
    problems = verify_dataset(dataset)
    assert any(str(card) in p and "outside" in p for p in problems), problems


def test_the_built_card_passes(built):
    assert verify_dataset(built) == []


# --- training shards ------------------------------------------------------------------------


def _rewrite_member(shard: Path, suffix: str, edit) -> None:
    """A valid tar with one member's content changed (what a reader cannot tell apart)."""
    members = []
    with tarfile.open(shard) as tar:
        for member in tar.getmembers():
            data = tar.extractfile(member).read()
            if member.name.endswith(suffix):
                data = edit(data)
            members.append((member, data))
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for member, data in members:
            member.size = len(data)
            tar.addfile(member, io.BytesIO(data))
    shard.write_bytes(buf.getvalue())


def test_iter_stacked_refuses_a_shard_that_does_not_match_its_recorded_sha256(dataset):
    """Today iter_stacked reads a shard whose labels were swapped (a valid tar) without a word."""
    shard = dataset / "wds" / "shard-000001.tar"

    def swap(data: bytes) -> bytes:
        labels = json.loads(data)
        if labels.get("a_v") is not None:
            labels["a_v"] = [-v for v in labels["a_v"]]
        return json.dumps(labels).encode()

    _rewrite_member(shard, ".labels.json", swap)
    with pytest.raises(DatasetIntegrityError) as err:
        next(iter_stacked(dataset / "wds"))
    message = str(err.value)
    assert str(shard) in message and "sha256" in message and "dvc checkout" in message


def test_iter_stacked_refuses_an_unrecorded_shard(dataset):
    shutil.copy(dataset / "wds" / "shard-000000.tar", dataset / "wds" / "shard-000002.tar")
    with pytest.raises(DatasetIntegrityError, match=r"shard-000002\.tar is not part of"):
        next(iter_stacked(dataset / "wds"))


def test_iter_stacked_hashes_each_shard_once_per_process(dataset, monkeypatch):
    from pipeline.dataset import loader

    calls = []
    real = loader.sha256_file
    monkeypatch.setattr(loader, "sha256_file", lambda p: calls.append(p) or real(p))
    first = [s["key"] for s in iter_stacked(dataset / "wds")]
    assert len(calls) == 2
    assert [s["key"] for s in iter_stacked(dataset / "wds")] == first
    assert len(calls) == 2  # verified shards are not hashed again while unchanged
    shard = dataset / "wds" / "shard-000000.tar"
    shard.write_bytes(shard.read_bytes())  # the same bytes, written again
    os.utime(shard, ns=(shard.stat().st_atime_ns, shard.stat().st_mtime_ns + 10**9))
    list(iter_stacked(dataset / "wds"))
    assert len(calls) == 3  # a rewritten file is hashed again


# --- DVC: the recipe verifies pulled files; vlmrl-verify checks against dvc.lock ------------


def _run(args, cwd, check=True):
    env = {
        **os.environ,
        "PATH": f"{os.path.dirname(sys.executable)}:{os.environ['PATH']}",
        **{f"GIT_{w}_{k}": "t" for w in ("AUTHOR", "COMMITTER") for k in ("NAME", "EMAIL")},
    }
    result = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True)
    if check:
        assert result.returncode == 0, f"{args} failed:\n{result.stdout}\n{result.stderr}"
    return result


def _dvc_repo(built: Path, root: Path) -> Path:
    """A git + DVC repo whose one stage outputs the dataset (`data/ds`), run and locked."""
    repo = root / "repo"
    shutil.copytree(built, repo / "src")
    (repo / "dvc.yaml").write_text(
        "stages:\n  dataset:\n    cmd: cp -r src data/ds\n    deps: [src]\n    outs: [data/ds]\n"
    )
    (repo / "data").mkdir()
    for args in (["git", "init", "-q"], ["dvc", "init", "-q"], ["dvc", "repro", "-q"]):
        _run(args, repo)
    return repo


def test_vlmrl_verify_checks_a_dataset_against_the_hashes_in_dvc_lock(
    built, tmp_path, capsys, monkeypatch
):
    """The issue's attack: a parquet overwritten and meta/info.json's sha256 fixed up passes every
    check against files beside the data; dvc.lock (in git) still says what was shared."""
    repo = _dvc_repo(built, tmp_path)
    monkeypatch.chdir(repo)
    ds = repo / "data" / "ds"
    assert vlmrl_verify(["--datasets", str(ds)]) == 0
    assert "dvc.lock" in capsys.readouterr().out  # says what it checked against

    parquet = sorted(ds.glob("data/*.parquet"))[0]
    _negate_a_v(parquet)
    _fix_up_info(ds, str(parquet.relative_to(ds)))
    assert verify_dataset(ds) == []  # meta/info.json alone cannot tell
    card = ds / CARD_NAME
    card.write_text(card.read_text().replace("MIT license", "a license"))
    assert vlmrl_verify(["--datasets", "data/ds"]) == 1
    out = capsys.readouterr().out
    fixes = []
    for tampered in (parquet, ds / INFO_PATH, card):
        shown = tampered.relative_to(repo)
        line = next(line for line in out.splitlines() if f" {shown} does not match" in line)
        assert "dvc.lock" in line, line
        fixes += re.findall(r"restore it: `([^`]+)`", line)
    assert fixes == [
        f"rm {p.relative_to(repo)} && dvc checkout --force data/ds"
        for p in (parquet, ds / INFO_PATH, card)
    ]
    assert not any("shard-" in line for line in out.splitlines())  # untouched files pass

    # the fix it names (DVC alone would keep a changed file it trusts: remove it first)
    _run(["bash", "-euo", "pipefail", "-c", "\n".join(fixes)], repo)
    assert vlmrl_verify(["--datasets", str(ds)]) == 0


def test_a_dataset_outside_a_dvc_repo_is_checked_against_its_info_only(built, capsys):
    assert vlmrl_verify(["--datasets", str(built)]) == 0
    assert "not a DVC output" in capsys.readouterr().out


def _guide_block(marker: str) -> str:
    match = re.search(rf"<!-- {re.escape(marker)} -->\n```bash\n(.*?)```", GUIDE.read_text(), re.S)
    assert match, f"docs/guide.md has no bash block after <!-- {marker} -->"
    return match.group(1)


@pytest.mark.slow
def test_the_sharing_recipe_makes_dvc_pull_refuse_a_tampered_remote(built, tmp_path, capsys):
    """Share as docs/guide.md says (its commands as written, paths substituted); someone with
    write access to the remote only overwrites the parquet's object: the collaborator's
    `dvc pull` refuses it instead of checking it out (without `verify`, it is taken silently)."""
    repo = _dvc_repo(built, tmp_path)
    remote = tmp_path / "remote"
    you = _guide_block("guide:sharing-you").replace("/srv/vlmrl-remote", str(remote))
    _run(["bash", "-euo", "pipefail", "-c", f"git add -A && git commit -qm project\n{you}"], repo)
    assert "verify = true" in (repo / ".dvc" / "config").read_text()  # what the clone gets

    parquet = sorted((repo / "data" / "ds").glob("data/*.parquet"))[0]
    md5 = _run(["md5sum", str(parquet)], repo).stdout.split()[0]
    obj = remote / "files" / "md5" / md5[:2] / md5[2:]
    honest = parquet.read_bytes()
    tampered = tmp_path / "tampered.parquet"
    shutil.copy(parquet, tampered)
    _negate_a_v(tampered)
    obj.chmod(0o644)
    obj.write_bytes(tampered.read_bytes())

    collaborator = _guide_block("guide:sharing-collaborator").replace(
        "/path/to/your/repo", str(repo)
    )
    pulled = _run(["bash", "-euo", "pipefail", "-c", collaborator], tmp_path, check=False)
    assert pulled.returncode != 0, pulled.stdout + pulled.stderr
    clone_parquet = tmp_path / "vlmrl" / parquet.relative_to(repo)
    assert not clone_parquet.exists() or clone_parquet.read_bytes() == honest

    # the control: the same remote, the recipe without `verify`, takes the tampered file
    plain = tmp_path / "plain"
    _run(["git", "clone", "-q", str(repo), str(plain)], tmp_path)
    _run(["dvc", "remote", "modify", "shared", "verify", "false"], plain)
    _run(["dvc", "pull", "-q"], plain)
    taken = plain / parquet.relative_to(repo)
    assert taken.read_bytes() == tampered.read_bytes()
    assert "Data and pipelines are up to date" in _run(["dvc", "status"], plain).stdout
    # ... and vlmrl-verify names it, the cache copy to remove, and the remote without `verify`
    capsys.readouterr()
    assert vlmrl_verify(["--datasets", str(plain / "data" / "ds")]) == 1
    out = capsys.readouterr().out
    cached = plain / ".dvc" / "cache" / "files" / "md5" / md5[:2] / md5[2:]
    assert f"{taken} does not match the md5 dvc.lock records" in out
    assert f"rm -f {cached} {taken}" in out and "dvc remote modify shared verify true" in out

    # once the remote's owner restores the object, the fix it names restores the file
    obj.write_bytes(honest)
    _run(["rm", "-f", str(cached), str(taken)], plain)
    _run(["dvc", "remote", "modify", "shared", "verify", "true"], plain)
    _run(["dvc", "pull", "-q", "data/ds"], plain)
    assert taken.read_bytes() == honest
    assert vlmrl_verify(["--datasets", str(plain / "data" / "ds")]) == 0
