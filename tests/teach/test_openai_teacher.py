"""The `openai` back end against a real OpenAI-compatible server on loopback (`transformers
serve` on the tiny random Qwen2-VL), plus a scripted loopback server for the failure paths."""

import functools
import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.core.config import TeacherConfig
from pipeline.teach.labelling.label import label_rollouts
from pipeline.teach.labels.status import ParseStatus
from pipeline.teach.labels.tasks import render_prompt
from pipeline.teach.rollouts.reader import iter_rollouts, load_manifest
from pipeline.teach.teachers import make_teacher
from pipeline.teach.teachers.base import TeacherUnavailableError
from tests.conftest import label_cfg, send_json
from tests.factories import build_tiny_qwen2_vl


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _teacher(base_url, model="tiny", **overrides):
    settings = {
        "base_url": base_url,
        "model": model,
        "revision": "r1",
        "timeout_s": 5.0,
        "max_retries": 1,
        "backoff_s": 0.01,
        "max_tokens": 12,
        **overrides,
    }
    return make_teacher(TeacherConfig(backend="openai", reliability=1.0, seed=0, openai=settings))


@pytest.fixture(scope="module")
def rollouts(collected):
    return collected("MountainCar-v0", episodes=1, image_size=56, max_episode_steps=10)


@pytest.fixture(scope="module")
def served_tiny_vlm(tmp_path_factory):
    model = build_tiny_qwen2_vl(tmp_path_factory.mktemp("tiny-qwen2-vl"))
    port = _free_port()
    serve = Path(sys.executable).parent / "transformers"
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    log = tmp_path_factory.mktemp("serve") / "serve.log"
    with open(log, "w") as out:
        proc = subprocess.Popen(
            [str(serve), "serve", str(model), "--host", "127.0.0.1", "--port", str(port)],
            stdout=out, stderr=subprocess.STDOUT, env=env,
        )  # fmt: skip
    try:
        while True:  # until it answers or exits: a loaded machine only makes this longer
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1)
                break
            except OSError:
                if proc.poll() is not None:
                    pytest.fail(f"transformers serve did not start:\n{log.read_text()[-3000:]}")
                time.sleep(0.5)
        yield f"http://127.0.0.1:{port}/v1", str(model)
    finally:
        proc.terminate()
        proc.wait(timeout=30)


# `transformers serve` started with a tiny model; fast: the client against the scripted server
@pytest.mark.slow
def test_openai_teacher_against_transformers_serve(served_tiny_vlm, rollouts, tmp_path):
    base_url, model = served_tiny_vlm
    teacher = _teacher(base_url, model, concurrency=2)
    cfg = label_cfg(tasks={"action": 5, "milestone": 5, "objects": 5, "judge": 5})
    summary = label_rollouts(
        rollouts, cfg, teacher, tmp_path / "cache", tmp_path / "t.parquet", progress=False
    )
    table = pl.read_parquet(tmp_path / "t.parquet").filter(pl.col("queried"))
    assert summary.teacher_calls == summary.queried == table.height > 0
    assert table["raw_text"].null_count() == 0
    statuses = set(table["parse_status"])
    assert "ok" not in statuses and statuses <= {str(s) for s in ParseStatus}
    assert set(table["finish_reason"]) <= {"stop", "length"}
    again = label_rollouts(
        rollouts,
        cfg,
        _teacher(base_url, model),
        tmp_path / "cache",
        tmp_path / "t2.parquet",
        progress=False,
    )
    assert again.teacher_calls == 0


