"""The attack surface, tested: what a hostile teacher, a hostile shared file, a secret and a bad
disk can do to the pipeline.

- A VLM answer is untrusted text: rendered into the audit page it must run nothing (checked in
  headless Chromium, with every row opened), and the Label Studio export must carry it as data.
- A saved actor is a shared file: collect acts with an agent directory (safetensors), and loads a
  torch.export file only when trusted (its loader can run code without a pickle; the sympify
  payload is in tests/teach/test_collect.py); even then nothing is unpickled.
- Every call site that could unpickle is listed here with the reason it is safe; a new one fails.
  Resume states and sweep states are read without unpickling (none is listed).
- An API key reaches no output, cache, telemetry, card, export or log.
- 5 MB answers, invalid UTF-8, lone surrogates and control characters get a status, not a crash.
- A full disk during label or masks leaves nothing a later run serves; two label processes on one
  cache leave it consistent.
"""

from __future__ import annotations

import ast
import errno
import io
import json
import os
import subprocess
import sys
import threading
import zipfile
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar
from xml.etree import ElementTree

import polars as pl
import pytest
import torch

from pipeline.core.config import MasksConfig, TeacherConfig
from pipeline.core.segments import verify_store
from pipeline.dataset.build import build_dataset
from pipeline.teach.labelling.audit import write_audit
from pipeline.teach.labelling.exchange import export_label_studio
from pipeline.teach.labelling.label import label_rollouts
from pipeline.teach.labels.status import ParseStatus
from pipeline.teach.masks import make_mask_backend
from pipeline.teach.masks.compute import compute_masks
from pipeline.teach.rollouts.behaviours import UnsafeActorError, load_actor_program
from pipeline.teach.teachers import make_teacher
from pipeline.teach.teachers.base import Reply
from pipeline.teach.teachers.scripted import ScriptedTeacher
from tests.browser import dump_dom
from tests.conftest import REPO, label_cfg

TASKS = {"action": 2, "milestone": 2, "objects": 2, "judge": 2}


@pytest.fixture(scope="module")
def rollouts(collected):
    return collected("MountainCarContinuous-v0", episodes=2, max_episode_steps=24)


# ---- saved actors: nothing is unpickled ------------------------------------------------------


