"""A user's own envs, brought by params alone, through `dvc repro` to `evaluate`: a gymnasium
id (Pendulum-v1, with ERPv's critic and agent) and a dm_control task (finger-spin, SAC), both
labelled by an `openai` teacher against a local server that this test starts. Then `dvc status`
after adding an env: nothing of the other env is stale.

Slow (about 3 minutes on 2 cores): run it with `pytest -m slow`.
"""

from __future__ import annotations

import copy
import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import ClassVar

import numpy as np
import polars as pl
import pytest
import yaml

from tests.conftest import REPO, send_json, tiny_params_dict, write_params
from tests.core.test_own_env import FINGER, PENDULUM
from tests.test_dvc_pipeline import _ran, _run, _scratch_repo

pytestmark = pytest.mark.slow


class _Teacher(BaseHTTPRequestHandler):
    """An OpenAI-compatible server that answers each task in its prompt's format: the first
    action value within range, the highest milestone, the env's first object phrase, `yes`."""

    asked: ClassVar[list[str]] = []

    def do_GET(self):  # the stage's pre-flight probe: GET /v1/models
        send_json(self, {"object": "list", "data": [{"id": "tiny", "object": "model"}]})

    def do_POST(self):
        request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        user = next(m for m in request["messages"] if m["role"] == "user")
        text = next(part["text"] for part in user["content"] if part["type"] == "text")
        type(self).asked.append(text)
        send_json(self, {
            "id": "x", "object": "chat.completion", "created": 0, "model": request["model"],
            "usage": {"prompt_tokens": 50, "completion_tokens": 4, "total_tokens": 54},
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": _answer(text)}}],
        })  # fmt: skip

    def log_message(self, *args):
        pass


def _answer(text: str) -> str:
    if "milestone: <LABEL>" in text:
        return "milestone: " + re.search(r"of:? ([A-Z_, ]+)[.;]", text).group(1).split(", ")[-1]
    if "reasonable: yes|no" in text:
        return "reasonable: yes"
    if "objects: <phrase>" in text:
        return "objects: " + ("pendulum" if "pendulum" in text else "finger")
    names = re.findall(r"^(\w+): <number>$", text, flags=re.MULTILINE)
    return "Describe: a frame.\n" + "\n".join(f"{name}: 0.5" for name in names)


@pytest.fixture(scope="module")
def server():
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Teacher)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    httpd.shutdown()


def _bring(params: dict, env_id: str, env: dict, base_url: str) -> dict:
    params = copy.deepcopy(params)
    params["envs"].append(env_id)
    params["env"][env_id] = copy.deepcopy(env)
    params["collect"][env_id] = {"behaviour": "random", "episodes": 1, "seed": 0,
                                 "shard_max_samples": 100}  # fmt: skip
    teacher = {"backend": "openai", "openai": {"base_url": base_url, "model": "tiny",
                                               "revision": "test", "max_retries": 0}}  # fmt: skip
    params["label"]["per_env"][env_id] = {"teacher": teacher}
    return params


def _stage_two(params: dict, runs: dict[str, tuple[str, str]], critic_envs: list[str]) -> dict:
    defaults = yaml.safe_load((REPO / "params.yaml").read_text())
    params = copy.deepcopy(params)
    params["train"] = {name: {"env": env, "method": method, "steps": 120, "seed": 0}
                       for name, (env, method) in runs.items()}  # fmt: skip
    for section in ("sac", "erpv"):
        params[section] = {**defaults[section], "start_steps": 60, "log_every": 40}
    params["critic"] = {"envs": critic_envs, "steps": 30, "seed": 0}
    params["evaluate"] = {**defaults["evaluate"], "episodes": 1}
    return params


def test_brought_envs_run_to_evaluate_and_adding_one_leaves_the_other_alone(tmp_path, server):
    base = tiny_params_dict(())
    pendulum = _stage_two(
        _bring(base, "Pendulum-v1", PENDULUM, server),
        {"pendulum-erpv": ("Pendulum-v1", "erpv")},
        ["Pendulum-v1"],
    )
    repo = _scratch_repo(tmp_path / "repo", pendulum)
    first = _ran(_run(["dvc", "repro"], repo))
    assert {"label@Pendulum-v1", "pretrain_critic@Pendulum-v1", "train@pendulum-erpv",
            "evaluate@pendulum-erpv"} <= set(first)  # fmt: skip
    evaluation = json.loads((repo / "metrics/eval/pendulum-erpv.json").read_text())
    assert np.isfinite(evaluation["return_mean"]) and evaluation["return_mean"] < 0
    (gif,) = (repo / "videos/pendulum-erpv").glob("episode-*.gif")  # the median episode's
    assert gif.stat().st_size > 0
    labels = pl.read_parquet(repo / "data/labels/Pendulum-v1.parquet")
    assert labels["teacher_id"].str.starts_with("openai:").all()
    assert set(labels["parse_status"]) == {"ok"}, labels["parse_detail"].unique().to_list()
    # the env's own milestone prompt (params) reached the server; the action came from common
    assert any("angle cosine" in text for text in _Teacher.asked)
    assert any("torque: <number>" in text for text in _Teacher.asked)
    masks = pl.read_parquet(repo / "data/masks/Pendulum-v1.parquet")
    assert set(masks["status"]) == {"no_backend"}
    assert "No reference for this env" in (repo / "reports/audit/Pendulum-v1.html").read_text()

    # add finger-spin: `dvc status` lists its stages alone, and the knowledge page (one section
    # per env of `envs`)
    finger = _bring(pendulum, "finger-spin", FINGER, server)
    write_params(repo / "params.yaml", finger)
    status = json.loads(_run(["dvc", "status", "--json"], repo).splitlines()[-1])
    assert "knowledge" in status
    # check_params reads the whole file; its output is constant, so it reruns nothing; env_code
    # runs on every repro (always changed) and rewrites Pendulum-v1's file with the same bytes
    stale = sorted(
        stage for stage in status if stage not in ("check_params", "env_code", "knowledge")
    )
    assert stale and all(stage.endswith("@finger-spin") for stage in stale), stale
    print("dvc status after adding finger-spin:", ", ".join(sorted(status)))

    # and a run on it: everything of finger-spin to evaluate, nothing of Pendulum-v1
    finger["train"]["finger-sac"] = {"env": "finger-spin", "method": "sac", "steps": 120,
                                     "seed": 0}  # fmt: skip
    write_params(repo / "params.yaml", finger)
    second = _ran(_run(["dvc", "repro"], repo))
    assert {"label@finger-spin", "train@finger-sac", "evaluate@finger-sac"} <= set(second)
    others = [s for s in second if "finger" not in s and s not in ("check_params", "compare",
                                                                   "env_code", "knowledge")]  # fmt: skip
    assert not others, others
    assert np.isfinite(
        json.loads((repo / "metrics/eval/finger-sac.json").read_text())["return_mean"]
    )