class _Scripted(BaseHTTPRequestHandler):
    """Answers /v1/chat/completions from a per-test script of (delay_s, status, body) steps."""

    script: ClassVar[list] = []
    seen: ClassVar[list] = []
    drips: ClassVar[list] = []  # [bytes dripped, bytes to drip] per dripping request
    clock: ClassVar[Any] = None  # the client's deadline clock (`_ReadClock`), for `_drip`
    # GET /v1/models: (status, body); "hang": no answer until the test ends; None: no such
    # endpoint (404)
    models: ClassVar[tuple | str | None] = None
    release: ClassVar[threading.Event] = threading.Event()

    def do_GET(self):
        reply = type(self).models
        if reply is None:
            self.send_response(404)
            self.end_headers()
            return
        if reply == "hang":  # the client's own timeout ends the wait, not a sleep here
            type(self).release.wait()
            return
        status, body = reply
        send_json(self, body, status)

    def do_POST(self):
        request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).seen.append(request)
        delay, status, body = (
            type(self).script.pop(0) if type(self).script else (0, 200, "steer: 0")
        )
        time.sleep(delay)
        if status == "drip":  # body: where the drip starts ("headers" or "body")
            self._drip(body)
            return
        if status == "raw":  # body: the JSON value sent as the whole completion
            send_json(self, body)
            return
        if status != 200:
            self.send_response(status)
            self.end_headers()
            self.wfile.write(b'{"error": {"message": "scripted failure"}}')
            return
        text, finish = body if isinstance(body, tuple) else (body, "stop")
        payload = {
            "id": "x", "object": "chat.completion", "created": 0, "model": request["model"],
            "system_fingerprint": "fp_scripted",
            "usage": {"prompt_tokens": 100, "completion_tokens": 5, "total_tokens": 105},
            "choices": [{"index": 0, "finish_reason": finish, "message": {"role": "assistant", "content": text}}],
        }  # fmt: skip
        send_json(self, payload)

    def _drip(self, where):
        """The completion one byte per read of the client, from `where` on ("headers": from the
        status line; "body": after the headers): the next byte goes once the client's deadline
        clock has ticked again, i.e. once it reads again (`_ReadClock`). Every read gets its byte
        at once, so no read timeout ever fires; only a deadline for the whole request cuts the
        answer short. Driven by the client's progress: a loaded machine only makes it slower."""
        payload = json.dumps({"model": "tiny", "choices": [{"index": 0, "finish_reason": "stop",
                              "message": {"content": "milestone: BOTTOM"}}]}).encode()  # fmt: skip
        head = (f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(payload)}\r\n\r\n").encode()  # fmt: skip
        whole, start = head + payload, len(head) if where == "body" else 0
        clock, progress = type(self).clock, [0, len(whole) - start]  # bytes dripped, to drip
        type(self).drips.append(progress)
        try:
            if start:
                self.wfile.write(whole[:start])  # the headers at once; the client reads them
            for i in range(start, len(whole)):
                ticks = clock.ticks  # before the write: the client's next read ticks after it
                self.wfile.write(whole[i : i + 1])
                self.wfile.flush()
                progress[0] += 1
                if not clock.wait_for_tick(ticks):
                    break  # the test is over
        except OSError:  # the client hung up: what the deadline is for
            pass
        self.close_connection = True

    def log_message(self, *args):
        pass


@pytest.fixture
def scripted_server():
    _Scripted.script, _Scripted.seen, _Scripted.models, _Scripted.drips = [], [], None, []
    _Scripted.release = threading.Event()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Scripted)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1", _Scripted
    _Scripted.release.set()  # a hung handler lets go
    if _Scripted.clock is not None:  # and a dripping one
        _Scripted.clock.end()
        _Scripted.clock = None
    server.shutdown()


@pytest.fixture(scope="module")
def prompt(rollouts):
    sample = next(iter_rollouts(rollouts))
    return render_prompt(
        "milestone",
        "MountainCar-v0",
        load_manifest(rollouts)["action_space"],
        sample.frame_png,
        sample.record["context"],
    )


def test_request_carries_the_frame_and_a_json_schema(scripted_server, prompt):
    url, handler = scripted_server
    handler.script = [(0, 200, '{"milestone": "BOTTOM"}')]
    (reply,) = _teacher(url, json_schema=True).answer([prompt])
    request = handler.seen[0]
    image = request["messages"][1]["content"][0]["image_url"]["url"]
    assert image.startswith("data:image/png;base64,")
    assert (
        request["response_format"]["json_schema"]["schema"]["properties"]["milestone"]["enum"][0]
        == "BOTTOM"
    )
    assert request["temperature"] == 0.0 and reply.text == '{"milestone": "BOTTOM"}'


