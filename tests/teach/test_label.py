import hashlib
import shutil

import polars as pl
import pytest

from pipeline.teach.labelling.label import LabelError, label_rollouts
from pipeline.teach.labels import tasks as tasks_module
from pipeline.teach.labels.cache import LabelCache
from pipeline.teach.labels.status import ParseStatus
from pipeline.teach.rollouts.collect import collect
from pipeline.teach.teachers.base import Reply
from pipeline.teach.teachers.baselines import ConstantTeacher, RandomTeacher
from pipeline.teach.teachers.scripted import ScriptedTeacher
from tests.conftest import collect_cfg, env_cfg, label_cfg

MC = "MountainCar-v0"


class CountingTeacher:
    """Wraps a teacher and records every prompt it is asked."""

    def __init__(self, inner, fail=None, interrupt_after_calls=None):
        self.inner, self.fail, self.interrupt_after_calls = inner, fail, interrupt_after_calls
        self.teacher_id, self.decoding = inner.teacher_id, inner.decoding
        self.asked: list[str] = []  # prompt identity: sample frame + prompt text
        self.calls = 0

    def answer(self, prompts):
        if self.interrupt_after_calls is not None and self.calls >= self.interrupt_after_calls:
            raise KeyboardInterrupt
        self.calls += 1
        self.asked += [hashlib.sha256(p.frame_png).hexdigest() + p.text for p in prompts]
        replies = self.inner.answer(prompts)
        if self.fail:
            replies = [self.fail(p, r) for p, r in zip(prompts, replies, strict=True)]
        return replies


@pytest.fixture(scope="module")
def rollouts(collected):
    return collected(MC, episodes=3)


def _label(rollouts, tmp_path, teacher, cfg=None, name="labels.parquet"):
    summary = label_rollouts(
        rollouts, cfg or label_cfg(), teacher, tmp_path / "cache", tmp_path / name, progress=False
    )
    return summary, pl.read_parquet(tmp_path / name)


def test_every_sample_gets_rows_and_in_between_frames_carry_the_last_queried_label(
    rollouts, tmp_path
):
    teacher = CountingTeacher(ScriptedTeacher(0.8, 0))
    summary, table = _label(rollouts, tmp_path, teacher)
    # 3 episodes x 21 samples; queried at t % 5 (action, milestone, judge) and t % 10 (objects)
    per_task = table.group_by("task").len().sort("task")
    assert dict(per_task.iter_rows()) == {"action": 63, "milestone": 63, "objects": 63, "judge": 12}
    queried = table.filter(pl.col("queried"))
    assert queried.height == summary.queried == 3 * (5 + 5 + 3 + 4)
    assert summary.teacher_calls == len(set(teacher.asked)) == len(teacher.asked)
    assert summary.teacher_calls + summary.cache_hits == summary.queried
    row = table.filter(
        (pl.col("sample_key") == "000001/000007") & (pl.col("task") == "milestone")
    ).row(0, named=True)
    src = table.filter(
        (pl.col("sample_key") == "000001/000005") & (pl.col("task") == "milestone")
    ).row(0, named=True)
    assert not row["queried"] and row["source_key"] == "000001/000005"
    assert (row["milestone"], row["raw_text"], row["parse_status"]) == (
        src["milestone"],
        src["raw_text"],
        src["parse_status"],
    )
    assert set(table["parse_status"]) <= {str(s) for s in ParseStatus}
    judge_keys = table.filter(pl.col("task") == "judge")["sample_key"].to_list()
    assert "000000/000020" not in judge_keys  # the final observation has no action to judge


def test_rerun_makes_zero_teacher_calls(rollouts, tmp_path):
    _, first = _label(rollouts, tmp_path, CountingTeacher(ScriptedTeacher(0.8, 0)))
    teacher = CountingTeacher(ScriptedTeacher(0.8, 0))
    summary, second = _label(rollouts, tmp_path, teacher)
    assert teacher.calls == 0 and summary.cache_hits == summary.queried
    assert second.equals(first)