class _Actor(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(3, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.layer(x))


class _RunsCode:
    """Unpickling it makes a directory: the proof that loading ran the file's code."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.mkdir, (str(self.marker),))


def _rewrite(src: Path, dst: Path, edit) -> Path:
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w") as zout:
        for info in zin.infolist():
            zout.writestr(info, edit(info.filename, zin.read(info.filename)))
    return dst


def _pickle_of(obj: Any) -> bytes:
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    return buffer.getvalue()


@pytest.fixture
def actor(tmp_path):
    path = tmp_path / "actor.pt2"
    torch.export.save(torch.export.export(_Actor(), (torch.zeros(1, 3),)), path)
    return path


def _pickled_weight(name: str, data: bytes, marker: Path) -> bytes:
    """A weight stored `use_pickle` (what torch.export.save does for tensor subclasses)."""
    if name.endswith("_weights_config.json"):
        config = json.loads(data)
        config["config"]["layer.weight"]["use_pickle"] = True
        return json.dumps(config).encode()
    if name.endswith("weights/weight_0"):
        return _pickle_of(_RunsCode(marker))
    return data


def _pickled_sample_inputs(name: str, data: bytes, marker: Path) -> bytes:
    return _pickle_of(_RunsCode(marker)) if name.endswith("sample_inputs/model.pt") else data


def _opaque_constant(name: str, data: bytes, marker: Path) -> bytes:
    """A constant stored as an opaque object (torch.export.load `pickle.loads` it)."""
    if name.endswith("_constants_config.json"):
        return json.dumps(
            {"config": {"c": {"path_name": "opaque_obj_0", "use_pickle": True}}}
        ).encode()
    return data


@pytest.mark.parametrize(
    "edit", [_pickled_weight, _pickled_sample_inputs], ids=["pickled-weight", "sample-inputs"]
)
def test_a_shared_actor_file_cannot_run_code(actor, tmp_path, edit):
    marker = tmp_path / "ran"
    hostile = _rewrite(actor, tmp_path / "hostile.pt2", lambda n, d: edit(n, d, marker))
    # the attack is real: torch.export.load runs the file's code
    with pytest.raises(Exception):  # noqa: B017  (whatever torch raises after the fact)
        torch.export.load(hostile)
    assert marker.is_dir(), "precondition: plain torch.export.load unpickles the payload"
    marker.rmdir()
    with pytest.raises(ValueError, match=str(hostile)):
        load_actor_program(hostile)
    assert not marker.exists()


def test_opaque_constants_are_refused_before_loading(actor, tmp_path):
    hostile = _rewrite(
        actor, tmp_path / "opaque.pt2", lambda n, d: _opaque_constant(n, d, tmp_path / "ran")
    )
    with pytest.raises(UnsafeActorError, match=r"opaque_obj_0.*torch\.export\.save"):
        load_actor_program(hostile)


def test_a_plain_actor_still_loads(actor):
    program = load_actor_program(actor)
    assert program.module()(torch.zeros(1, 3)).shape == (1, 1)


# ---- every call site that could unpickle, with the reason it is safe --------------------------

# (file, enclosing function, call) -> why it never unpickles what someone else wrote. Resume
# states are not here: they hold no pickle (safetensors + JSON, PPO's envs as plain values;
# tests/learn/test_resume_state.py), so a garbled or planted one is a warning, never code run.
SAFE_UNPICKLING = {
    ("pipeline/core/distributed.py", "__call__", "pickle.loads"): (
        "items this process sent to its own Ray actors, in Ray's object store: never a file"
    ),
    ("pipeline/core/distributed.py", "map_on_ray", "pickle.loads"): (
        "results of this process's own Ray actors, in Ray's object store: never a file"
    ),
    ("pipeline/teach/rollouts/behaviours.py", "load_actor_program", "torch.export.load"): (
        "reached only for a file the user trusts (collect.<env>.trust_checkpoint_code: its sizes "
        "are sympified, which can run code; tests/teach/test_collect.py); refuses pickled payloads "
        "first, then loads with torch.load forced to weights_only"
    ),
    ("benchmarks/label_probe.py", "main", "np.load"): (
        "a benchmark's --features .npy, read with allow_pickle=False: an object array is refused"
    ),
    ("pipeline/tools/sweeps/lock_trees.py", "missing_trees", "yaml.load"): (
        "dvc.lock with yaml's safe loader (libyaml's CSafeLoader where built, else SafeLoader):"
        " plain types only, never an object"
    ),
}
UNPICKLERS = {
    "torch.load", "pickle.load", "pickle.loads", "pickle.Unpickler", "np.load", "numpy.load",
    "torch.export.load", "joblib.load", "dill.load", "dill.loads", "cloudpickle.load",
    "cloudpickle.loads", "torch.jit.load", "yaml.load", "yaml.unsafe_load", "marshal.loads",
}  # fmt: skip
# loaders that read weights safely by default: a call may not turn that off
WEIGHT_LOADERS = {"from_pretrained", "create_model", "create_model_and_transforms"}


def _dotted(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    return "?"


def _call_sites() -> tuple[dict[tuple[str, str, str], int], list[str]]:
    found: dict[tuple[str, str, str], int] = {}
    unsafe_options: list[str] = []
    for root in ("pipeline", "stages", "benchmarks"):
        for path in sorted((REPO / root).rglob("*.py")):
            rel = path.relative_to(REPO).as_posix()
            tree = ast.parse(path.read_text(), rel)
            for func in [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)]:
                for call in [n for n in ast.walk(func) if isinstance(n, ast.Call)]:
                    name = _dotted(call.func)
                    if name in UNPICKLERS:
                        key = (rel, func.name, name)
                        found[key] = found.get(key, 0) + 1
                    if name.rsplit(".", 1)[-1] in WEIGHT_LOADERS | UNPICKLERS:
                        for kw in call.keywords:
                            value = kw.value
                            bad = (kw.arg == "weights_only" and not _is_true(value)) or (
                                kw.arg == "trust_remote_code" and not _is_false(value)
                            )
                            if bad and (rel, func.name, name) not in SAFE_UNPICKLING:
                                unsafe_options.append(f"{rel}:{call.lineno} {name}({kw.arg}=...)")
    return found, unsafe_options


def _is_true(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) and node.value is True


def _is_false(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) and node.value is False


def test_every_unpickling_call_site_is_listed_with_its_reason():
    found, unsafe_options = _call_sites()
    assert set(found) == set(SAFE_UNPICKLING), (
        "a call that can unpickle was added or removed; say in SAFE_UNPICKLING why it never reads "
        f"someone else's file: new {sorted(set(found) - set(SAFE_UNPICKLING))}, gone "
        f"{sorted(set(SAFE_UNPICKLING) - set(found))}"
    )
    assert unsafe_options == []


def test_weight_loaders_ask_for_safe_loading_explicitly():
    """open_clip and transformers default to weights_only loading; our calls say so, so that a
    change of default upstream cannot make them unpickle."""
    sources = {
        p: (REPO / p).read_text()
        for p in ("pipeline/teach/masks/clip_dense.py", "pipeline/learn/shaping/prototypes.py")
    }
    for path, source in sources.items():
        assert "weights_only=True" in source, path
    assert "trust_remote_code" not in "".join(
        p.read_text() for p in (REPO / "pipeline").rglob("*.py")
    )


# ---- hostile answers rendered: the audit page and the Label Studio export ---------------------

# each payload announces itself by appending a string built at run time: if the page's DOM holds
# that string, the payload ran
RUN = "document.body.append('PW'+'NED')"
PAYLOADS = (
    f"<script>{RUN}</script>",
    f"<img src=x onerror=\"{RUN}\">",
    f"</script><script>{RUN}</script>",
    f"\"><svg onload=\"{RUN}\">",
    f"</pre><img src=x onerror=\"{RUN}\">",
    f"<iframe srcdoc=\"<script>top.{RUN}</script>\"></iframe>",
    f"objects: <img src=x onerror=\"{RUN}\">, car",
    f"milestone: <b onmouseover=\"{RUN}\">GOAL</b>",
    f"javascript:{RUN}",
    f"action: [0.5] <style>body{{background:url('javascript:{RUN}')}}</style>",
)  # fmt: skip


class HostileTeacher:
    """Answers every prompt with one of PAYLOADS, in turn: an untrusted model's text."""

    teacher_id = "hostile:v1"
    decoding: ClassVar[dict[str, Any]] = {}

    def __init__(self, payloads: tuple[str, ...] = PAYLOADS) -> None:
        self.payloads, self.asked = payloads, 0

    def answer(self, prompts):
        replies = []
        for _ in prompts:
            replies.append(Reply(self.payloads[self.asked % len(self.payloads)]))
            self.asked += 1
        return replies


@pytest.fixture(scope="module")
def hostile(rollouts, tmp_path_factory):
    """Labels and masks of the rollouts from the hostile teacher, and the audit page."""
    out = tmp_path_factory.mktemp("hostile")
    labels = out / "labels.parquet"
    label_rollouts(
        rollouts, label_cfg(tasks=TASKS), HostileTeacher(), out / "cache", labels, progress=False
    )
    compute_masks(
        rollouts, labels, make_mask_backend(MasksConfig(backend="scripted", batch_size=8)),
        out / "mc", out / "masks.parquet", batch_size=8, progress=False,
    )  # fmt: skip
    write_audit(rollouts, labels, out / "audit.html", out / "masks.parquet")
    return out


# opens every row of the browser on every page (each row's detail renders the raw answer in a
# <pre>), then moves the timeline through every step, then lets the page settle
DRIVE = """<script>
window.addEventListener("load", function () {
  var next = document.getElementById("br-next"), rows = 0;
  for (var guard = 0; guard < 1000; guard++) {
    document.querySelectorAll("#br-table tr[data-i] td").forEach(function (td) { td.click(); rows++; });
    if (!next || next.disabled) break;
    next.click();
  }
  var slider = document.getElementById("tl-slider");
  for (var i = 0; slider && i <= +slider.max; i++) { slider.value = i; slider.oninput(); }
  document.body.setAttribute("data-rows-opened", rows);
});
</script></body>"""


def test_hostile_answers_run_nothing_in_the_audit_page(hostile):
    page = (hostile / "audit.html").read_text()
    table = pl.read_parquet(hostile / "labels.parquet")
    assert set(PAYLOADS) <= set(table["raw_text"]), "every payload reached the table"
    assert "PWNED" not in page  # the marker exists only if a payload runs
    driven = hostile / "driven.html"
    driven.write_text(page.replace("</body>", DRIVE, 1))
    dom = dump_dom(driven, budget_ms=15000)
    opened = int(dom.split('data-rows-opened="')[1].split('"')[0])
    assert opened >= table.filter(pl.col("queried")).height, "the driver opened every row"
    assert "PWNED" not in dom
    assert "&lt;script&gt;" in dom  # the answers are there, as text


def test_label_studio_export_carries_hostile_answers_as_data(rollouts, hostile, tmp_path):
    export_label_studio(rollouts, hostile / "labels.parquet", tmp_path / "ls")
    raw = set(pl.read_parquet(hostile / "labels.parquet")["raw_text"])
    exported = set()
    for task in TASKS:
        config = (tmp_path / "ls" / f"{task}.label_config.xml").read_text()
        ElementTree.fromstring(config)  # well-formed: no answer text inside the config
        assert "PW" not in config and "<script" not in config
        for item in json.loads((tmp_path / "ls" / f"{task}.json").read_text()):
            exported.add(item["data"]["teacher_answer"])
    assert exported == raw  # the exact text, as a JSON string Label Studio renders as text


# ---- secrets: a sentinel API key reaches nothing the pipeline writes or logs ------------------

SENTINEL = "sk-sentinel-0f1e2d3c4b5a69788796a5b4c3d2e1f0"


class _KeyedServer(BaseHTTPRequestHandler):
    """An OpenAI-compatible server that checks the key; of every three calls, one answers, one
    echoes the Authorization header in its answer and one fails with an error message that
    echoes it (as some proxies do)."""

    calls: ClassVar[list[str]] = []

    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        auth = self.headers.get("Authorization", "")
        type(self).calls.append(auth)
        if auth != f"Bearer {SENTINEL}":
            self._send(401, {"error": {"message": "bad key"}})
        elif len(type(self).calls) % 3 == 0:
            self._send(400, {"error": {"message": f"rejected request with header {auth}"}})
        elif len(type(self).calls) % 3 == 1:
            self._send(200, _completion("milestone: GOAL"))
        else:
            self._send(200, _completion(f"I was called with {auth}"))

    def _send(self, status, payload):
        _reply(self, status, json.dumps(payload).encode())

    def log_message(self, *args):
        pass


def _reply(handler: BaseHTTPRequestHandler, status: int, body: bytes) -> None:
    handler.send_response(status)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    handler.wfile.write(body)


def _completion(text: str) -> dict[str, Any]:
    return {
        "id": "x", "object": "chat.completion", "created": 0, "model": "m",
        "choices": [{"index": 0, "finish_reason": "stop",
                     "message": {"role": "assistant", "content": text}}],
    }  # fmt: skip


def _serve(handler) -> tuple[str, ThreadingHTTPServer]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{server.server_address[1]}/v1", server


def _openai_teacher(base_url: str, **overrides: Any):
    settings = {
        "base_url": base_url, "model": "m", "revision": "r1", "timeout_s": 10.0,
        "max_retries": 0, "backoff_s": 0.01, "max_tokens": 12, **overrides,
    }  # fmt: skip
    return make_teacher(TeacherConfig(backend="openai", reliability=1.0, seed=0, openai=settings))


def test_a_sentinel_api_key_reaches_no_output_cache_or_log(
    rollouts, tmp_path, monkeypatch, caplog, capfd
):
    import logging

    caplog.set_level(logging.DEBUG)
    monkeypatch.setenv("VLMRL_SENTINEL_KEY", SENTINEL)
    _KeyedServer.calls = []
    url, server = _serve(_KeyedServer)
    try:
        teacher = _openai_teacher(url, api_key_env="VLMRL_SENTINEL_KEY", concurrency=2)
        cfg = label_cfg(tasks=TASKS, max_transport_failure_rate=1.0)
        labels = tmp_path / "labels.parquet"
        label_rollouts(
            rollouts, cfg, teacher, tmp_path / "cache", labels,
            telemetry_dir=tmp_path / "telemetry", progress=True,
        )  # fmt: skip
    finally:
        server.shutdown()
    assert _KeyedServer.calls and set(_KeyedServer.calls) == {f"Bearer {SENTINEL}"}
    statuses = set(pl.read_parquet(labels)["parse_status"])
    assert "http_error" in statuses and statuses & {"ok", "regex_fallback"}, statuses
    compute_masks(
        rollouts, labels, make_mask_backend(MasksConfig(backend="scripted", batch_size=8)),
        tmp_path / "mc", tmp_path / "masks.parquet", batch_size=8, progress=False,
    )  # fmt: skip
    build_dataset(
        rollouts, labels, tmp_path / "masks.parquet", tmp_path / "dataset", shard_max_samples=20
    )
    write_audit(rollouts, labels, tmp_path / "audit.html", tmp_path / "masks.parquet",
                telemetry_dir=tmp_path / "telemetry")  # fmt: skip
    export_label_studio(rollouts, labels, tmp_path / "ls")
    out, err = capfd.readouterr()
    leaks = [str(p) for p in tmp_path.rglob("*") if p.is_file() and SENTINEL[3:].encode()
             in p.read_bytes()]  # fmt: skip
    assert leaks == []
    for where, text in {"log": caplog.text, "stdout": out, "stderr": err}.items():
        assert SENTINEL[3:] not in text, where
    table = pl.read_parquet(labels)
    details = table.filter(pl.col("parse_status") == "http_error")["parse_detail"]
    assert len(details) and all("header Bearer <api key>" in d for d in details), details
    assert "I was called with Bearer <api key>" in set(table["raw_text"])


# ---- hostile text: sizes, encodings and control characters -----------------------------------


class _RawServer(BaseHTTPRequestHandler):
    """Answers every other call with the raw body bytes set per test, the others well."""

    body: ClassVar[bytes] = b""
    calls: ClassVar[int] = 0

    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        type(self).calls += 1
        body = self.body if self.calls % 2 else json.dumps(_completion("milestone: GOAL")).encode()
        _reply(self, 200, body)

    def log_message(self, *args):
        pass


def _body(content_json: str) -> bytes:
    """A completion whose content is the JSON string literal `content_json`, verbatim."""
    return json.dumps(_completion("@@")).encode().replace(b'"@@"', content_json.encode())


HOSTILE_BODIES = {
    "5MB": _body(json.dumps("milestone: GOAL " + "x" * 5_000_000)),
    "lone-surrogate": _body('"milestone: GOAL \\udcff"'),
    "nul-and-ansi": _body(json.dumps("milestone: \x00\x1b[31mGOAL\x1b[0m\x07\r\x08")),
    "invalid-utf8": _body('"milestone: GOAL "').replace(b'GOAL "', b'GOAL \xff\xfe"'),
    "not-json": b"\xff\xfe<html>proxy error</html>",
}


@pytest.mark.parametrize(
    "kind",
    # 5 MB stored, parsed and rendered: about ten seconds; the other bodies stay fast
    [pytest.param(k, marks=pytest.mark.slow) if k == "5MB" else k for k in HOSTILE_BODIES],
)
def test_hostile_answer_bytes_get_a_status_not_a_crash(rollouts, tmp_path, kind):
    _RawServer.body, _RawServer.calls = HOSTILE_BODIES[kind], 0
    url, server = _serve(_RawServer)
    labels = tmp_path / "labels.parquet"
    try:
        label_rollouts(
            rollouts, label_cfg(tasks={"milestone": 8}, max_transport_failure_rate=1.0),
            _openai_teacher(url), tmp_path / "cache", labels, progress=False,
        )  # fmt: skip
    finally:
        server.shutdown()
    table = pl.read_parquet(labels)
    assert table.height and set(table["parse_status"]) <= {str(s) for s in ParseStatus}
    assert "ok" in set(table["parse_status"])  # the well-formed half
    assert verify_store(tmp_path / "cache") == []
    for text in table["raw_text"].drop_nulls():
        text.encode("utf-8")  # strict: every stored answer is valid Unicode
    if kind in ("invalid-utf8", "not-json"):  # no completion: an error row, asked again next run
        failed = table.filter(pl.col("parse_status") == "http_error")
        assert failed.height and all("not a JSON completion" in d for d in failed["parse_detail"])
    write_audit(rollouts, labels, tmp_path / "audit.html")  # renders: the page can show it


# ---- a full disk, and two processes on one cache ---------------------------------------------


def _full_disk_after(monkeypatch, writes: int) -> list[int]:
    """Every atomic write after the first `writes` fails with ENOSPC halfway through its bytes."""
    import pipeline.core.io

    real_fdopen, count = os.fdopen, [0]

    class _HalfWriter:
        def __init__(self, f):
            self._f = f

        def write(self, data):
            self._f.write(data[: len(data) // 2])
            raise OSError(errno.ENOSPC, "No space left on device")

        def __getattr__(self, name):
            return getattr(self._f, name)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self._f.close()

    def fdopen(fd, *args, **kwargs):
        count[0] += 1
        f = real_fdopen(fd, *args, **kwargs)
        return f if count[0] <= writes else _HalfWriter(f)

    monkeypatch.setattr(pipeline.core.io.os, "fdopen", fdopen)
    return count


def _tmp_files(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.name.endswith(".tmp")]


@pytest.mark.parametrize("writes", [0, 2])
def test_a_full_disk_during_label_leaves_nothing_a_rerun_serves(
    rollouts, tmp_path, monkeypatch, writes
):
    cfg = label_cfg(tasks=TASKS, batch_size=4)
    clean = tmp_path / "clean.parquet"
    label_rollouts(rollouts, cfg, ScriptedTeacher(0.8, 0), tmp_path / "c0", clean, progress=False)
    with monkeypatch.context() as m:
        _full_disk_after(m, writes)
        with pytest.raises(OSError, match="No space left"):
            label_rollouts(
                rollouts, cfg, ScriptedTeacher(0.8, 0), tmp_path / "c1", tmp_path / "t.parquet",
                progress=False,
            )  # fmt: skip
    assert not (tmp_path / "t.parquet").exists() and _tmp_files(tmp_path) == []
    assert verify_store(tmp_path / "c1") == []
    summary = label_rollouts(
        rollouts, cfg, ScriptedTeacher(0.8, 0), tmp_path / "c1", tmp_path / "t.parquet",
        progress=False,
    )  # fmt: skip
    assert summary.cache_hits >= 4 * writes  # what was written whole is served
    assert pl.read_parquet(tmp_path / "t.parquet").equals(pl.read_parquet(clean))


def test_a_full_disk_during_masks_leaves_nothing_a_rerun_serves(rollouts, tmp_path, monkeypatch):
    labels = tmp_path / "labels.parquet"
    label_rollouts(
        rollouts, label_cfg(tasks=TASKS), ScriptedTeacher(1.0, 0), tmp_path / "lc", labels,
        progress=False,
    )  # fmt: skip
    backend = make_mask_backend(MasksConfig(backend="scripted", batch_size=4))

    def masks(cache: str, out: str):
        return compute_masks(
            rollouts, labels, backend, tmp_path / cache, tmp_path / out, batch_size=4,
            progress=False,
        )  # fmt: skip

    masks("m0", "clean.parquet")
    with monkeypatch.context() as m:
        _full_disk_after(m, 1)
        with pytest.raises(OSError, match="No space left"):
            masks("m1", "m.parquet")
    assert not (tmp_path / "m.parquet").exists() and _tmp_files(tmp_path) == []
    assert verify_store(tmp_path / "m1") == []
    masks("m1", "m.parquet")
    assert pl.read_parquet(tmp_path / "m.parquet").equals(
        pl.read_parquet(tmp_path / "clean.parquet")
    )


LABEL_SCRIPT = """
import sys
from pipeline.teach.labelling.label import label_rollouts
from pipeline.teach.teachers.scripted import ScriptedTeacher
from tests.conftest import label_cfg
rollouts, cache, out = sys.argv[1:]
label_rollouts(rollouts, label_cfg(tasks={tasks!r}, batch_size=2), ScriptedTeacher(0.8, 0), cache,
               out, progress=False)
"""


def test_two_label_processes_on_one_cache_leave_it_consistent(rollouts, tmp_path):
    script = LABEL_SCRIPT.format(tasks=TASKS)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    procs = []
    for i in range(2):
        argv = [sys.executable, "-c", script, str(rollouts), str(tmp_path / "shared"),
                str(tmp_path / f"t{i}.parquet")]  # fmt: skip
        procs.append(subprocess.Popen(argv, cwd=REPO, env=env, stderr=subprocess.PIPE, text=True))
    for proc in procs:
        _, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err[-3000:]
    assert verify_store(tmp_path / "shared") == [] and _tmp_files(tmp_path) == []
    label_rollouts(
        rollouts, label_cfg(tasks=TASKS, batch_size=2), ScriptedTeacher(0.8, 0),
        tmp_path / "alone", tmp_path / "alone.parquet", progress=False,
    )  # fmt: skip
    alone = pl.read_parquet(tmp_path / "alone.parquet")
    for i in range(2):
        assert pl.read_parquet(tmp_path / f"t{i}.parquet").equals(alone)
    again = label_rollouts(
        rollouts, label_cfg(tasks=TASKS, batch_size=2), ScriptedTeacher(0.8, 0),
        tmp_path / "shared", tmp_path / "again.parquet", progress=False,
    )  # fmt: skip
    assert again.teacher_calls == 0