def test_requests_log_no_info_line_each(scripted_server, prompt, caplog):
    """The HTTP client's one INFO line per request (httpx, or httpx2 that openai may bring)
    stays out of a label run's output: 3 requests, no INFO record from either logger."""
    import logging

    url, handler = scripted_server
    handler.script = [(0, 200, "milestone: GOAL")] * 3
    with caplog.at_level(logging.INFO):
        _teacher(url).answer([prompt, prompt, prompt])
    assert len(handler.seen) >= 3
    noisy = [r for r in caplog.records if r.name.split(".")[0] in ("httpx", "httpx2")]
    assert not [r for r in noisy if r.levelno < logging.WARNING]


def test_retries_with_backoff_then_succeeds(scripted_server, prompt):
    url, handler = scripted_server
    handler.script = [(0, 503, ""), (0, 200, "milestone: GOAL")]
    (reply,) = _teacher(url, max_retries=2).answer([prompt])
    assert (reply.text, reply.attempts, reply.error) == ("milestone: GOAL", 2, None)


def test_timeout_after_all_retries(scripted_server, prompt):
    url, handler = scripted_server
    handler.script = [(1.0, 200, "late"), (1.0, 200, "late")]
    (reply,) = _teacher(url, timeout_s=0.2, max_retries=1).answer([prompt])
    assert reply.error == ParseStatus.TIMEOUT and reply.attempts == 2 and reply.text is None


def test_client_errors_are_not_retried(scripted_server, prompt):
    url, handler = scripted_server
    handler.script = [(0, 400, "")]
    (reply,) = _teacher(url, max_retries=3).answer([prompt])
    assert (
        reply.error == ParseStatus.HTTP_ERROR
        and reply.attempts == 1
        and "HTTP 400" in reply.error_detail
    )


def test_length_limited_answers_are_truncated(scripted_server, rollouts, tmp_path):
    url, handler = scripted_server
    handler.script = [(0, 200, ("Describe: the car is", "length"))] * 100
    cfg = label_cfg(tasks={"action": 5})
    label_rollouts(
        rollouts, cfg, _teacher(url), tmp_path / "c", tmp_path / "t.parquet", progress=False
    )
    assert set(pl.read_parquet(tmp_path / "t.parquet")["parse_status"]) == {"truncated"}


def _label(rollouts, tmp_path, teacher):
    return label_rollouts(
        rollouts, label_cfg(), teacher, tmp_path / "c", tmp_path / "t.parquet", progress=False
    )


def test_unreachable_server_is_named_with_its_setting_before_any_prompt(rollouts, tmp_path):
    url = f"http://127.0.0.1:{_free_port()}/v1"  # nothing listens there
    teacher = make_teacher(
        TeacherConfig(backend="openai", reliability=1.0, seed=0, openai={
            "base_url": url, "model": "tiny", "revision": "r1"}),  # the defaults: 3 retries
        "label.per_env.MountainCar-v0.teacher",
    )  # fmt: skip
    with pytest.raises(
        TeacherUnavailableError,
        match=rf"cannot reach {url} \(label\.per_env\.MountainCar-v0\.teacher\.openai\.base_url\)",
    ):
        _label(rollouts, tmp_path, teacher)


def test_a_server_that_refuses_the_key_names_the_key_setting(scripted_server, rollouts, tmp_path,
                                                            monkeypatch):  # fmt: skip
    url, handler = scripted_server
    handler.models = (401, {"error": {"message": "invalid api key"}})
    monkeypatch.setenv("VLMRL_TEST_KEY", "sk-wrong-key-123456")
    with pytest.raises(TeacherUnavailableError, match=r"refused the request \(HTTP 401\).*"
                       r"\$VLMRL_TEST_KEY \(<teacher>\.openai\.api_key_env\)"):  # fmt: skip
        _label(rollouts, tmp_path, _teacher(url, api_key_env="VLMRL_TEST_KEY"))
    monkeypatch.delenv("VLMRL_TEST_KEY")
    with pytest.raises(TeacherUnavailableError, match=r"VLMRL_TEST_KEY .*api_key_env\) is not set"):
        _teacher(url, api_key_env="VLMRL_TEST_KEY")
    assert handler.seen == []  # no prompt was sent