def test_new_rollouts_label_only_the_new_frames(rollouts, tmp_path):
    more = tmp_path / "more"
    shutil.copytree(rollouts, more)
    _label(more, tmp_path, CountingTeacher(ScriptedTeacher(0.8, 0)))
    collect(MC, env_cfg(), collect_cfg(episodes=5), more, progress=False)  # 2 more episodes
    teacher = CountingTeacher(ScriptedTeacher(0.8, 0))
    summary, table = _label(more, tmp_path, teacher)
    queried = table.filter(pl.col("queried"))
    new = queried.filter(pl.col("episode") >= 3)
    assert new.height == 2 * 17
    # only frames of the new episodes are asked about (identical frame+prompt pairs may already
    # be cached), each once
    new_frames = set(new["frame_sha256"])
    assert {a[:64] for a in teacher.asked} <= new_frames
    assert 0 < summary.teacher_calls == len(teacher.asked) <= new.height


def test_changing_the_prompt_relabels(rollouts, tmp_path, monkeypatch):
    _label(rollouts, tmp_path, CountingTeacher(ScriptedTeacher(0.8, 0)))
    prompts = tmp_path / "prompts"
    shutil.copytree(tasks_module.PROMPT_DIR, prompts)
    objects = prompts / "common" / "objects.txt"
    objects.write_text(objects.read_text() + "\nName at most three objects.")
    monkeypatch.setattr(tasks_module, "PROMPT_DIR", prompts)
    tasks_module.load_template.cache_clear()
    try:
        teacher = CountingTeacher(ScriptedTeacher(0.8, 0))
        summary, _ = _label(rollouts, tmp_path, teacher)
    finally:
        tasks_module.load_template.cache_clear()
    assert summary.teacher_calls == 3 * 3  # only the objects prompts changed: t = 0, 10, 20


def test_other_teacher_never_shares_cache_entries(rollouts, tmp_path):
    first, _ = _label(rollouts, tmp_path, CountingTeacher(ScriptedTeacher(0.8, 0)))
    second, _ = _label(rollouts, tmp_path, CountingTeacher(ScriptedTeacher(0.5, 0)))
    assert second.cache_hits == 0 and second.teacher_calls == first.teacher_calls


def test_interrupted_labelling_resumes_and_pays_nothing_twice(rollouts, tmp_path):
    interrupted = CountingTeacher(ScriptedTeacher(0.8, 0), interrupt_after_calls=3)
    with pytest.raises(KeyboardInterrupt):
        _label(rollouts, tmp_path, interrupted)
    assert not (tmp_path / "labels.parquet").exists()
    assert len(LabelCache(tmp_path / "cache")) == len(interrupted.asked) == 3 * 8
    resumed = CountingTeacher(ScriptedTeacher(0.8, 0))
    summary, _ = _label(rollouts, tmp_path, resumed)
    assert not set(interrupted.asked) & set(resumed.asked)
    assert len(interrupted.asked) + len(resumed.asked) == summary.queried


def test_transport_failures_are_recorded_not_cached_and_retried(rollouts, tmp_path):
    def flaky(prompt, reply):
        if prompt.task == "objects":
            return Reply(
                text=None, error=ParseStatus.TIMEOUT, error_detail="no answer in 30 s", attempts=3
            )
        return reply

    cfg = label_cfg(max_transport_failure_rate=0.5)
    summary, table = _label(
        rollouts, tmp_path, CountingTeacher(ScriptedTeacher(0.8, 0), fail=flaky), cfg
    )
    failed = table.filter(pl.col("task") == "objects")
    assert (
        set(failed["parse_status"]) == {"timeout"}
        and failed["raw_text"].null_count() == failed.height
    )
    assert summary.transport_failures == 9
    retry = CountingTeacher(ScriptedTeacher(0.8, 0))
    summary, table = _label(rollouts, tmp_path, retry, cfg)
    assert summary.teacher_calls == 9  # just the objects prompts that never got an answer
    assert "timeout" not in set(table["parse_status"])


