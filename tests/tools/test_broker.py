"""DVC's queue broker kept small (pipeline/tools/sweeps/broker.py): `dvc exp clean`
once the celery control messages it keeps pass a count, the experiments' own messages kept."""

import base64
import json
import subprocess
import sys

import pipeline.tools.sweeps.broker as broker
from pipeline.tools.sweeps.queue import run_checked
from pipeline.tools.sweeps.table import SweepError


def message(exchange: str, routing_key: str, headers: dict) -> str:
    """A message as dvc-task's file broker stores it (the shape of the files it wrote)."""
    return json.dumps({
        "body": base64.b64encode(b"{}").decode(),
        "content-encoding": "utf-8",
        "content-type": "application/json",
        "headers": headers,
        "properties": {
            "delivery_mode": 2,
            "delivery_info": {"exchange": exchange, "routing_key": routing_key},
            "priority": 0,
            "body_encoding": "base64",
            "delivery_tag": f"tag-{exchange}-{routing_key}",
        },
    })  # fmt: skip


def broker_files(repo, control: int) -> dict[str, str]:
    """`control` control messages (a question to a worker and its reply, as `dvc exp show`
    leaves them) and one experiment's task message in `repo`'s processed folder."""
    folder = repo / broker.BROKER_PROCESSED
    folder.mkdir(parents=True)
    files = {"1_task.celery.msg": message("", "celery", {"task": "run_exp", "expires": None})}
    for i in range(control):
        if i % 2:
            name = f"{i + 2}_q.dvc-exp-1@localhost.celery.pidbox.msg"  # expired question
            files[name] = message("celery.pidbox", "", {"clock": i, "expires": 1.0})
        else:
            name = f"{i + 2}_r.k{i}.reply.celery.pidbox.msg"  # a reply, its ticket named
            files[name] = message("reply.celery.pidbox", f"k{i}", {"ticket": f"t{i}"})
    for name, text in files.items():
        (folder / name).write_text(text)
    return files


def test_the_poller_cleans_only_past_the_count_and_a_failed_clean_is_said(tmp_path, capsys):
    asked = []

    def run(args, repo):
        asked.append(args)

    assert broker.control_messages(tmp_path) == 0  # no broker yet: nothing to count or clean
    broker.clean_broker(tmp_path, run, above=0)
    broker_files(tmp_path, control=4)
    assert broker.control_messages(tmp_path) == 4  # the task's message is not counted
    broker.clean_broker(tmp_path, run, above=4)
    assert asked == []
    broker.clean_broker(tmp_path, run, above=3)
    assert asked == [["dvc", "exp", "clean"]]
    assert "`dvc exp clean`: 4 control messages in DVC's queue broker, 4 after it" in (
        capsys.readouterr().out
    )

    def fails(args, repo):
        raise SweepError("dvc exp clean (in repo) exited 1:\nERROR: broken")

    broker.clean_broker(tmp_path, fails, above=3)  # said, not raised: the poller goes on
    out = capsys.readouterr().out
    assert "4 control messages in DVC's queue broker were not cleaned" in out and "broken" in out


def test_dvc_exp_clean_removes_the_control_messages_and_keeps_the_tasks(tmp_path, capsys):
    """The real `dvc exp clean` on the messages the broker writes: what clean_broker counts is
    what DVC deletes, and the experiment's own message stays."""
    repo = tmp_path / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    subprocess.run([sys.executable, "-m", "dvc", "init", "-q"], cwd=repo, check=True)
    files = broker_files(repo, control=6)
    broker.clean_broker(repo, run_checked, above=5)  # the project's `dvc`
    left = sorted(p.name for p in (repo / broker.BROKER_PROCESSED).iterdir())
    assert left == ["1_task.celery.msg"] and len(files) == 7
    assert "6 control messages in DVC's queue broker, 0 after it" in capsys.readouterr().out


def test_status_says_when_the_broker_is_large_and_leaves_it(tmp_path):
    assert broker.format_broker(tmp_path) == ""  # no broker
    broker_files(tmp_path, control=4)
    assert broker.format_broker(tmp_path, above=4) == ""
    said = broker.format_broker(tmp_path, above=3)
    assert f"DVC's queue broker in {tmp_path} keeps 4 control messages" in said
    assert "dvc exp clean" in said and broker.control_messages(tmp_path) == 4  # nothing removed