def test_a_hung_server_fails_at_the_probe_naming_timeout_s(scripted_server, rollouts, tmp_path):
    url, handler = scripted_server
    handler.models = "hang"
    with pytest.raises(
        TeacherUnavailableError, match=r"within 0\.5 s \(<teacher>\.openai\.timeout_s\)"
    ):
        _label(rollouts, tmp_path, _teacher(url, timeout_s=0.5))


def test_another_model_served_is_named(scripted_server, rollouts, tmp_path):
    url, handler = scripted_server
    handler.models = (200, {"object": "list", "data": [{"id": "qwen", "object": "model",
                                                        "created": 0, "owned_by": "me"}]})  # fmt: skip
    with pytest.raises(
        TeacherUnavailableError, match=r"serves \['qwen'\], not 'tiny' \(<teacher>\.openai\.model\)"
    ):
        _label(rollouts, tmp_path, _teacher(url))


def test_the_circuit_breaker_stops_a_server_that_dies_mid_run(scripted_server, rollouts, tmp_path):
    """Two answers, then every request fails: the stage stops after max_consecutive_failures
    requests in a row, not after every prompt of the run."""
    url, handler = scripted_server
    handler.script = [(0, 200, "milestone: BOTTOM")] * 2 + [(0, 503, "")] * 1000
    teacher = _teacher(url, max_retries=0, concurrency=1, max_consecutive_failures=3)
    with pytest.raises(
        TeacherUnavailableError, match=r"3 requests in a row .*\.max_consecutive_failures"
    ):
        _label(rollouts, tmp_path, teacher)
    assert len(handler.seen) == 2 + 3


def test_teacher_id_names_the_revision_and_answers_record_the_server_build(
    scripted_server, prompt, tmp_path
):
    """Other weights served under the same model name never share cache entries, and every
    answer records the server's system_fingerprint."""
    url, handler = scripted_server
    assert _teacher(url).teacher_id == "openai:tiny@r1"
    assert _teacher(url, revision="r2").teacher_id != _teacher(url).teacher_id
    handler.script = [(0, 200, "milestone: BOTTOM")]
    (reply,) = _teacher(url).answer([prompt])
    assert reply.system_fingerprint == "fp_scripted"
    from pipeline.teach.labels.cache import LabelCache
    from pipeline.teach.teachers.cached import ask_through_cache

    cache = LabelCache(tmp_path / "cache")
    handler.script = [(0, 200, "milestone: BOTTOM")]
    ask_through_cache(cache, _teacher(url), prompt)
    hit, cached = ask_through_cache(LabelCache(tmp_path / "cache"), _teacher(url), prompt)
    assert cached and hit.system_fingerprint == "fp_scripted"


def test_the_calls_cost_is_counted_in_tokens_and_seconds(scripted_server, rollouts, tmp_path):
    """The server's `usage` reaches the run's summary, the telemetry store and the audit's cost
    table; a telemetry segment written before tokens were kept still reads (tokens unknown)."""
    import polars as pl

    from pipeline.teach.labels.cache import open_telemetry
    from pipeline.teach.labels.cost import call_latency

    url, handler = scripted_server
    summary = label_rollouts(
        rollouts, label_cfg(), _teacher(url), tmp_path / "c", tmp_path / "t.parquet",
        telemetry_dir=tmp_path / "telemetry", progress=False,
    )  # fmt: skip
    calls = summary.teacher_calls
    assert calls == len(handler.seen) > 0 and summary.calls_without_usage == 0
    assert (summary.prompt_tokens, summary.completion_tokens) == (100 * calls, 5 * calls)
    assert (
        f"{calls} teacher calls in" in summary.cost_line()
        and "completion tokens" in summary.cost_line()
    )
    costs = call_latency(tmp_path / "t.parquet", tmp_path / "telemetry")
    assert sum(c["prompt_tokens"] for c in costs.values()) == 100 * calls
    assert sum(c["calls_with_usage"] for c in costs.values()) == calls
    # a segment of the earlier format (no token columns) beside the new ones
    old = pl.DataFrame({"key": ["k-old"], "teacher_id": ["t"], "task": ["action"],
                        "latency_s": [0.5], "attempts": [1]})  # fmt: skip
    import hashlib
    import io

    from pipeline.core.segments import SegmentStore  # noqa: F401  (the store reads it by name)

    buf = io.BytesIO()
    old.write_parquet(buf)
    data = buf.getvalue()
    (tmp_path / "telemetry" / f"segment-{hashlib.sha256(data).hexdigest()}.parquet").write_bytes(
        data
    )
    row = open_telemetry(tmp_path / "telemetry").get("k-old")
    assert row["latency_s"] == 0.5 and row["prompt_tokens"] is None