def test_a_collapsed_task_fails_the_stage_and_the_others_pass(rollouts, tmp_path):
    """A teacher whose every milestone answer is prose (format_collapse 100 %) used to pass with
    exit 0: past label.max_parse_failure_rate the stage fails, naming the task, its rate and
    statuses; the answers are cached, so raising the rate (or fixing the prompt) pays nothing."""

    def prose(prompt, reply):
        if prompt.task != "milestone":
            return reply
        return Reply(text="The car is in a valley between two hills.", finish_reason="stop")

    teacher = CountingTeacher(ScriptedTeacher(1.0, 0), fail=prose)
    cfg = label_cfg(max_parse_failure_rate=0.5)
    (tmp_path / "labels.parquet").write_bytes(b"a table from an earlier run")
    with pytest.raises(LabelError, match=r"milestone: (\d+) of \1 answers carry no label \(100% > "
                       r"max_parse_failure_rate 0.5; format_collapse \1\)") as err:  # fmt: skip
        _label(rollouts, tmp_path, teacher, cfg)
    assert "action:" not in str(err.value) and "raise label.max_parse_failure_rate" in str(
        err.value
    )
    assert not (tmp_path / "labels.parquet").exists()
    assert (tmp_path / "labels.parquet.failed").exists()
    calls = teacher.calls
    # per task: the milestone task may fail as often as it likes, the others keep 0.5
    summary, table = _label(rollouts, tmp_path, teacher,
                            label_cfg(max_parse_failure_rate={"milestone": 1.0}))  # fmt: skip
    assert teacher.calls == calls and summary.teacher_calls == 0  # every answer was cached
    assert set(table.filter(pl.col("task") == "milestone")["parse_status"]) == {"format_collapse"}


def test_too_many_transport_failures_fail_loudly(rollouts, tmp_path):
    def down(prompt, reply):
        return Reply(text=None, error=ParseStatus.HTTP_ERROR, error_detail="connection refused")

    with pytest.raises(
        LabelError, match=r"answered none of the first 8 prompts.*check its settings"
    ):
        _label(rollouts, tmp_path, CountingTeacher(ScriptedTeacher(0.8, 0), fail=down))

    def some(prompt, reply):
        return down(prompt, reply) if prompt.task == "milestone" else reply

    (tmp_path / "labels.parquet").write_bytes(b"a table from an earlier run")
    with pytest.raises(LabelError, match="15 of 51 teacher calls got no answer"):
        _label(rollouts, tmp_path, CountingTeacher(ScriptedTeacher(0.8, 0), fail=some))
    # a failed stage leaves no table a later stage could take for a good one; the failures are
    # on record beside it
    assert not (tmp_path / "labels.parquet").exists()
    failed = pl.read_parquet(tmp_path / "labels.parquet.failed")
    queried = failed.filter(pl.col("queried") & (pl.col("parse_status") == "http_error"))
    assert queried.height == 15


def test_a_read_only_cache_fails_before_the_first_paid_call(rollouts, tmp_path):
    import os

    if os.geteuid() == 0:  # root writes anywhere: make the cache location a file instead
        (tmp_path / "cache").write_text("not a directory")
    else:
        (tmp_path / "cache").mkdir()
        (tmp_path / "cache").chmod(0o500)
    counting = CountingTeacher(ScriptedTeacher(0.8, 0))
    with pytest.raises(PermissionError, match=f"{tmp_path / 'cache'} is not writable"):
        _label(rollouts, tmp_path, counting)
    assert counting.asked == []  # nothing paid for


def test_truncated_answers_are_classified(rollouts, tmp_path):
    def cut(prompt, reply):
        return Reply(text="Describe: the car is in the val", finish_reason="length")

    _, table = _label(rollouts, tmp_path, CountingTeacher(ScriptedTeacher(0.8, 0), fail=cut))
    assert set(table["parse_status"]) == {"truncated"}


def test_constant_and_random_teachers(rollouts, tmp_path):
    _, table = _label(rollouts, tmp_path, ConstantTeacher(), name="constant.parquet")
    actions = table.filter(pl.col("task") == "action")
    assert set(actions["action_index"]) == {0}
    assert set(table.filter(pl.col("task") == "milestone")["milestone"]) == {"BOTTOM"}
    assert set(table.filter(pl.col("task") == "objects")["parse_status"]) == {"empty"}
    _, table = _label(rollouts, tmp_path, RandomTeacher(0), name="random.parquet")
    assert set(table["parse_status"]) == {"ok"}
    assert len(set(table.filter(pl.col("task") == "milestone")["milestone"])) > 1


