"""The review round trip through a real Label Studio (slow and opt-in: Label Studio is large and
lives in its own environment). Point VLMRL_LABEL_STUDIO at its `label-studio` executable:

    python3 -m venv /opt/ls && /opt/ls/bin/pip install label-studio
    VLMRL_LABEL_STUDIO=/opt/ls/bin/label-studio .venv/bin/pytest -m slow tests/teach/test_label_studio.py

Export a label table with stages.review, create a project with the exported labelling config,
import the tasks with their pre-annotations, submit one correction through Label Studio's API,
export the project as JSON, and import it back into the corrections file; the label stage then
overlays it."""

import json
import os
import socket
import subprocess
import time
import urllib.error
import urllib.request

import polars as pl
import pytest

from pipeline.teach.labelling.corrections import read_corrections
from pipeline.teach.labelling.exchange import export_label_studio, import_label_studio
from pipeline.teach.labelling.label import label_rollouts
from pipeline.teach.rollouts.collect import collect
from pipeline.teach.teachers.scripted import ScriptedTeacher
from tests.conftest import collect_cfg, env_cfg, label_cfg

pytestmark = pytest.mark.slow
EXE = os.environ.get("VLMRL_LABEL_STUDIO")
TOKEN = "vlmrl-test-token-0123456789abcdef01234567"
ENV = "MountainCar-v0"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class _API:
    def __init__(self, base: str) -> None:
        self.base = base

    def __call__(self, method: str, path: str, body=None):
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(
            self.base + path, data=data, method=method,
            headers={"Authorization": f"Token {TOKEN}", "Content-Type": "application/json"},
        )  # fmt: skip
        with urllib.request.urlopen(request, timeout=60) as response:
            return json.loads(response.read() or b"null")


@pytest.fixture
def label_studio(tmp_path):
    if not EXE:
        pytest.skip("set VLMRL_LABEL_STUDIO to a label-studio executable (see the module doc)")
    port = _free_port()
    env = {**os.environ, "LABEL_STUDIO_USERNAME": "alice@example.com",
           "LABEL_STUDIO_PASSWORD": "vlmrl-test-pass", "LABEL_STUDIO_USER_TOKEN": TOKEN,
           "LABEL_STUDIO_DISABLE_SIGNUP_WITHOUT_LINK": "true"}  # fmt: skip
    log = (tmp_path / "label-studio.log").open("w")
    server = subprocess.Popen(
        [EXE, "start", "--no-browser", "--internal-host", "127.0.0.1", "--port", str(port),
         "--data-dir", str(tmp_path / "ls-data"), "--enable-legacy-api-token"],
        env=env, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    api = _API(f"http://127.0.0.1:{port}")
    try:
        while True:  # until it answers or exits: a loaded machine only makes this longer
            try:
                api("GET", "/api/projects")
                break
            except (urllib.error.URLError, ConnectionError):
                if server.poll() is not None:
                    pytest.fail(f"Label Studio exited: {tmp_path}/label-studio.log")
                time.sleep(1)
        yield api
    finally:
        server.terminate()
        server.wait(timeout=60)


def test_a_correction_made_in_label_studio_reaches_the_labels(label_studio, tmp_path):
    rollouts = tmp_path / "rollouts" / ENV
    collect(ENV, env_cfg(max_episode_steps=20), collect_cfg(episodes=2), rollouts, progress=False)
    labels = tmp_path / "labels.parquet"
    teacher = ScriptedTeacher(0.5, 3)
    tasks = {"milestone": 5}
    label_rollouts(rollouts, label_cfg(tasks=tasks), teacher, tmp_path / "cache", labels,
                   progress=False)  # fmt: skip
    export_label_studio(rollouts, labels, tmp_path / "ls", tasks=["milestone"])
    config = (tmp_path / "ls" / "milestone.label_config.xml").read_text()
    exported = json.loads((tmp_path / "ls" / "milestone.json").read_text())

    api = label_studio
    project = api("POST", "/api/projects", {"title": "vlmrl milestone", "label_config": config})
    api("POST", f"/api/projects/{project['id']}/import", exported)
    ls_tasks = api("GET", f"/api/tasks?project={project['id']}&page_size=1000")
    ls_tasks = ls_tasks["tasks"] if isinstance(ls_tasks, dict) else ls_tasks
    assert len(ls_tasks) == len(exported)
    first = min(ls_tasks, key=lambda t: t["id"])
    # a reviewer says GOAL on the first task, through the API the labelling UI uses
    api("POST", f"/api/tasks/{first['id']}/annotations", {"result": [
        {"from_name": "milestone", "to_name": "image", "type": "choices",
         "value": {"choices": ["GOAL"]}}]})  # fmt: skip
    export = api("GET", f"/api/projects/{project['id']}/export?exportType=JSON")
    (tmp_path / "export.json").write_text(json.dumps(export))
    assert any(t.get("predictions") for t in export)  # the teacher's pre-annotations came along

    corrections = tmp_path / "corrections.jsonl"
    result = import_label_studio(tmp_path / "export.json", rollouts, "alice", corrections)
    assert dict(result.imported) == {"milestone": 1}
    (correction,) = read_corrections(corrections).values()
    assert correction.sample_key == first["data"]["sample_key"] and "GOAL" in correction.answer
    out = tmp_path / "overlaid.parquet"
    summary = label_rollouts(rollouts, label_cfg(tasks=tasks), teacher, tmp_path / "cache", out,
                             progress=False, corrections=corrections)  # fmt: skip
    assert summary.corrected == 1 and summary.teacher_calls == 0
    row = pl.read_parquet(out).filter(
        (pl.col("sample_key") == correction.sample_key) & pl.col("queried")
    )
    assert row["milestone"].to_list() == ["GOAL"] and row["teacher_id"][0] == "human:alice"