class _ReadClock:
    """The deadline's clock (`deadline.time.monotonic`), advanced by the client's own progress:
    each socket operation it starts asks the time once (deadline._clamp), and each ask moves the
    clock `step` seconds on. A dripping server waits for the next ask before its next byte."""

    def __init__(self, step: float) -> None:
        self.step, self.ticks, self.ended = step, 0, False
        self._changed = threading.Condition()

    def monotonic(self) -> float:
        with self._changed:
            self.ticks += 1
            self._changed.notify_all()
            return self.ticks * self.step

    def wait_for_tick(self, seen: int) -> bool:
        """Until the clock ticked past `seen` (True) or the test ended (`end`, False)."""
        with self._changed:
            self._changed.wait_for(lambda: self.ticks > seen or self.ended)
            return self.ticks > seen

    def end(self) -> None:
        """Let a dripping server that waits for a read that will not come go."""
        with self._changed:
            self.ended = True
            self._changed.notify_all()


@pytest.mark.parametrize("where", ["headers", "body"])
def test_a_server_that_drips_its_answer_is_cut_off_at_the_deadline(
    scripted_server, prompt, monkeypatch, where
):
    """A server that sends a byte each time the client reads never trips a read timeout (each
    read gets its byte at once); the request's deadline (timeout_s for the whole request) ends
    each attempt after about 20 reads, before the answer is complete. The clock is the client's
    progress (3 s a read), so the test waits on no real time."""
    import types

    from pipeline.teach.teachers import deadline as deadline_module

    url, handler = scripted_server
    handler.clock = clock = _ReadClock(step=3.0)
    monkeypatch.setattr(deadline_module, "time", types.SimpleNamespace(monotonic=clock.monotonic))
    handler.script = [(0, "drip", where)] * 2
    (reply,) = _teacher(url, timeout_s=60.0, max_retries=1).answer([prompt])
    assert reply.error == ParseStatus.TIMEOUT and reply.attempts == 2, reply
    assert "timeout_s=60.0" in reply.error_detail
    assert len(handler.drips) == 2
    for dripped, to_drip in handler.drips:  # it went on (no read timeout) and was cut short
        assert 10 <= dripped < to_drip, handler.drips


def test_a_huge_answer_is_read_no_further_than_the_cap_and_stored_clipped(
    scripted_server, rollouts, tmp_path
):
    """A 10 MB answer: the body is read to BODY_CAP and no further, the table and the cache keep
    its first characters and its size, and the row says too_long."""
    from pipeline.teach.labels.parsers import CLIP_KEEP_CHARS
    from pipeline.teach.teachers.openai_api import BODY_CAP

    url, handler = scripted_server
    handler.script = [(0, 200, "a" * 10_000_000)] * 100
    teacher = _teacher(url, max_retries=0)
    (reply,) = teacher.answer([render_prompt("milestone", "MountainCar-v0",
                                             load_manifest(rollouts)["action_space"],
                                             next(iter_rollouts(rollouts)).frame_png, {})])  # fmt: skip
    assert reply.error is None and len(reply.text) < CLIP_KEEP_CHARS + 64
    assert reply.text.endswith(f"[clipped: {BODY_CAP + 1:,} bytes or more]")
    _label(rollouts, tmp_path, teacher)
    table = pl.read_parquet(tmp_path / "t.parquet").filter(pl.col("queried"))
    assert set(table["parse_status"]) == {"too_long"}
    assert table["raw_text"].str.len_chars().max() < CLIP_KEEP_CHARS + 64
    assert "bytes or more, over 32,768 characters" in table["parse_detail"][0]