def test_corrupt_cache_segment_is_reported_by_name(rollouts, tmp_path):
    from pipeline.core.segments import StoreError

    _label(rollouts, tmp_path, ScriptedTeacher(0.8, 0))
    segment = sorted((tmp_path / "cache").glob("segment-*.parquet"))[0]
    segment.write_bytes(segment.read_bytes()[:100])
    with pytest.raises(StoreError, match=f"label cache segment {segment} is damaged"):
        _label(rollouts, tmp_path, ScriptedTeacher(0.8, 0))


def test_every_flipped_bit_of_a_segment_is_reported_by_name_never_served(rollouts, tmp_path):
    """Flip one bit at a time through a label-cache segment: each flip is reported by name before
    the parquet reader sees the bytes (no changed label, no traceback, no abort)."""
    from pipeline.core.segments import StoreError

    _label(rollouts, tmp_path, ScriptedTeacher(0.8, 0))
    segment = sorted((tmp_path / "cache").glob("segment-*.parquet"))[0]
    original = segment.read_bytes()
    # each byte flipped in place and put back: rewriting the file per flip costs a flush each
    with segment.open("r+b", buffering=0) as file:
        for position in range(len(original)):
            file.seek(position)
            file.write(bytes([original[position] ^ 1 << (position % 8)]))
            with pytest.raises(StoreError, match=f"{segment} is damaged"):
                LabelCache(tmp_path / "cache")
            file.seek(position)
            file.write(original[position : position + 1])
    assert segment.read_bytes() == original
    assert len(LabelCache(tmp_path / "cache")) > 0


def test_removing_any_segment_costs_only_its_entries(rollouts, tmp_path):
    """The recovery the error recommends: move a segment away and rerun; only its entries are
    asked again, and later runs keep working (segment names do not count segments)."""
    _label(rollouts, tmp_path, ScriptedTeacher(0.8, 0))
    segments = sorted((tmp_path / "cache").glob("segment-*.parquet"))
    assert len(segments) > 2
    lost = pl.read_parquet(segments[1]).height
    segments[1].rename(tmp_path / "moved-away.parquet")
    counting = CountingTeacher(ScriptedTeacher(0.8, 0))
    label_rollouts(
        rollouts, label_cfg(), counting, tmp_path / "cache", tmp_path / "again.parquet",
        progress=False,
    )  # fmt: skip
    assert len(counting.asked) == lost
    again = CountingTeacher(ScriptedTeacher(0.8, 0))
    label_rollouts(
        rollouts, label_cfg(), again, tmp_path / "cache", tmp_path / "third.parquet",
        progress=False,
    )  # fmt: skip
    assert again.asked == []


def test_same_frames_same_teacher_same_bytes_on_any_machine(rollouts, tmp_path):
    """The table and the cache are pure functions of (frames, teacher, prompts, parser): two
    fresh runs in two directories write identical bytes; call latency lives apart."""

    def run(root):
        label_rollouts(
            rollouts, label_cfg(), ScriptedTeacher(0.8, 0), root / "cache", root / "t.parquet",
            telemetry_dir=root / "telemetry", progress=False,
        )  # fmt: skip
        files = sorted(p for p in (root / "cache").rglob("*") if p.is_file())
        return (root / "t.parquet").read_bytes(), [(p.name, p.read_bytes()) for p in files]

    first, second = run(tmp_path / "a"), run(tmp_path / "b")
    assert first == second
    assert any((tmp_path / "a" / "telemetry").iterdir())  # the latency was kept, elsewhere


def test_a_per_env_teacher_labels_its_env_alone(rollouts, tmp_path):
    """`label.per_env.<env>.teacher` replaces `label.teacher` for that env in the label stage;
    another env's entry changes nothing here; the shared section alone is refused by
    label_rollouts (its teacher would not be the env's)."""
    from pipeline.core.config import load_params
    from stages import label as stage
    from tests.conftest import tiny_params_dict, write_params

    raw = tiny_params_dict(envs=(MC, "MountainCarContinuous-v0"))
    raw["label"]["per_env"] = {
        MC: {
            "teacher": {"backend": "constant", "reliability": 1.0, "seed": 0},
            "tasks": {"action": 2},
        },
        "MountainCarContinuous-v0": {
            "teacher": {"backend": "random", "reliability": 1.0, "seed": 0}
        },
    }
    params = write_params(tmp_path / "params.yaml", raw)
    out = tmp_path / "labels.parquet"
    argv = ["--params", str(params), "--rollouts", str(rollouts), "--cache",
            str(tmp_path / "cache"), "--out", str(out)]  # fmt: skip
    assert stage.main(argv) == 0
    table = pl.read_parquet(out)
    assert set(table["teacher_id"]) == {ConstantTeacher().teacher_id}
    assert set(table["task"]) == {"action"}  # this env's tasks
    queried = table.filter(pl.col("queried"))["t"]
    assert set(queried) == set(range(0, table["t"].max() + 1, 2))  # every 2nd frame (shared: 5)

    cfg = load_params(params).label
    assert cfg.for_env("MountainCarContinuous-v0").teacher.backend == "random"
    assert cfg.for_env("CarRacing-v3").teacher == cfg.teacher  # no entry: the shared settings
    with pytest.raises(ValueError, match=r"for_env\('MountainCar-v0'\)"):
        label_rollouts(rollouts, cfg, ScriptedTeacher(0.8, 0), tmp_path / "c2", tmp_path / "x")


def test_the_label_stage_writes_what_the_labels_cost(rollouts, tmp_path):
    """costs/label/<env>.json: the prompts a fresh build asks (by task), this run's calls
    (none on a rerun the cache answers) and the recorded cost of the table's answers, which
    the rerun keeps (each answer's own call, from the telemetry store)."""
    import json

    from stages import label as label_stage
    from tests.conftest import tiny_params_dict, write_params

    raw = tiny_params_dict((MC,))
    params = write_params(tmp_path / "params.yaml", raw)
    argv = ["--params", str(params), "--rollouts", str(rollouts), "--cache", str(tmp_path / "c"),
            "--out", str(tmp_path / "t.parquet"), "--telemetry", str(tmp_path / "tel"),
            "--metrics", str(tmp_path / "cost.json")]  # fmt: skip
    assert label_stage.main(argv) == 0
    first = json.loads((tmp_path / "cost.json").read_text())
    queried = pl.read_parquet(tmp_path / "t.parquet").filter(pl.col("queried"))
    assert first["prompts_fresh_build"] == queried.height == sum(first["prompts_by_task"].values())
    assert first["this_run"]["teacher_calls"] > 0 and first["recorded"]["unrecorded"] == 0
    assert first["recorded"]["calls"] == queried["cache_key"].n_unique()
    # what a fresh build sends: the distinct prompts, each answered by one call
    assert first["teacher_calls_fresh_build"] == queried["cache_key"].n_unique()
    assert first["teacher_calls_fresh_build"] == first["this_run"]["teacher_calls"]
    assert label_stage.main(argv) == 0  # the cache answers everything
    again = json.loads((tmp_path / "cost.json").read_text())
    assert again["this_run"]["teacher_calls"] == 0 and again["this_run"]["seconds_per_call"] is None
    assert again["prompts_fresh_build"] == first["prompts_fresh_build"]
    assert again["recorded"] == first["recorded"]


def test_an_estimate_counts_the_calls_a_run_would_make_and_makes_none(rollouts, tmp_path, capsys):
    from pipeline.teach.labelling.label import estimate_prompts

    cfg, teacher = label_cfg(), CountingTeacher(ScriptedTeacher(0.8, 0))
    fresh = estimate_prompts(rollouts, cfg, teacher, tmp_path / "cache")
    assert teacher.calls == 0 and not (tmp_path / "cache").exists()
    summary, _ = _label(rollouts, tmp_path, teacher, cfg)
    assert sum(r["to_ask"] for r in fresh.values()) == summary.teacher_calls
    assert sum(r["prompts"] for r in fresh.values()) == summary.queried
    calls = teacher.calls
    after = estimate_prompts(rollouts, cfg, teacher, tmp_path / "cache")
    assert sum(r["to_ask"] for r in after.values()) == 0 and teacher.calls == calls
    assert {t: r["cached"] for t, r in after.items()} == {t: r["prompts"] for t, r in fresh.items()}