MALFORMED = {
    "empty choices": {"choices": []},
    "null choices": {"choices": None},
    "no choices": {"id": "x"},
    "a number as content": {"choices": [{"message": {"content": 5}, "finish_reason": "stop"}]},
    "a list as content": {"choices": [{"message": {"content": ["a"]}}]},
    "a string as choice": {"choices": ["steer: 0"]},
    "no message": {"choices": [{"finish_reason": "stop"}]},
    "a list as body": [1, 2],
    "a string as body": "steer: 0",
}


@pytest.mark.parametrize("body", list(MALFORMED.values()), ids=list(MALFORMED))
def test_a_completion_without_a_text_answer_gets_a_named_status(scripted_server, prompt, body):
    url, handler = scripted_server
    handler.script = [(0, "raw", body)]
    (reply,) = _teacher(url, max_retries=0).answer([prompt])
    assert reply.error == ParseStatus.MALFORMED_COMPLETION and reply.text is None, reply
    assert reply.error_detail


def test_a_completion_from_another_model_stops_the_stage_naming_the_setting(
    scripted_server, prompt
):
    """A proxy that routes `tiny` to another model: its answers are not cached as tiny's. An id
    listed in served_models (a dated snapshot of the same weights) is accepted."""
    url, handler = scripted_server
    body = {"model": "other", "choices": [{"message": {"content": "milestone: GOAL"}}]}
    handler.script = [(0, "raw", body)]
    with pytest.raises(
        TeacherUnavailableError,
        match=r"'other', not 'tiny' \(<teacher>\.openai\.model\).*served_models",
    ):
        _teacher(url, max_retries=0).answer([prompt])
    handler.script = [(0, "raw", body)]
    (reply,) = _teacher(url, max_retries=0, served_models=["other"]).answer([prompt])
    assert reply.text == "milestone: GOAL" and reply.error is None
    # `transformers serve` names the model with its revision: the same model
    handler.script = [(0, "raw", {**body, "model": "tiny@main"})]
    (reply,) = _teacher(url, max_retries=0).answer([prompt])
    assert reply.text == "milestone: GOAL" and reply.error is None


# ---- any response shape (hypothesis) ----------------------------------------------------------

_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=12,
)
_CHOICE = st.fixed_dictionaries(
    {},
    optional={
        "message": st.fixed_dictionaries({}, optional={"content": _JSON, "role": _JSON}) | _JSON,
        "finish_reason": _JSON,
    },
)
_COMPLETION = st.fixed_dictionaries(
    {},
    optional={
        "choices": st.lists(_CHOICE | _JSON, max_size=2) | _JSON,
        "model": st.just("tiny") | _JSON,
        "usage": st.fixed_dictionaries(
            {}, optional={"prompt_tokens": _JSON, "completion_tokens": _JSON}
        )
        | _JSON,
        "system_fingerprint": _JSON,
    },
)


@functools.cache
def _parsing_teacher():
    """One client for every example: building it (an httpx client) costs ~50 ms, and `_reply`
    reads the teacher's settings only."""
    from pipeline.teach.teachers.openai_api import OpenAITeacher

    return OpenAITeacher("http://127.0.0.1:9/v1", "tiny", "r1", None, 1.0, 0, 0.0, 1, 8, False)


@settings(max_examples=300, deadline=None)
@given(body=_COMPLETION | _JSON | st.binary(max_size=40))
def test_any_response_body_becomes_an_answer_or_a_named_status(body):
    """Whatever a server sends with HTTP 200: a reply with text (an answer for the parsers), or
    a transport-failure status with a detail; or, for a completion naming another model, the
    error that stops the stage. Never an IndexError, TypeError or AttributeError."""
    from pipeline.teach.labels.status import TRANSPORT_FAILURES

    teacher = _parsing_teacher()
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    try:
        reply = teacher._reply(raw, len(raw), 0.0, 1)
    except TeacherUnavailableError as exc:
        assert "served_models" in str(exc)
        return
    if reply.error is None:
        assert isinstance(reply.text, str)
        assert reply.prompt_tokens is None or reply.prompt_tokens >= 0
    else:
        assert reply.error in TRANSPORT_FAILURES and reply.text is None and reply.error_detail