def test_a_run_over_its_budget_asks_nothing_and_a_cached_rerun_passes(rollouts, tmp_path):
    """`label.budget`: a run that would send more prompts than the cap stops before its first
    call, naming the count per task and the cap, and writes no table; at the cap it runs; a
    rerun that the cache answers sends nothing and passes any budget, 0 included."""
    from pipeline.teach.labelling.label import estimate_prompts

    teacher = CountingTeacher(ScriptedTeacher(0.8, 0))
    to_ask = sum(r["to_ask"] for r in estimate_prompts(
        rollouts, label_cfg(), teacher, tmp_path / "cache").values())  # fmt: skip
    assert to_ask > 1
    with pytest.raises(LabelError, match=rf"would send {to_ask} prompts that no cache answers "
                       rf"\(action \d+, judge \d+, milestone \d+, objects \d+\) to scripted.*"
                       rf"over the budget of {to_ask - 1}; nothing was asked"):  # fmt: skip
        _label(rollouts, tmp_path, teacher, label_cfg(budget=to_ask - 1))
    assert teacher.calls == 0 and not (tmp_path / "labels.parquet").exists()
    summary, _ = _label(rollouts, tmp_path, teacher, label_cfg(budget=to_ask))
    assert summary.teacher_calls == to_ask
    summary, _ = _label(rollouts, tmp_path, teacher, label_cfg(budget=0))
    assert summary.teacher_calls == 0


def test_with_a_budget_on_ray_the_uncached_prompts_are_listed_once(rollouts, tmp_path,
                                                                  monkeypatch):  # fmt: skip
    """`label.budget` with `executor: ray`: one pass lists the prompts no cache answers; the
    budget reads it, and Ray is sent that same list (over the budget, Ray is never started)."""
    import pipeline.teach.labelling.label as label_module
    import pipeline.teach.labelling.ray_executor as ray_module
    from pipeline.teach.teachers.cached import prompt_cache_key

    listed, sent = [], []
    to_ask = label_module._to_ask
    monkeypatch.setattr(label_module, "_to_ask", lambda *a: listed.append(1) or to_ask(*a))

    def ask_with_ray(prompts, cfg, teacher, cache, build):
        sent.append(len(prompts))
        # Ray's answers handed back as if their calls had failed: the loop serves them
        keys = [prompt_cache_key(prompt, teacher) for prompt in prompts]
        return dict(zip(keys, teacher.answer(list(prompts)), strict=True))

    monkeypatch.setattr(ray_module, "ask_with_ray", ask_with_ray)
    teacher = CountingTeacher(ScriptedTeacher(0.8, 0))
    with pytest.raises(LabelError, match="over the budget of 1"):
        _label(rollouts, tmp_path, teacher, label_cfg(executor="ray", budget=1))
    assert listed == [1] and sent == [] and teacher.asked == []
    _label(rollouts, tmp_path, teacher, label_cfg(executor="ray", budget=10_000))
    assert listed == [1, 1] and sent == [len(teacher.asked)] and len(teacher.asked) > 1
    assert (tmp_path / "labels.parquet").exists()


def test_the_estimate_prices_calls_at_the_recorded_latency_and_the_budget(tmp_path):
    """`--estimate`'s cost line: the paper's price always; the latency a previous run recorded
    (costs/label/<env>.json) where there is one; and the verdict against label.budget."""
    from pipeline.teach.labels.cost import estimate_cost

    assert estimate_cost(100, None, None) == (
        "cost: 695 s at ERPv table 14's 6.95 s per call; no label.budget"
    )
    metrics = tmp_path / "MountainCar-v0.json"
    metrics.write_text('{"recorded": {"seconds_per_call": 0.25}}')
    line = estimate_cost(100, metrics, 99)
    assert line.startswith(f"cost: 25.0 s at the 0.250 s per call recorded in {metrics}; 695 s")
    assert line.endswith("over label.budget (99): the run would stop before its first call")
    assert estimate_cost(99, metrics, 99).endswith("within label.budget (99)")
