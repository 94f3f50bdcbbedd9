"""vlmrl-sweep: a benchmark table as DVC experiments (pipeline/tools/sweeps/)."""

import dataclasses
import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import polars as pl
import pytest
import yaml
from scipy import stats

from pipeline.learn.curves import median_steps, steps_to
from pipeline.teach.labels.cost import label_cost
from pipeline.tools.experiments import best_case_p, holm
from pipeline.tools.sweeps.cli import main
from pipeline.tools.sweeps.priority import autogroup_nice
from pipeline.tools.sweeps.queue import tool_env
from pipeline.tools.sweeps.report import format_report, summaries
from pipeline.tools.sweeps.status import statuses
from pipeline.tools.sweeps.table import (
    SweepError,
    Table,
    _merge,
    cell_params,
    exp_command,
    hydra_value,
    load_table,
    overrides,
)
from tests.conftest import REPO

TABLE = {
    "table": "t",
    "control": "base",
    "seeds": [0, 1, 2],
    "params": {"evaluate": {"episodes": 10}, "label": {"per_env": {"E-v0": {"tasks": {"a": 1}}}}},
    "cells": {
        "base": {"train": {"env": "E-v0", "method": "sac", "steps": 100}},
        "more": {
            "train": {"env": "E-v0", "method": "sac", "steps": 100, "overrides": {"lr": 1e-5}},
            "params": {"label": {"per_env": {"E-v0": {"teacher": {"backend": "constant"}}}}},
        },
    },
}


def test_the_overrides_give_dvc_the_params_the_table_says(tmp_path):
    """Through DVC's own Hydra override code, on the project's params.yaml: every cell's `-S`
    values give params.yaml merged with the cell's params, types kept (a string that reads as a
    number or null stays a string, 1e-05 stays a number, a backslash before a quote survives)."""
    from dvc.utils.hydra import apply_overrides

    table = load_table(REPO / "benchmarks" / "tables" / "mcc_guidance.yaml")
    base = yaml.safe_load((REPO / "params.yaml").read_text())
    for cell in table.cells:
        shutil.copy(REPO / "params.yaml", tmp_path / "params.yaml")
        apply_overrides(tmp_path / "params.yaml", overrides(table, cell, 3))
        got = yaml.safe_load((tmp_path / "params.yaml").read_text())
        assert got == _merge(base, cell_params(table, cell, 3)), cell
        assert got["train"][table.run(cell)]["seed"] == 3
    odd = {"a": 'it\'s "q" \\ x', "b": "end\\", "c": 'x\\"y', "d": "1.0", "e": "null",
           "f": [1, "x", None, True], "g": 2.5e20, "h": {}, "i": -3, "j": False}  # fmt: skip
    shutil.copy(REPO / "params.yaml", tmp_path / "params.yaml")
    apply_overrides(tmp_path / "params.yaml", [f"++z.{k}={hydra_value(v)}" for k, v in odd.items()])
    assert yaml.safe_load((tmp_path / "params.yaml").read_text())["z"] == odd
    apply_overrides(tmp_path / "params.yaml", [f"++z.k={hydra_value(1e-5)}"])
    assert float(yaml.safe_load((tmp_path / "params.yaml").read_text())["z"]["k"]) == 1e-5


def test_one_experiment_reproduces_only_its_cells_evaluate_stage():
    table = Table.model_validate(TABLE)
    cmd = exp_command(table, "more", 2, queue=True)
    assert cmd[:6] == ["dvc", "exp", "run", "--queue", "-n", "t-more-s2"]
    assert cmd[-1] == "evaluate@t-more"
    sets = cmd[7:-1:2]
    assert cmd[6:-1:2] == ["-S"] * len(sets)
    assert "++train.t-more.seed=2" in sets and "++train.t-more.overrides.lr=1.0e-05" in sets
    assert '++label.per_env.E-v0.teacher.backend="constant"' in sets
    assert "++label.per_env.E-v0.tasks.a=1" in sets


ROUNDS = {
    **TABLE,
    "cells": {
        **TABLE["cells"],
        "rounds": {
            "train": {
                "env": "E-v0",
                "method": "erpv",
                "steps": 100,
                "overrides": {"save_training_state": True},
            },
            "rounds": {"count": 2, "episodes": 3, "steps": 40},
        },
    },
}


def test_a_rounds_cell_chains_its_rounds_and_reproduces_the_last_rounds_evaluation():
    """Round k follows round k-1's agent and data (round 1 the run's and the env's dataset), each
    with its own collection seed; the experiment reproduces the last round's evaluation and the
    report reads that agent's metric and adds up the rounds' teacher calls."""
    table = Table.model_validate(ROUNDS)
    params = cell_params(table, "rounds", 4)
    assert params["rounds"] == {
        "t-rounds-r1": {"run": "t-rounds", "env": "E-v0", "method": "erpv", "round": 1,
                        "previous_agent": "models/t-rounds",
                        "previous_data": "data/datasets/E-v0", "episodes": 3, "steps": 40,
                        "seed": 4001, "explore": "sample"},
        "t-rounds-r2": {"run": "t-rounds", "env": "E-v0", "method": "erpv", "round": 2,
                        "previous_agent": "models/rounds/t-rounds-r1",
                        "previous_data": "data/rounds/t-rounds-r1", "episodes": 3, "steps": 40,
                        "seed": 4002, "explore": "sample"},
    }  # fmt: skip
    assert "rounds" not in cell_params(table, "base", 4)
    assert exp_command(table, "rounds", 4)[-1] == "evaluate_round@t-rounds-r2"
    assert exp_command(table, "base", 4)[-1] == "evaluate@t-base"
    calls = {f"metrics/rounds/t-rounds-r{k}.json:costs.teacher_calls": 10.0 * k for k in (1, 2)}
    # dvc exp show gives this nested bool as the string 'True': still the table's value
    calls["train.t-rounds.overrides.save_training_state"] = "True"
    rows = [_row(table, "rounds", s, 5.0 + s, **calls) for s in range(3)]
    rows += [_row(table, "base", s, 1.0 + s) for s in range(3)]
    found = statuses(table, {r["Experiment"]: r for r in rows})
    assert [f.state for f in found if f.cell != "more"] == ["done"] * 6
    assert {f.value for f in found if f.cell == "rounds"} == {5.0, 6.0, 7.0}
    assert {f.round_calls for f in found if f.cell == "rounds"} == {30}
    text = format_report(table, found)
    assert "| round teacher calls (mean) |" in text
    assert "| rounds | 3 | 6.0 +- 1.0 |" in text and "| 30 | 0: 5.0, 1: 6.0, 2: 7.0 |" in text
    assert "| base | 3 | 2.0 +- 1.0 |  | 0 |" in text


def test_the_shipped_rounds_table_passes_the_gate_and_its_chain_is_what_params_yaml_expects(
    tmp_path,
):
    """Through DVC's override code: the rounds table's `-S` values give params that parse_params
    and check_params accept (the chain of rounds, save_training_state); without
    save_training_state the gate refuses the cell, naming the fix."""
    from dvc.utils.hydra import apply_overrides

    from pipeline.core.config import parse_params

    table = load_table(REPO / "benchmarks" / "tables" / "rounds.yaml")
    cell = next(c for c in table.cells if table.cells[c].rounds is not None)
    shutil.copy(REPO / "params.yaml", tmp_path / "params.yaml")
    apply_overrides(tmp_path / "params.yaml", overrides(table, cell, 2))
    params = parse_params(yaml.safe_load((tmp_path / "params.yaml").read_text()))
    names = table.round_names(cell)
    assert [params.rounds[r].round for r in names] == list(range(1, len(names) + 1))
    assert params.rounds[names[-1]].previous_agent == f"models/rounds/{names[-2]}"
    raw = yaml.safe_load((REPO / "benchmarks" / "tables" / "rounds.yaml").read_text())
    raw["cells"][cell]["train"]["overrides"].pop("save_training_state")
    (tmp_path / "t.yaml").write_text(yaml.safe_dump(raw))
    from pipeline.tools.sweeps.table import check_table

    problems = check_table(load_table(tmp_path / "t.yaml"), REPO / "params.yaml")
    assert any(f"cell {cell}" in p and "save_training_state: true" in p for p in problems)


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"control": "nope"}, "control 'nope' is not a cell"),
        ({"seeds": [0, 0]}, "seeds repeat"),
        ({"seeds": []}, "seeds"),
        ({"table": "a b"}, "'a b': table and cell names"),
        ({"control": None, "cells": {"x": {"train": {"env": "E", "method": "sac"}}}},
         "train needs steps"),
        ({"control": None,
          "cells": {"x": {"train": {"env": "E", "method": "sac", "steps": 1, "seed": 3}}}},
         "set per experiment"),
        ({"control": None, "cells": {"x": {"train": {"env": "E", "method": "sac", "steps": 1},
                                           "params": {"a.b": 1}}}}, "params key 'a.b'"),
        ({"colour": 1}, "colour"),
        ({"control": None,
          "cells": {"x": {"train": {"env": "E", "method": "sac", "steps": 1},
                          "rounds": {"count": 1, "episodes": 1, "steps": 1, "explore": "mean"}}}},
         "cells.x.rounds.explore: Input should be 'sample' or 'deterministic'"),
        ({"teacher_eval": [10]}, "teacher_eval: Input should be a valid dictionary"),
    ],
)  # fmt: skip
def test_a_bad_table_is_refused_naming_the_file_and_field(tmp_path, change, says):
    path = tmp_path / "t.yaml"
    path.write_text(yaml.safe_dump({**TABLE, **change}))
    with pytest.raises(SweepError, match=r"t\.yaml") as info:
        load_table(path)
    assert says in str(info.value)
    path.write_text("cells: [unclosed")
    with pytest.raises(SweepError, match=r"t\.yaml"):
        load_table(path)


def _row(table, cell, seed, value, state="Success", **changed):
    """A flat `dvc exp show` row (numbers as floats, as DVC gives them)."""
    row = {"Experiment": table.experiment(cell, seed), "rev": f"r{cell}{seed}", "State": state}
    from pipeline.tools.sweeps.table import _leaves

    for k, v in _leaves(cell_params(table, cell, seed)):
        row[k] = float(v) if isinstance(v, int) and not isinstance(v, bool) else v
    row.update(changed)
    if value is not None:
        row[f"{table.metrics_file(cell)}:return_mean"] = value
    return row


def test_a_list_param_that_dvc_shows_as_its_repr_is_the_tables_value():
    """`dvc exp show` gives a list param as its Python repr (hybrid_vs_ppo's reward_terms): the
    same list is done, another list or a string that is no list is stale."""
    train = {"env": "E-v0", "method": "hybrid_ppo", "steps": 100,
             "reward_terms": ["env", "kinematic"]}  # fmt: skip
    spec = {**TABLE, "control": None, "cells": {"eq1": {"train": train}}}
    table = Table.model_validate(spec)
    key = "train.t-eq1.reward_terms"
    rows = [
        _row(table, "eq1", 0, 1.0, **{key: "['env', 'kinematic']"}),
        _row(table, "eq1", 1, 1.0, **{key: "['env']"}),
        _row(table, "eq1", 2, 1.0, **{key: "env, kinematic"}),
    ]
    found = statuses(table, {r["Experiment"]: r for r in rows})
    assert [f.state for f in found] == ["done", "stale", "stale"]
    assert "reward_terms=\"['env']\" (table: ['env', 'kinematic'])" in found[1].why


def _rows_in_states(table, running, queued):
    """DVC's rows of every (cell, seed) of `table`: the first `running` running, the next
    `queued` queued, the rest done."""
    cells = [(c, s) for c in table.cells for s in table.seeds]
    states = ["Running"] * running + ["Queued"] * queued
    states += ["Success"] * (len(cells) - len(states))
    return {r["Experiment"]: r for r in (
        _row(table, c, s, None if state != "Success" else 1.0, state=state)
        for (c, s), state in zip(cells, states, strict=True)
    )}  # fmt: skip


def test_wait_polls_until_nothing_is_queued_and_leaves_the_cores_to_the_workers(
    monkeypatch, capsys
):
    """Each ask of `dvc exp show` is followed by a pause of at least every_s and at least 19
    times the ask's CPU time (POLL_SHARE 0.05): asks of 0.5 s pause 10 s, asks of 30 s pause
    570 s, slept in steps of every_s. The wall time an ask took (a starved poller waits for the
    CPU) does not count."""
    import pipeline.tools.sweeps.queue as sweeps

    table = Table.model_validate(TABLE)
    cells = [(c, s) for c in table.cells for s in table.seeds]
    queued = {r["Experiment"]: r for r in (_row(table, c, s, None, state="Queued")
                                             for c, s in cells)}  # fmt: skip
    done = {r["Experiment"]: r for r in (_row(table, c, s, 1.0) for c, s in cells)}
    for ask_s in (0.5, 30.0):
        clock, slept, asked_at = [0.0], [], []
        answers = iter([queued, queued, done])

        wall = [0.0]

        def ask(
            repo,
            rev=None,
            every_s=10.0,
            ask=None,
            ask_s=ask_s,
            clock=clock,
            answers=answers,
            wall=wall,
            slept=slept,
            asked_at=asked_at,
        ):
            asked_at.append(sum(slept))
            clock[0] += ask_s
            wall[0] += 1000.0  # minutes waiting for the CPU
            return next(answers)

        monkeypatch.setattr(sweeps, "settled_rows", ask)
        monkeypatch.setattr(sweeps, "cpu_seconds", lambda clock=clock: clock[0])
        monkeypatch.setattr(sweeps.time, "monotonic", lambda wall=wall: wall[0])
        monkeypatch.setattr(sweeps.time, "sleep", slept.append)
        found = sweeps.wait(table, REPO, every_s=10.0)
        assert {f.state for f in found} == {"done"}
        pause = max(10.0, 19 * ask_s)
        assert asked_at == [0.0, pause, 2 * pause] and max(slept) == 10.0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 4 and out[0].endswith(f"{len(cells)} queued")  # a line per change


def test_wait_starts_the_workers_again_when_fewer_than_jobs_live_with_work_queued(
    monkeypatch, capsys
):
    """A queue worker that died (DVC's file broker, treeverse/dvc#7903) or stopped on an empty
    queue (as `resume` took it down) leaves fewer than `jobs` worker processes: the first round
    that finds experiments queued then runs `start_workers`. A worker between two experiments is
    still a process, and none is started while nothing is queued."""
    import pipeline.tools.sweeps.queue as sweeps

    table = Table.model_validate(TABLE)
    rounds = iter([
        (_rows_in_states(table, 2, 3), 2),  # two workers, two running
        (_rows_in_states(table, 1, 3), 2),  # one between two experiments: still two workers
        (_rows_in_states(table, 1, 2), 1),  # one died: started again at once
        (_rows_in_states(table, 2, 1), 2),
        (_rows_in_states(table, 1, 0), 1),  # one stopped, nothing queued: none started
        (_rows_in_states(table, 0, 0), 0),
    ])  # fmt: skip
    live, started = [0], []

    def settled_rows(repo, rev=None, every_s=10.0, ask=None):
        rows, live[0] = next(rounds)
        return rows

    def start_workers(repo, jobs, *_):
        started.append(jobs)
        live[0] = jobs

    monkeypatch.setattr(sweeps, "settled_rows", settled_rows)
    monkeypatch.setattr(sweeps, "live_workers", lambda repo: ["w"] * live[0])
    monkeypatch.setattr(sweeps.time, "sleep", lambda s: None)
    monkeypatch.setattr(sweeps, "start_workers", start_workers)
    found = sweeps.wait(table, REPO, jobs=2)
    assert {f.state for f in found} == {"done"}
    assert started == [2]  # after the 3rd round alone
    assert "fewer than 2 queue workers with experiments queued" in capsys.readouterr().out


def test_between_two_asks_a_worker_that_stops_is_started_again_within_every_s(monkeypatch):
    """While experiments are queued, the pause after an ask (19 times its CPU time: 10 s asks,
    190 s) is slept in steps of every_s (10 s), the worker processes counted after each:
    a worker that stops 35 s into the pause is started again at 40 s, not at the next ask. The
    pause is as long as without workers to keep, and with nothing queued no worker is counted."""
    import pipeline.tools.sweeps.queue as sweeps

    table = Table.model_validate(TABLE)
    answers = iter([_rows_in_states(table, 2, 3), _rows_in_states(table, 1, 0),
                    _rows_in_states(table, 0, 0)])  # fmt: skip
    cpu, slept, events = [0.0], [], []
    live = [2]

    def ask(repo, rev=None, every_s=10.0, ask=None):
        cpu[0] += 10.0
        events.append(("ask", sum(slept)))
        return next(answers)

    def sleep(s):
        slept.append(s)
        if sum(slept) >= 35.0 and not any(e[0] == "stopped" for e in events):
            live[0] = 1  # a worker's experiment ended and the worker stopped
            events.append(("stopped", sum(slept)))

    def start_workers(repo, jobs, *_):
        events.append(("started", sum(slept)))
        live[0] = jobs

    monkeypatch.setattr(sweeps, "settled_rows", ask)
    monkeypatch.setattr(sweeps, "cpu_seconds", lambda: cpu[0])
    counted = []

    def live_workers(repo):
        counted.append(sum(slept))
        return ["w"] * live[0]

    monkeypatch.setattr(sweeps, "live_workers", live_workers)
    monkeypatch.setattr(sweeps.time, "sleep", sleep)
    monkeypatch.setattr(sweeps, "start_workers", start_workers)
    sweeps.wait(table, REPO, every_s=10.0, jobs=2)
    assert events == [("ask", 0.0), ("stopped", 40.0), ("started", 40.0), ("ask", 190.0),
                      ("ask", 380.0)]  # fmt: skip
    assert slept == [10.0] * 38
    assert max(counted) == 190.0  # the second pause: nothing queued, no worker counted


def test_a_landing_ends_the_pause_and_the_next_ask_keeps_its_results(monkeypatch, tmp_path):
    """Asks of 30 s of CPU pause 570 s; an experiment that lands 35 s into the pause (a new
    experiment ref) ends it at 40 s, and that ask writes the table's report. Without a new
    ref the pause runs its length."""
    import pipeline.tools.sweeps.queue as sweeps

    table = Table.model_validate(TABLE)
    answers = iter([_rows_in_states(table, 2, 0), _rows_in_states(table, 1, 0),
                    _rows_in_states(table, 0, 0)])  # fmt: skip
    cpu, slept, asked_at, kept_at = [0.0], [], [], []

    def ask(repo, rev=None, every_s=10.0, ask=None):
        asked_at.append(sum(slept))
        cpu[0] += 30.0
        return next(answers)

    def refs(repo):
        return frozenset({"refs/exps/ab/c/t-base-s0 1"} | ({"refs/exps/ab/c/t-base-s1 2"}
                         if sum(slept) >= 35.0 else set()))  # fmt: skip

    monkeypatch.setattr(sweeps, "settled_rows", ask)
    monkeypatch.setattr(sweeps, "cpu_seconds", lambda: cpu[0])
    monkeypatch.setattr(sweeps, "experiment_refs", refs)
    monkeypatch.setattr(sweeps.time, "sleep", slept.append)
    monkeypatch.setattr(sweeps, "keep_results",
                        lambda *a, **k: kept_at.append(sum(slept)))  # fmt: skip
    from pipeline.tools.sweeps.queue import Keep, Watch

    watch = Watch(table, None, None, Keep(tmp_path / "results", False), tmp_path / "t.yaml")
    sweeps.wait_all([watch], REPO, every_s=10.0)
    assert asked_at == [0.0, 40.0, 610.0]
    assert kept_at == [40.0, 610.0]  # each time one more experiment is done


def test_a_report_that_fails_is_said_and_tried_again_and_the_poller_goes_on(
    monkeypatch, tmp_path, capsys
):
    """A poller of a days-long table once died on its report (a module edited under it): the
    workers went on, nothing more was kept. Now the failure is said with its traceback, the
    poller waits on, and the next round keeps the results."""
    import pipeline.tools.sweeps.queue as sweeps

    table = Table.model_validate(TABLE)
    answers = iter([_rows_in_states(table, 2, 0), _rows_in_states(table, 1, 0),
                    _rows_in_states(table, 1, 0), _rows_in_states(table, 0, 0)])  # fmt: skip
    tries = []

    def keep_results(table, table_path, found, repo, keep):
        tries.append(sum(f.state == "done" for f in found))
        if len(tries) == 1:
            raise ImportError("cannot import name 'save_png'")

    monkeypatch.setattr(sweeps, "settled_rows", lambda repo, rev=None, every_s=10.0, ask=None:
                        next(answers))  # fmt: skip
    monkeypatch.setattr(sweeps, "experiment_refs", lambda repo: frozenset())
    monkeypatch.setattr(sweeps.time, "sleep", lambda s: None)
    monkeypatch.setattr(sweeps, "keep_results", keep_results)
    watch = sweeps.Watch(table, None, None, sweeps.Keep(tmp_path), tmp_path / "t.yaml")
    found = sweeps.wait_all([watch], REPO, every_s=10.0)[0]
    assert {f.state for f in found} == {"done"}
    assert tries == [5, 5, 6]  # failed, tried again at the next round, then the last landing
    out = capsys.readouterr().out
    assert "t: its results were not kept; tried again at the next round" in out
    assert "ImportError: cannot import name 'save_png'" in out


def test_experiment_refs_are_the_landed_experiments_not_dvcs_queue_or_executor(tmp_path):
    from pipeline.tools.sweeps.queue import experiment_refs

    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q", str(tmp_path)], check=True)
    subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", "c"], cwd=tmp_path, check=True)
    assert experiment_refs(tmp_path) == frozenset()
    for ref in ("refs/exps/celery/stash", "refs/exps/exec/EXEC_HEAD"):
        subprocess.run(["git", "update-ref", ref, "HEAD"], cwd=tmp_path, check=True)
    assert experiment_refs(tmp_path) == frozenset()  # a task queued or started: no landing
    subprocess.run(["git", "update-ref", "refs/exps/ab/cdef/t-a-s0", "HEAD"], cwd=tmp_path,
                   check=True)  # fmt: skip
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=tmp_path, check=True,
                          capture_output=True, text=True).stdout.strip()  # fmt: skip
    assert experiment_refs(tmp_path) == frozenset({f"refs/exps/ab/cdef/t-a-s0 {head}"})


def test_wait_all_reads_each_tables_commit_keeps_each_tables_results_and_counts_workers_over_all(
    monkeypatch, capsys
):
    """Two tables queued on two commits: one `dvc exp show` per commit a round; a table's report
    is kept only when one more of its own experiments is done; the workers are topped up when
    either table has experiments queued; it returns when both are done."""
    import pipeline.tools.sweeps.queue as sweeps

    t = Table.model_validate(TABLE)
    u = Table.model_validate({**TABLE, "table": "u"})
    rows = _rows_in_states

    rounds = iter([
        {"rev-t": rows(t, 1, 4), "rev-u": rows(u, 1, 5)},  # two running: no top-up
        {"rev-t": rows(t, 0, 4), "rev-u": rows(u, 1, 5)},  # t: one more done; its worker died
        {"rev-t": rows(t, 0, 4), "rev-u": rows(u, 1, 5)},
        {"rev-t": rows(t, 0, 4), "rev-u": rows(u, 1, 5)},
        {"rev-t": rows(t, 0, 0), "rev-u": rows(u, 0, 0)},
    ])  # fmt: skip
    workers_live = iter([2, 1, 2, 2, 0])  # one of the two stopped in round 2
    asked, kept, started, current = [], [], [], {}

    def settled_rows(repo, rev=None, every_s=10.0, ask=None):
        if rev == "rev-t":  # each round asks t's commit first
            current.update(next(rounds))
            current["live"] = next(workers_live)
        asked.append(rev)
        return current[rev]

    monkeypatch.setattr(sweeps, "live_workers", lambda repo: ["w"] * current["live"])
    monkeypatch.setattr(sweeps, "settled_rows", settled_rows)
    monkeypatch.setattr(sweeps.time, "sleep", lambda s: None)

    def start_workers(repo, jobs, *_):
        started.append(jobs)
        current["live"] = jobs

    monkeypatch.setattr(sweeps, "start_workers", start_workers)
    monkeypatch.setattr(sweeps, "keep_results",
                        lambda table, path, found, repo, keep: kept.append(table.table))  # fmt: skip
    watches = [sweeps.Watch(table, rev, keep=sweeps.Keep(REPO / "r" / table.table),
                            table_path=REPO / f"{table.table}.yaml")
               for table, rev in ((t, "rev-t"), (u, "rev-u"))]  # fmt: skip
    found = sweeps.wait_all(watches, REPO, jobs=2)
    assert asked == ["rev-t", "rev-u"] * 5
    assert [{f.state for f in each} for each in found] == [{"done"}, {"done"}]
    assert kept == ["t", "t", "u"]  # t at rounds 2 and 5, u at round 5
    assert started == [2]
    out = capsys.readouterr().out
    assert "t, u: fewer than 2 queue workers" in out and out.count("u: ") >= 2


def test_results_that_landed_while_no_poller_ran_are_kept_at_the_first_round(monkeypatch):
    """A poller started again after experiments landed (the last one stopped with the machine)
    keeps them at once: DVC holds more done than the committed results, not only more than at
    its previous round."""
    import pipeline.tools.sweeps.queue as sweeps

    table = Table.model_validate(TABLE)
    first = statuses(table, {})[0]
    committed = {first.name: dataclasses.replace(first, state="done", value=1.0, kept=True)}
    # DVC: 2 done (none of them the committed one), then all 6
    rounds = iter([_rows_in_states(table, 0, 4), _rows_in_states(table, 0, 0)])
    kept = []
    monkeypatch.setattr(
        sweeps, "settled_rows", lambda repo, rev=None, every_s=10.0, ask=None: next(rounds)
    )
    monkeypatch.setattr(sweeps.time, "sleep", lambda s: None)
    monkeypatch.setattr(sweeps, "keep_results",
                        lambda table, path, found, repo, keep: kept.append(
                            sum(f.state == "done" for f in found)))  # fmt: skip
    sweeps.wait(table, REPO, kept=committed, keep=sweeps.Keep(REPO / "r"), table_path=REPO / "t")
    assert kept == [3, 6]  # the first round already (1 committed + 2), then as more land


def test_a_running_task_is_orphaned_when_its_process_or_every_worker_is_gone(tmp_path, monkeypatch):
    """DVC lists a task as running until a worker marks it done, even when none ever will:
    with a recorded pid, the task is orphaned once that process is gone; with no record (its
    worker died as it took it up), once no queue worker runs in the repository."""
    import json
    import subprocess

    import pipeline.tools.sweeps.orphans as orphans

    rev = "ab" * 20
    workers: list[str] = []
    monkeypatch.setattr(orphans, "live_workers", lambda repo: workers)
    assert orphans.orphaned(tmp_path, rev)  # no record, no worker: nothing will run it
    workers.append("dvc-exp-0a1b2c-1@localhost")
    assert not orphans.orphaned(tmp_path, rev)  # a worker may be taking it up

    record = tmp_path / ".dvc" / "tmp" / "exps" / "run" / rev / f"{rev}.json"
    record.parent.mkdir(parents=True)
    gone = subprocess.Popen(["true"])  # a pid that has exited and been reaped
    gone.wait()
    record.write_text(json.dumps({"pid": gone.pid, "returncode": None}))
    assert orphans.orphaned(tmp_path, rev)  # its process is gone, workers or not
    record.write_text(json.dumps({"pid": os.getpid(), "returncode": None}))
    assert not orphans.orphaned(tmp_path, rev)
    workers.clear()
    assert not orphans.orphaned(tmp_path, rev)  # its process runs: a worker's death is not its


def test_each_experiment_is_done_stale_failed_queued_or_missing():
    table = Table.model_validate(TABLE)
    rows = [
        _row(table, "base", 0, 1.0),
        _row(table, "base", 1, 2.0, **{"evaluate.episodes": 5.0}),  # the table changed since
        _row(table, "base", 2, None, state="Failed"),
        _row(table, "more", 0, None, state="Queued"),
        _row(table, "more", 1, None, state="Running"),
        _row(table, "more", 2, None),  # succeeded without the metric
    ]
    found = {f.name: f for f in statuses(table, {r["Experiment"]: r for r in rows})}
    assert found["t-base-s0"].state == "done" and found["t-base-s0"].value == 1.0
    assert found["t-base-s1"].state == "stale" and "evaluate.episodes=5.0" in found["t-base-s1"].why
    assert (
        found["t-base-s2"].state == "failed"
        and "dvc queue logs t-base-s2" in found["t-base-s2"].why
    )
    assert [found[f"t-more-s{s}"].state for s in (0, 1, 2)] == ["queued", "running", "failed"]
    assert "no metrics/eval/t-more.json:return_mean" in found["t-more-s2"].why
    assert statuses(table, {}, ["more"], [7])[0].state == "missing"


def test_a_run_killed_with_its_worker_is_partial_at_the_step_of_its_resume_state(
    tmp_path, monkeypatch
):
    """With VLMRL_RESUME_ROOT (what `queue` gives its workers) a run's resume state lives under
    `<root>/<run>/<fingerprint>/`, found from any workspace; two seeds of one cell never share
    one; `status` reads the step each reached: an experiment that no worker holds any more is
    `partial` there, a running one says how far it is, a queued one where it will go on from."""
    from pipeline.learn.methods.base import RESUME_ROOT_ENV, TrainError, resume_for
    from pipeline.tools.sweeps.status import resume_progress, with_progress

    table = Table.model_validate(TABLE)
    root = tmp_path / "root"
    monkeypatch.setenv(RESUME_ROOT_ENV, str(root))
    saved = {}
    for seed, step in ((0, 40), (1, 70)):
        material = {"run": table.run("base"), "train": {"seed": seed, "steps": 100}}
        resume = resume_for(".resume/" + table.run("base"), 10, material)
        assert resume.directory.parent == root / table.run("base")
        resume.save({"step": step, "curve": []})
        saved[seed] = resume.directory
    assert saved[0] != saved[1]
    os.utime(saved[0] / "state.json", (1_700_000_000, 1_700_000_000))  # when seed 0 stopped
    progress = resume_progress(table, root)
    assert {k: (p.step, p.steps) for k, p in progress.items()} == {
        ("t-base", 0): (40, 100), ("t-base", 1): (70, 100)}  # fmt: skip
    assert progress[("t-base", 0)].saved == 1_700_000_000
    when = time.strftime("%Y-%m-%d %H:%M", time.localtime(1_700_000_000))
    rows = [_row(table, "base", 0, None, state="Failed"), _row(table, "base", 1, None,
                                                                state="Running")]  # fmt: skip
    found = with_progress(table, statuses(table, {r["Experiment"]: r for r in rows}), progress)
    by_name = {f.name: f for f in found}
    assert (
        by_name["t-base-s0"].state == "partial"
        and by_name["t-base-s0"].why == f"at step 40 of 100 (resume state, saved {when})"
    )
    assert by_name["t-base-s1"].state == "running" and "at step 70" in by_name["t-base-s1"].why
    assert by_name["t-base-s2"].state == "missing"  # no state: nothing to go on from
    rows[0] = _row(table, "base", 0, None, state="Queued")  # queued again: from where it was
    found = with_progress(table, statuses(table, {r["Experiment"]: r for r in rows}), progress)
    assert (found[0].state, found[0].why) == (
        "queued", f"goes on from step 40 of 100 (resume state, saved {when})")  # fmt: skip
    monkeypatch.setenv(RESUME_ROOT_ENV, "relative/dir")
    with pytest.raises(TrainError, match="absolute"):
        resume_for(".resume/x", 10, {"run": "x"})


def _rounds_table(tmp_path, monkeypatch):
    """A table of one cell `r` (a run of 100 steps, then 2 rounds of 50) and the resume root
    its runs keep their states under."""
    from pipeline.learn.methods.base import RESUME_ROOT_ENV

    spec = {"train": {"env": "E-v0", "method": "erpv", "steps": 100},
            "rounds": {"count": 2, "episodes": 1, "steps": 50}}  # fmt: skip
    monkeypatch.setenv(RESUME_ROOT_ENV, str(tmp_path / "root"))
    return Table.model_validate({**TABLE, "cells": {"r": spec}, "control": None}), tmp_path / "root"


def test_a_rounds_cells_progress_counts_its_rounds_steps_after_its_runs(tmp_path, monkeypatch):
    """A rounds cell's rounds keep resume states of their own, under the round's name and with
    the round's seed: `status` finds them, and counts their steps after the run's and the
    earlier rounds', out of all of the cell's training."""
    from pipeline.learn.methods.base import resume_for
    from pipeline.tools.sweeps.status import resume_progress
    from pipeline.tools.sweeps.table import round_seed

    table, root = _rounds_table(tmp_path, monkeypatch)
    r1, r2 = table.round_names("r")
    for name, seed, steps, step in (
        (table.run("r"), 0, 100, 40),  # seed 0 in its run
        (r1, round_seed(1, 1), 50, 20),  # seed 1: round 1's state, left behind
        (r2, round_seed(1, 2), 50, 30),  # ... and round 2's, further on
        (r1, round_seed(7, 1), 50, 45),  # a seed the table does not have
    ):
        material = {"run": name, "train": {"seed": seed, "steps": steps}}
        resume_for(f".resume/{name}", 10, material).save({"step": step, "curve": []})
    assert table.steps("r") == 200
    progress = {k: (p.step, p.steps) for k, p in resume_progress(table, root).items()}
    assert progress == {("t-r", 0): (40, 200), ("t-r", 1): (180, 200)}


def test_a_done_experiments_final_states_are_deleted_and_partial_ones_stay(tmp_path, monkeypatch):
    """Under the resume root a finished run keeps its final state (for a killed rounds
    experiment that runs its finished rounds again). Once the experiment is done, the poller
    deletes its run's and its rounds' final states; a partial state (a rerun's), a running
    experiment's final states and another seed's stay."""
    from pipeline.learn.methods.base import resume_for
    from pipeline.tools.sweeps.status import clear_done_states
    from pipeline.tools.sweeps.table import round_seed

    table, root = _rounds_table(tmp_path, monkeypatch)
    r1, r2 = table.round_names("r")
    dirs = {}
    for key, name, seed, steps, step in (
        ("run s0", table.run("r"), 0, 100, 100),  # seed 0: done, every training finished
        ("r1 s0", r1, round_seed(0, 1), 50, 50),
        ("r2 s0", r2, round_seed(0, 2), 50, 50),
        ("r2 s0 partial", r2, round_seed(0, 2), 60, 30),  # other settings: a rerun's, partial
        ("run s1", table.run("r"), 1, 100, 100),  # seed 1: running, in round 1
        ("r1 s1", r1, round_seed(1, 1), 50, 20),
    ):
        material = {"run": name, "train": {"seed": seed, "steps": steps}}
        resume = resume_for(f".resume/{name}", 10, material)
        resume.save({"step": step, "curve": []})
        dirs[key] = resume.directory
    rows = [_row(table, "r", 0, 1.0), _row(table, "r", 1, None, state="Running")]
    found = statuses(table, {r["Experiment"]: r for r in rows})
    assert [f.state for f in found[:2]] == ["done", "running"]
    cleared = clear_done_states(table, found, root)
    assert sorted(cleared) == sorted(dirs[k] for k in ("run s0", "r1 s0", "r2 s0"))
    assert {k for k, d in dirs.items() if d.exists()} == {"r2 s0 partial", "run s1", "r1 s1"}
    assert clear_done_states(table, found, root) == []


def test_committed_results_are_done_and_never_queued_again_unless_the_table_changed(
    tmp_path, monkeypatch
):
    """A machine keeps only what is committed: the experiments a committed report holds as done
    count as done in status, queue and report while the table gives them the same params."""
    import pipeline.tools.sweeps.queue as sweeps
    from pipeline.tools.sweeps.queue import queue
    from pipeline.tools.sweeps.report import write_report
    from pipeline.tools.sweeps.status import committed, with_committed

    table = Table.model_validate(TABLE)
    done = [dataclasses.replace(f, state="done", value=float(f.seed), rev="abc")
            for f in statuses(table, {}) if f.cell == "base"]  # fmt: skip
    results = tmp_path / "results"
    (tmp_path / "t.yaml").write_text(yaml.safe_dump(TABLE))
    write_report(table, tmp_path / "t.yaml", done, results)
    kept = committed(table, results)
    assert sorted(kept) == ["t-base-s0", "t-base-s1", "t-base-s2"]
    assert all(k.kept and k.state == "done" for k in kept.values())
    found = with_committed(statuses(table, {}), kept)
    assert [f.state for f in found] == ["done"] * 3 + ["missing"] * 3
    monkeypatch.setattr(sweeps, "settled_rows", lambda repo, rev=None: {})
    ran = []
    monkeypatch.setattr(sweeps, "run_checked", lambda args, repo: ran.append(args))
    monkeypatch.setattr(sweeps, "check_clean", lambda repo: None)
    queued = queue(table, REPO, kept=kept)
    assert [q.name for q in queued] == ["t-more-s0", "t-more-s1", "t-more-s2"]
    # a cell whose params changed since is not kept: it runs again
    changed = {**TABLE, "cells": {**TABLE["cells"], "base": {
        "train": {"env": "E-v0", "method": "sac", "steps": 200}}}}  # fmt: skip
    assert committed(Table.model_validate(changed), results) == {}
    (results / "results.json").write_text("{}")
    with pytest.raises(SweepError, match=r"results\.json"):
        committed(table, results)


def test_the_machine_that_ran_each_experiment_is_recorded_and_kept_with_its_result(tmp_path):
    """A done experiment that a queue here ran (DVC's state Success) is stamped with this machine;
    one that no local queue ran (no state: `dvc exp pull`) is not recorded. The stamp goes into
    results.json, comes back with the committed result, and the report names each machine's
    runs; a table with no machine recorded says nothing of machines."""
    from pipeline.tools.reproducibility import machine_fingerprint
    from pipeline.tools.sweeps.report import write_report
    from pipeline.tools.sweeps.status import committed, machine_summary

    table = Table.model_validate(TABLE)
    here = machine_summary()
    assert machine_fingerprint()["cpu"] in here and "cores" in here
    rows = [_row(table, "base", 0, 1.0), _row(table, "base", 1, 2.0, state=None),
            _row(table, "more", 0, 3.0, state="Running")]  # fmt: skip
    found = {f.name: f for f in statuses(table, {r["Experiment"]: r for r in rows})}
    assert found["t-base-s0"].machine == here
    assert found["t-base-s1"].state == "done" and found["t-base-s1"].machine is None
    assert found["t-more-s0"].machine is None  # running: not done
    (tmp_path / "t.yaml").write_text(yaml.safe_dump(TABLE))
    text = write_report(table, tmp_path / "t.yaml", list(found.values()), tmp_path / "r")
    assert f"{here}: base s0 | not recorded: base s1" in text
    kept = committed(table, tmp_path / "r")
    assert kept["t-base-s0"].machine == here and kept["t-base-s1"].machine is None
    unrecorded = [dataclasses.replace(f, machine=None) for f in found.values()]
    assert "Machines" not in format_report(table, unrecorded)


def test_a_committed_teacher_result_is_kept_whatever_order_the_results_file_holds_cells_in(
    tmp_path,
):
    """A teacher experiment is named by its group's first cell, and results.json holds the
    table's cells in sorted order: read back, the group had another first cell, and a fresh
    machine queued P2's done teacher experiment again (ten minutes of a core). It is kept."""
    from pipeline.tools.sweeps.report import write_report
    from pipeline.tools.sweeps.status import all_statuses, committed

    spec = {**TABLE, "control": "zz", "teacher_eval": {"episodes": 10}, "cells": {
        "zz": {"train": {"env": "E-v0", "method": "sac", "steps": 100}},
        "aa": {"train": {"env": "E-v0", "method": "erpv", "steps": 100}},
    }}  # fmt: skip
    table = Table.model_validate(spec)
    assert table.teacher_groups() == {"zz": ("zz", "aa")}
    done = [dataclasses.replace(f, state="done", rev="abc", value=None if f.seed is None else 1.0)
            for f in all_statuses(table, {})]  # fmt: skip
    (tmp_path / "t.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    write_report(table, tmp_path / "t.yaml", done, tmp_path / "results")
    assert "t-teacher-zz" in committed(table, tmp_path / "results")
    changed = {**spec, "teacher_eval": {"episodes": 3}}  # what teacher_eval@ reads changed
    assert "t-teacher-zz" not in committed(Table.model_validate(changed), tmp_path / "results")


def test_queue_workers_run_at_low_priority_one_thread_with_the_resume_root(tmp_path, monkeypatch):
    import pipeline.tools.sweeps.queue as sweeps
    from pipeline.learn.methods.base import RESUME_ROOT_ENV

    calls = []
    monkeypatch.setattr(
        sweeps.subprocess, "run",
        lambda args, **kw: calls.append((args, kw)) or dataclasses.make_dataclass(
            "Done", [("returncode", int)])(0),
    )  # fmt: skip
    monkeypatch.setattr(sweeps, "live_workers", lambda repo: [])  # none runs: DVC starts both
    sweeps.start_workers(REPO, 2, sweeps.Workers(tmp_path / "states", nice=7, threads=1))
    ((args, kw),) = calls
    assert args == ["dvc", "queue", "start", "-j", "2"]
    assert kw["env"][RESUME_ROOT_ENV] == str(tmp_path / "states")
    assert kw["env"]["OMP_NUM_THREADS"] == "1" and kw["preexec_fn"] is not None
    assert kw["start_new_session"]  # its workers share its session's (lowered) autogroup
    assert (tmp_path / "states").is_dir()
    # the workers' `dvc` and stages' `python` are this interpreter's, activated or not
    # the workers' `dvc` is the shim's (whole broker messages), their `python` this interpreter's
    shim, bin_dir = kw["env"]["PATH"].split(os.pathsep)[:2]
    assert (shim, bin_dir) == (str(sweeps.SHIM), str(Path(sys.executable).parent))


AUTOGROUP_OF_CHILD = (
    "import os, sys; from pathlib import Path; from pipeline.tools.sweeps.queue import Workers; "
    "Workers(Path('.'), nice=int(sys.argv[1])).lower_priority(); "
    "from pipeline.tools.sweeps.priority import autogroup_nice; "
    "print(os.nice(0), autogroup_nice(Path('/proc/self/autogroup').read_text()))"
)


@pytest.mark.skipif(not Path("/proc/self/autogroup").exists(), reason="no autogroup scheduling")
def test_a_worker_lowers_its_sessions_autogroup_and_never_the_callers():
    """Under Linux's autogroup the CPU is shared between sessions before niceness counts, so a
    worker at nice 19 in its own session would take as much as the shell's: a worker started in
    a session of its own gives that session's autogroup its niceness too, and one started in the
    caller's session (which `start_workers` never does) leaves the caller's group alone."""
    import subprocess

    def child(nice: int, own_session: bool) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-c", AUTOGROUP_OF_CHILD, str(nice)], cwd=REPO, text=True,
            capture_output=True, start_new_session=own_session, check=True,
        )  # fmt: skip

    ours = Path("/proc/self/autogroup").read_text()
    done = child(19, own_session=True)
    nice, group_nice = done.stdout.split()
    assert nice == "19"
    if "could not give" in done.stderr:  # a container that forbids it: the user is told why
        assert "/autogroup niceness 19" in done.stderr and "equal share" in done.stderr
    else:
        assert group_nice == "19", done.stderr
    # a runner in no autogroup (a container's first session: the file is empty) has none to lose
    group = autogroup_nice(ours)
    done = child((os.nice(0) if group is None else group) + 5, own_session=False)
    assert Path("/proc/self/autogroup").read_text() == ours and done.stderr == ""


def test_autogroup_text_is_read_or_refused_by_name():
    """/proc/PID/autogroup is "/autogroup-N nice K", or empty for a process in no autogroup
    (the root group a container's first session runs in): that has no niceness to lower."""
    assert autogroup_nice("/autogroup-746 nice 7\n") == 7
    assert autogroup_nice("") is None and autogroup_nice("\n") is None
    with pytest.raises(ValueError, match="unexpected autogroup text"):
        autogroup_nice("/autogroup-746 niceness")


def test_workers_are_started_by_name_where_some_already_run(tmp_path, monkeypatch, capsys):
    """A worker busy with an experiment does not answer DVC's ping, so `dvc queue start` would
    start it a second time: the live workers are found by their processes (a process standing
    in for worker 2 here), none is started while `jobs` run, and a missing one is started by
    its own name (worker 1 with DVC's `--clean`)."""
    import subprocess

    import pipeline.tools.sweeps.queue as sweeps

    name = "dvc-exp-abc123-2@localhost"
    stand_in = [sys.executable, "-c", "import sys; sys.stdin.read()", "exp", "queue-worker", name]
    worker = subprocess.Popen(stand_in, cwd=tmp_path, stdin=subprocess.PIPE)
    try:
        assert sweeps.live_workers(tmp_path) == [name]
        assert sweeps.live_workers(tmp_path / "elsewhere") == []
        ran, spawned = [], []
        monkeypatch.setattr(sweeps.subprocess, "run", lambda args, **kw: ran.append(args))
        monkeypatch.setattr(sweeps.subprocess, "Popen",
                            lambda args, **kw: spawned.append((args, kw)))  # fmt: skip
        sweeps.start_workers(tmp_path, 1, sweeps.Workers(tmp_path / "states"))
        assert "1 queue worker(s) already run there" in capsys.readouterr().out
        assert ran == [] and spawned == []
        sweeps.start_workers(tmp_path, 3, sweeps.Workers(tmp_path / "states", nice=19))
        assert ran == []  # not `dvc queue start`: it would start worker 2 again
        assert [args for args, _ in spawned] == [
            ["dvc", "exp", "queue-worker", "dvc-exp-abc123-1@localhost", "--clean"],
            ["dvc", "exp", "queue-worker", "dvc-exp-abc123-3@localhost"],
        ]
        kw = spawned[0][1]
        assert kw["cwd"] == tmp_path and kw["start_new_session"] and kw["preexec_fn"] is not None
        assert kw["env"]["OMP_NUM_THREADS"] == "1"
    finally:
        worker.stdin.close()  # its read returns: it exits
        worker.wait()
    assert sweeps.live_workers(tmp_path) == []


def test_the_tools_find_the_projects_dvc_from_a_plain_shell(tmp_path):
    """`.venv/bin/vlmrl-sweep` run with no environment activated: PATH lacks the venv. The
    `dvc` found first is the shim that runs the project's DVC with whole broker messages, from
    any folder: a table's clone at an older commit has a `pipeline` without safe_dvc."""
    import subprocess

    from pipeline.tools.sweeps.queue import SHIM

    env = tool_env({"PATH": "/usr/bin:/bin"})
    shim, first, *rest = env["PATH"].split(os.pathsep)
    assert shim == str(SHIM) and first == str(Path(sys.executable).parent)
    assert rest == ["/usr/bin", "/bin"]
    assert (Path(first) / "dvc").exists()  # the dvc this project installs
    assert tool_env(env)["PATH"] == env["PATH"]  # not added twice
    assert os.access(SHIM / "dvc", os.X_OK)
    done = subprocess.run(["dvc", "version"], env=env, capture_output=True, text=True, cwd=REPO)
    assert done.returncode == 0 and "DVC version" in done.stdout, done.stderr
    (tmp_path / "pipeline").mkdir()  # an older commit's package, first on a cwd-first path
    (tmp_path / "pipeline" / "__init__.py").write_text("raise ImportError('the old pipeline')")
    done = subprocess.run(["dvc", "version"], env=env, capture_output=True, text=True,
                          cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0 and "DVC version" in done.stdout, done.stderr


def test_a_broker_message_appears_whole_or_not_at_all(tmp_path, monkeypatch):
    """kombu's filesystem transport created a message file under its final name, then wrote
    it; a worker polling meanwhile read it empty and died ("Unrecoverable error:
    JSONDecodeError", treeverse/dvc#7903). atomic_put writes it under a name no queue matches
    and renames it whole; kombu's own consumer reads it."""
    import json

    import kombu
    import kombu.transport.filesystem

    from pipeline.tools.sweeps import safe_dvc

    seen = []
    real_replace = os.replace

    def replace(src, dst):  # the folder as a polling consumer would list it, just before
        names = os.listdir(tmp_path)
        seen.append([n for n in names if n.partition(".")[2] == "q.msg"])
        assert Path(src).name.startswith(".") and json.loads(Path(src).read_text())
        real_replace(src, dst)

    monkeypatch.setattr(safe_dvc.os, "replace", replace)
    monkeypatch.setattr(kombu.transport.filesystem.Channel, "_put", safe_dvc.atomic_put)
    options = {"data_folder_in": str(tmp_path), "data_folder_out": str(tmp_path),
               "control_folder": str(tmp_path / "control")}  # fmt: skip
    with kombu.Connection("filesystem://", transport_options=options) as conn:
        queue = conn.SimpleQueue("q")
        queue.put({"task": "run_exp", "n": 1})
        assert seen == [[]]  # no message file under a queue's name until it was whole
        assert queue.get(block=False).payload == {"task": "run_exp", "n": 1}  # on disk, whole
        queue.close()
    assert [n for n in os.listdir(tmp_path) if n.endswith(".partial")] == []


TEACHERS = {
    **TABLE,
    "teacher_eval": {"episodes": 10},
    "cells": {
        **TABLE["cells"],
        # base's teacher (its params differ only beside what teacher_eval@ reads)
        "same": {"train": {"env": "E-v0", "method": "erpv", "steps": 100},
                 "params": {"critic": {"steps": 5}}},
        "other-env": {"train": {"env": "F-v0", "method": "sac", "steps": 100}},
    },
}  # fmt: skip


def _teacher_row(table, group, state="Success", teacher_id="scripted:v2", **changed):
    from pipeline.tools.sweeps.table import _leaves, teacher_params

    row = {"Experiment": table.teacher_experiment(group), "rev": f"r{group}", "State": state}
    for k, v in _leaves(teacher_params(table, group)):
        row[k] = float(v) if isinstance(v, int) and not isinstance(v, bool) else v
    if teacher_id is not None:
        row[f"{table.teacher_file(group)}:teacher_id"] = teacher_id
    row.update(changed)
    return row


def test_each_labelling_teacher_of_a_table_gets_one_teacher_eval_experiment():
    """Cells share a teacher experiment when the env and the params teacher_eval@ reads agree;
    it sets the table's and its first cell's params, no train run, and the table's teacher_eval
    section, and reproduces teacher_eval@<env>. Without `teacher_eval` a table has none."""
    from pipeline.tools.sweeps.table import teacher_command, teacher_params

    assert Table.model_validate(TABLE).teacher_groups() == {}
    table = Table.model_validate(TEACHERS)
    assert table.teacher_groups() == {
        "base": ("base", "same"),
        "more": ("more",),  # the constant teacher
        "other-env": ("other-env",),
    }
    params = teacher_params(table, "more")
    assert "train" not in params and params["teacher_eval"] == {"episodes": 10}
    assert params["label"]["per_env"]["E-v0"]["teacher"] == {"backend": "constant"}
    cmd = teacher_command(table, "more", queue=True)
    assert cmd[:6] == ["dvc", "exp", "run", "--queue", "-n", "t-teacher-more"]
    assert cmd[-1] == "teacher_eval@E-v0"
    assert "++teacher_eval.episodes=10" in cmd and not any("train." in a for a in cmd)
    assert teacher_command(table, "other-env")[-1] == "teacher_eval@F-v0"
    assert table.teacher_file("other-env") == "metrics/teacher/F-v0.json"


def test_a_teacher_experiment_is_done_stale_failed_queued_or_missing():
    from pipeline.tools.sweeps.status import all_statuses, teacher_statuses

    table = Table.model_validate(TEACHERS)
    rows = {r["Experiment"]: r for r in (
        _teacher_row(table, "base"),
        _teacher_row(table, "more", **{"teacher_eval.episodes": 2.0}),  # the table changed
        _teacher_row(table, "other-env", teacher_id=None),  # succeeded without its output
    )}  # fmt: skip
    found = {f.name: f for f in teacher_statuses(table, rows)}
    assert found["t-teacher-base"].state == "done" and found["t-teacher-base"].seed is None
    assert found["t-teacher-more"].state == "stale"
    assert "teacher_eval.episodes=2.0 (table: 10)" in found["t-teacher-more"].why
    assert found["t-teacher-other-env"].state == "failed"
    assert "no metrics/teacher/F-v0.json:teacher_id" in found["t-teacher-other-env"].why
    rows["t-teacher-base"]["State"] = "Running"
    assert teacher_statuses(table, rows, ["same"])[0].state == "running"  # base's group
    assert [f.name for f in teacher_statuses(table, {}, ["more"])] == ["t-teacher-more"]
    # the cells' seeds do not filter the teachers out; cells do
    names = [f.name for f in all_statuses(table, {}, ["same"], [1])]
    assert names == ["t-same-s1", "t-teacher-base"]


def test_queue_runs_the_teachers_beside_the_cells_and_replaces_a_stale_one(monkeypatch):
    import pipeline.tools.sweeps.queue as sweeps

    table = Table.model_validate(TEACHERS)
    rows = {r["Experiment"]: r for r in (
        _teacher_row(table, "base"),
        _teacher_row(table, "more", **{"teacher_eval.episodes": 2.0}),
        *(_row(table, c, s, 1.0) for c in table.cells for s in table.seeds if c != "same"),
    )}  # fmt: skip
    ran = []
    monkeypatch.setattr(sweeps, "settled_rows", lambda repo, rev=None: rows)
    monkeypatch.setattr(sweeps, "run_checked", lambda args, repo: ran.append(args))
    monkeypatch.setattr(sweeps, "check_clean", lambda repo: None)
    queued = sweeps.queue(table, REPO)
    assert [q.name for q in queued] == [*(f"t-same-s{s}" for s in (0, 1, 2)),
                                        "t-teacher-more", "t-teacher-other-env"]  # fmt: skip
    assert ["dvc", "exp", "remove", "t-teacher-more"] in ran
    assert sweeps.teacher_command(table, "more", queue=True) in ran
    assert sweeps.teacher_command(table, "other-env", queue=True) in ran


def test_the_report_shows_each_teacher_acting_alone_beside_random():
    from pipeline.tools.sweeps.status import teacher_statuses

    table = Table.model_validate(TEACHERS)
    rows = {r["Experiment"]: r for r in (_teacher_row(table, "base"),)}
    found = statuses(table, {}) + teacher_statuses(table, rows)
    teacher = {
        "teacher_id": "scripted:v2:reliability=1.0:seed=0", "episodes": 10,
        "teacher_rows": [
            {"policy": "teacher:k=10", "return_mean": 700.25, "return_std": 20.0},
            {"policy": "teacher:k=1", "return_mean": 812.0, "return_std": 3.04,
             "success_rate": 1.0},
        ],
        "random": {"return_mean": 136.5, "return_std": 110.7},
    }  # fmt: skip
    labels = label_cost(pl.DataFrame({
        "task": ["action", "action", "action", "judge", "judge", "action"],
        "queried": [True, False, True, True, True, True],
        "parse_status": ["ok", "ok", "format_collapse", "ok", "regex_fallback", "empty"],
        "judge": [None, None, None, True, False, None],
    }))  # fmt: skip
    # carried rows (queried False) cost nothing; a regex fallback is a label, the others not;
    # one judge row of two says reasonable: the selective replay's pool
    # (the table has no `action` column: its answers' diversity is not counted)
    assert labels == {
        "rows": 6, "prompts": {"action": 3, "judge": 2}, "parsed": 0.6, "reasonable": 0.5,
        "parsed_by_task": {"action": 1 / 3, "judge": 1.0}, "distinct_answers": {"judge": 2},
    }  # fmt: skip
    found = [dataclasses.replace(f, teacher=teacher, labels=labels)
             if f.name == "t-teacher-base" else f for f in found]  # fmt: skip
    text = format_report(table, found)
    assert (
        "| cells on its data | teacher | episodes | teacher:k=1 | teacher:k=10 | random | label prompts "
        "| parsed | judged reasonable |" in text
    )
    assert (
        "| base, same | `scripted:v2:reliability=1.0:seed=0` | 10 | 812.0 +- 3.0 (100% success) "
        "| 700.2 +- 20.0 | 136.5 +- 110.7 | action 3, judge 2 | 60.0% | 50.0% |" in text
    )
    # without judge rows the column is left out
    no_judge = {k: v for k, v in labels.items() if k != "reasonable"}
    found = [dataclasses.replace(f, labels=no_judge) if f.labels else f for f in found]
    text = format_report(table, found)
    assert "| random | label prompts | parsed |\n" in text and "judged reasonable" not in text
    assert "t-teacher-more missing" in text  # not read: named with the cells left out


def test_a_half_made_worker_workspace_is_asked_again_and_a_lasting_failure_raises(
    monkeypatch, capsys
):
    """`dvc exp show` can meet a queue worker's temporary workspace half made or half gone:
    queue, status and report ask again a few times before they give up, naming the error."""
    import pipeline.tools.sweeps.status as sweeps

    answers = [SweepError("directory '.dvc/tmp/exps/x/.dvc' does not exist")] * 2 + [{"e": {}}]

    def exp_rows(repo, rev=None):
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    monkeypatch.setattr(sweeps, "exp_rows", exp_rows)
    assert sweeps.settled_rows(REPO, every_s=0) == {"e": {}}
    assert capsys.readouterr().out.count("(trying again)") == 2
    answers[:] = [SweepError("broken")] * 3
    with pytest.raises(SweepError, match="broken"):
        sweeps.settled_rows(REPO, tries=3, every_s=0)
    assert not answers


def _answer(x):  # ChildAsk's calls: module-level, so that a spawned child can import them
    return {"e": x, "pid": os.getpid()}


def _fails():
    raise SweepError("no such commit")


def _hangs(marker):  # as pygit2's BlobIO reader after its writer thread failed: no answer
    import threading

    Path(marker).touch()  # it has reached the wait
    threading.Event().wait()


def _dies():
    os._exit(3)


@pytest.mark.slow  # three child interpreters, each importing the poller's modules: 12-17 s
def test_an_ask_that_hangs_is_killed_once_its_cpu_time_stops_and_the_next_gets_a_new_child(
    tmp_path,
):
    """A poller's `dvc exp show` hung for good in pygit2 (its BlobIO reader waited on an event
    its failed writer thread never set) and took every later result's commit with it. The
    poller now asks in a child process (ChildAsk), kept from ask to ask: an error comes back
    as itself, a child that dies or whose CPU time stops for `stall_s` is a SweepError (which
    settled_rows asks again), and the next ask gets a new child."""
    from pipeline.tools.sweeps.childask import ChildAsk

    ask = ChildAsk()
    try:
        first = ask(_answer, 1)
        assert first["e"] == 1 and first["pid"] != os.getpid()
        assert ask(_answer, 2)["pid"] == first["pid"]  # one child, kept
        with pytest.raises(SweepError, match="no such commit"):
            ask(_fails)
        assert ask(_answer, 3)["pid"] == first["pid"]  # an error does not cost the child
        # the stall is measured on a clock that the child's own progress drives: it stands
        # still until the child has reached its wait, then each read is a stall later (a read
        # after the child's CPU time moved starts the count again)
        marker, reads = tmp_path / "waiting", []
        ask.clock = lambda: (
            reads.append(1) or (len(reads) * ask.stall_s if marker.exists() else 0.0)
        )
        with pytest.raises(SweepError, match=r"_hangs\(.*\): its child process used no CPU .*hung"):
            ask(_hangs, str(marker))
        ask.clock = ChildAsk().clock  # the real one again
        again = ask(_answer, 4)
        assert again["e"] == 4 and again["pid"] != first["pid"]
        assert not _pid_runs(first["pid"])  # killed, not left behind
        with pytest.raises(SweepError, match=r"died \(exit code 3\)"):
            ask(_dies)
        assert ask(_answer, 5)["pid"] not in (first["pid"], again["pid"])
        assert ask.cpu_s > 0  # the children's CPU time, for the poller's pacing
    finally:
        ask.close()


def _unsendable():
    return lambda: None  # pickle refuses a lambda


def test_the_child_ends_quietly_when_its_caller_died_and_says_when_a_value_cannot_be_sent():
    """A poller stopped while its child asked DVC left two BrokenPipeError tracebacks in the
    tables' log: the child sent its answer, the send failed, and it tried to send that failure
    as the answer. A caller gone is the end of the child's work; a value that does not pickle
    comes back as an error naming the call."""
    import threading
    from multiprocessing import Pipe

    from pipeline.tools.sweeps.childask import _serve

    caller, child = Pipe()
    caller.send((_answer, (1,)))
    caller.close()  # the caller dies before the answer
    _serve(child)  # returns, raising nothing

    caller, child = Pipe()
    serving = threading.Thread(target=_serve, args=(child,))
    serving.start()
    caller.send((_unsendable, ()))
    state, error = caller.recv()
    assert state == "error" and isinstance(error, SweepError)
    assert "_unsendable(): its value cannot be sent back" in str(error)
    caller.send((_answer, (2,)))
    assert caller.recv()[1][0]["e"] == 2  # the child goes on
    caller.close()
    serving.join()


def test_the_child_imports_its_callers_pipeline_from_any_folder(tmp_path, monkeypatch):
    """The poller runs beside a table's clone; a child started in a folder whose `pipeline` is
    an older commit's (without childask) still runs the caller's code."""
    from pipeline.tools.sweeps.childask import ChildAsk

    (tmp_path / "pipeline").mkdir()
    (tmp_path / "pipeline" / "__init__.py").write_text("raise ImportError('the old pipeline')")
    monkeypatch.chdir(tmp_path)
    ask = ChildAsk()
    try:
        assert ask(_answer, 7)["e"] == 7
    finally:
        ask.close()


def _pid_runs(pid):
    import psutil

    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_an_empty_git_repo_from_dvc_is_a_sweep_error_that_is_asked_again(monkeypatch):
    """DVC lets scmrepo's SCMError ("Empty git repo", a worker's workspace half made) through
    `dvc exp show`; it killed a table's poller. It is now a SweepError, which `settled_rows`
    asks again."""
    import dvc.api
    from scmrepo.exceptions import SCMError

    import pipeline.tools.sweeps.status as sweeps

    def exp_show(repo, revs=None):
        raise SCMError("Empty git repo")

    monkeypatch.setattr(dvc.api, "exp_show", exp_show)
    with pytest.raises(SweepError, match="dvc exp show: Empty git repo"):
        sweeps.exp_rows(REPO)

    # a task's run file removed while DVC read it (it stopped a `resume` at its first read)
    def vanished(repo, revs=None):
        raise FileNotFoundError(2, "No such file or directory", ".dvc/tmp/exps/run/ab/ab.run")

    monkeypatch.setattr(dvc.api, "exp_show", vanished)
    monkeypatch.setattr(sweeps.time, "sleep", lambda s: None)
    with pytest.raises(SweepError, match=r"dvc exp show: .*ab\.run"):
        sweeps.settled_rows(REPO, tries=2)
    task = "14b8fccba9e28cd048b0b88e9149db18594be052"

    def stale(repo, revs=None):  # one that stays: a task DVC holds active with no run files
        raise FileNotFoundError(2, "No such file", f"/r/.dvc/tmp/exps/run/{task}/{task}.run")

    monkeypatch.setattr(dvc.api, "exp_show", stale)
    with pytest.raises(SweepError, match="`dvc queue kill 14b8fcc` then `dvc queue remove"):
        sweeps.exp_rows(REPO)


def test_experiments_of_several_commits_are_read_together_and_a_shared_name_raises(monkeypatch):
    """`--rev` repeated: a cell added on a later commit reports beside the earlier ones; a name
    on two of the commits is ambiguous and raises, naming it."""
    import dvc.api

    import pipeline.tools.sweeps.status as sweeps

    asked = []

    def exp_show(repo, revs=None):
        asked.append(revs)
        return [{"Experiment": None, "rev": "a"}, {"Experiment": "x-s0", "rev": "1"},
                {"Experiment": None, "rev": "b"}, {"Experiment": "y-s0", "rev": "2"}]  # fmt: skip

    monkeypatch.setattr(dvc.api, "exp_show", exp_show)
    assert set(sweeps.exp_rows(REPO, ["a", "b"])) == {"x-s0", "y-s0"} and asked == [["a", "b"]]
    monkeypatch.setattr(
        dvc.api,
        "exp_show",
        lambda repo, revs=None: [{"Experiment": "x-s0"}, {"Experiment": "x-s0"}],
    )
    with pytest.raises(SweepError, match="x-s0 on more than one of the commits"):
        sweeps.exp_rows(REPO, ["a", "b"])
    with pytest.raises(SweepError, match="x-s0 twice on one commit"):  # not "the commits None"
        sweeps.exp_rows(REPO)


def test_the_report_is_mean_std_ddof1_and_welchs_p_against_the_control():
    table = Table.model_validate(TABLE)
    base, more = [1.0, 2.5, 4.0], [10.0, 12.0, 11.0]
    rows = [_row(table, "base", s, v) for s, v in enumerate(base)]
    rows += [_row(table, "more", s, v) for s, v in enumerate(more[:2])]
    rows.append(_row(table, "more", 2, more[2], **{"train.t-more.steps": 50.0}))  # stale
    found = statuses(table, {r["Experiment"]: r for r in rows})
    cells = summaries(table, found)
    assert cells["base"].std == pytest.approx(np.std(base, ddof=1))
    assert cells["more"].n == 2 and cells["more"].mean == pytest.approx(11.0)
    text = format_report(table, found)
    p = stats.ttest_ind(more[:2], base, equal_var=False).pvalue
    assert (
        f"| more | 2 | 11.0 +- {np.std(more[:2], ddof=1):.1f} | {p:.2g} | 0: 10.0, 1: 12.0 |"
        in text
    )
    assert f"| base | 3 | {np.mean(base):.1f} +- {np.std(base, ddof=1):.1f} |  |" in text
    assert "t-more-s2 stale (train.t-more.steps=50.0 (table: 100))" in text


class _Files:
    """A DVCFileSystem stand-in: path -> text."""

    def __init__(self, files):
        self.files = files

    def exists(self, path):
        return path in self.files

    def read_text(self, path):
        return self.files[path]


def test_a_rounds_cells_curve_goes_on_through_its_rounds_from_the_runs_last_step():
    from pipeline.tools.sweeps.report import read_cell_curve

    spec = {"train": {"env": "E-v0", "method": "erpv", "steps": 4},
            "rounds": {"count": 2, "episodes": 1, "steps": 2}}  # fmt: skip
    table = Table.model_validate({**TABLE, "cells": {"r": spec}, "control": None})
    gate = "step\tgate_open\n{}\n"
    files = _Files({
        "plots/train/t-r/plots/metrics/vpg/gate_open.tsv": gate.format("2\t0.5\n4\t0.25"),
        "plots/rounds/t-r-r1/plots/metrics/vpg/gate_open.tsv": gate.format("2\t1.0"),
        "plots/rounds/t-r-r2/plots/metrics/vpg/gate_open.tsv": gate.format("1\t0.0\n2\t0.75"),
    })  # fmt: skip
    assert table.round_names("r") == ["t-r-r1", "t-r-r2"]
    assert table.steps("r") == 8
    assert read_cell_curve(files, table, "r", "vpg/gate_open") == [
        (2, 0.5), (4, 0.25), (6, 1.0), (7, 0.0), (8, 0.75)
    ]  # fmt: skip
    assert read_cell_curve(files, table, "r", "alpha") is None  # the run logged none
    del files.files["plots/rounds/t-r-r2/plots/metrics/vpg/gate_open.tsv"]
    with pytest.raises(FileNotFoundError, match="this round did not"):
        read_cell_curve(files, table, "r", "vpg/gate_open")


def test_diagnostics_are_second_half_means_per_run_then_mean_std_over_seeds():
    from pipeline.tools.sweeps.report import format_diagnostics, second_half_mean

    curve = [(100, 1.0), (500, 2.0), (501, 4.0), (1000, 6.0)]
    assert second_half_mean(curve, 1000) == 5.0  # steps 501 and 1000
    assert second_half_mean(curve[:2], 1000) is None
    table = Table.model_validate({**TABLE, "diagnostics": ["vpg/gate_open", "alpha"]})
    found = [
        dataclasses.replace(f, diagnostics={"vpg/gate_open": g, "alpha": a})
        for f, g, a in zip(
            statuses(table, {}, ["more"]), (0.2, 0.4, None), (0.1, 0.2, 0.3), strict=True
        )
    ]
    text = "\n".join(format_diagnostics(table, found))
    assert "| cell | vpg/gate_open | alpha |" in text
    assert f"| more | 0.3 +- {np.std([0.2, 0.4], ddof=1):.3g} [2] | 0.2 +- 0.1 [3] |" in text
    assert "| base | | |" in text  # no run read
    assert format_diagnostics(Table.model_validate(TABLE), found) == []


def test_steps_to_is_the_first_step_of_the_moving_mean_and_its_median_counts_never_as_inf():
    curve = [(10, 0.0), (20, 100.0), (30, 50.0), (40, 200.0)]
    assert steps_to(curve, 100.0) == 20
    assert steps_to(curve, 100.0, window=2) == 40  # means 50, 75, 125
    assert steps_to(curve, 300.0) is None and steps_to([], 1.0) is None
    assert median_steps([30, None, 10]) == 30  # 10, 30, inf
    assert median_steps([None, None, 10]) is None  # fewer than half reach it
    assert median_steps([40, 10, 20, 30]) == 20  # the lower median of an even count
    table = Table.model_validate({**TABLE, "thresholds": [5]})
    rows = {r["Experiment"]: r for r in [_row(table, "base", s, 1.0) for s in range(3)]}
    done = [f for f in statuses(table, rows) if f.state == "done"]
    found = [
        dataclasses.replace(f, steps_to={"5": n})
        for f, n in zip(done, (100, None, 300), strict=True)
    ]
    text = format_report(table, found)
    assert "| base | 3 | 1.0 +- 0.0 |  | 300 [2/3] | 0: 1.0, 1: 1.0, 2: 1.0 |" in text
    assert "steps to 5 |" in text and "a seed that never reaches" in text


@pytest.mark.parametrize(
    "path", sorted((REPO / "benchmarks" / "tables").glob("*.yaml")), ids=lambda p: p.stem
)
def test_every_shipped_table_passes_the_dvc_gate_over_params_yaml(path, capsys):
    """A table is queued for hours: each cell's params, merged over params.yaml, must pass the
    checks the check_params stage makes (`vlmrl-sweep check`)."""
    assert main(["check", str(path), "--repo", str(REPO)]) == 0, capsys.readouterr().err


def test_check_names_the_cell_and_the_bad_key(tmp_path, capsys):
    bad = {**TABLE, "cells": {"base": {"train": {"env": "MountainCar-v0", "method": "sacc",
                                                 "steps": 100}}}}  # fmt: skip
    path = tmp_path / "t.yaml"
    path.write_text(yaml.safe_dump({**bad, "params": {}, "control": None}))
    assert main(["check", str(path), "--repo", str(REPO)]) == 2
    assert "cell base: " in (err := capsys.readouterr().err) and "unknown method 'sacc'" in err


def test_the_command_line_prints_the_shell_line_that_reruns_one_cell(tmp_path, capsys):
    path = tmp_path / "t.yaml"
    path.write_text(yaml.safe_dump(TABLE))
    assert main(["commands", str(path), "--cell", "more", "--seed", "1", "--push", "origin"]) == 0
    line = capsys.readouterr().out.strip()
    run, push = line.split(" && ")
    assert shlex.split(run) == exp_command(load_table(path), "more", 1)
    assert shlex.split(push) == ["dvc", "exp", "push", "origin", "t-more-s1"]
    assert main(["commands", str(path), "--cell", "nope"]) == 2
    assert "--cell nope: not in" in capsys.readouterr().err


TOY_TRAIN = """
import json, os, sys, yaml
run = sys.argv[1]
p = yaml.safe_load(open("params.yaml"))
r = p["train"][run]
os.makedirs("models", exist_ok=True)
value = 10 * p["scale"] + r["seed"] + r.get("bonus", 0)
open(f"models/{run}.txt", "w").write(str(value))
os.makedirs(f"plots/train/{run}/plots/metrics", exist_ok=True)  # the learning curve, as train@
with open(f"plots/train/{run}/plots/metrics/return.tsv", "w") as f:
    f.write(f"step\\treturn\\n1\\t0\\n2\\t{value / 2}\\n3\\t{value}\\n")
"""
TOY_EVALUATE = """
import json, os, sys
run = sys.argv[1]
os.makedirs("metrics/eval", exist_ok=True)
json.dump({"return_mean": float(open(f"models/{run}.txt").read())},
          open(f"metrics/eval/{run}.json", "w"))
"""
TOY_TEACHER = """
import json, os, sys, yaml
import polars as pl
env = sys.argv[1]
p = yaml.safe_load(open("params.yaml"))
q, n = p["label"]["quality"], p["teacher_eval"]["episodes"]
os.makedirs("metrics/teacher", exist_ok=True)
row = {"policy": "teacher:k=1", "return_mean": 10.0 * q, "return_std": 0.5}
json.dump({"env": env, "episodes": n, "teacher_id": f"toy:q={q}", "teacher_rows": [row],
           "random": {"return_mean": 1.0, "return_std": 0.25}},
          open(f"metrics/teacher/{env}.json", "w"))
os.makedirs("data/labels", exist_ok=True)  # as label@<env> writes it (queried: paid for)
pl.DataFrame({"task": ["action"] * 3 + ["judge"], "queried": [True, False, True, True],
              "parse_status": ["ok"] * 4, "judge": [None, None, None, q > 5]}
             ).write_parquet(f"data/labels/{env}.parquet")
"""
TOY_DVC = """stages:
  train:
    foreach: ${train}
    do:
      cmd: python train.py ${key}
      deps: [train.py]
      params:
        - scale
        - train.${key}
      outs:
        - models/${key}.txt
      plots:
        - plots/train/${key}
  evaluate:
    foreach: ${train}
    do:
      cmd: python evaluate.py ${key}
      deps:
        - evaluate.py
        - models/${key}.txt
      metrics:
        - metrics/eval/${key}.json:
            cache: false
  teacher_eval:
    foreach: [E-v0]
    do:
      cmd: python teacher.py ${item}
      deps: [teacher.py]
      params: [label, teacher_eval]
      outs:
        - data/labels/${item}.parquet
      metrics:
        - metrics/teacher/${item}.json:
            cache: false
"""
TOY_TABLE = {
    "table": "toy",
    "control": "a",
    "seeds": [0, 1, 2],
    "thresholds": [11],
    "window": 1,
    "diagnostics": ["return", "vpg/gate_open"],  # the second: a curve no toy run logs
    "teacher_eval": {"episodes": 3},
    "cells": {
        "a": {"train": {"env": "E-v0", "method": "toy", "steps": 1}},
        "b": {"train": {"env": "E-v0", "method": "toy", "steps": 1, "bonus": 5},
              "params": {"scale": 2}},
    },
}  # fmt: skip


@pytest.mark.slow  # two DVC projects, a queue worker and six `dvc exp run`s
def test_a_table_runs_from_dvcs_queue_and_on_another_machine_then_reports(
    tmp_path, monkeypatch, capsys
):
    """Cell a runs from this repository's queue (`queue --jobs 1 --wait`); cell b runs as one
    self-contained job per experiment, as a batch scheduler would run them (`commands --push
    --clone`: a fresh clone of the git remote at this commit, the experiment, `dvc exp push`),
    and comes back with `dvc exp pull`. The report holds both, from each experiment's own metric,
    and the teacher both cells share, from its own experiment; a change to the table makes the
    experiments it touches stale."""
    import os
    import subprocess
    import sys

    monkeypatch.setenv("PATH", f"{os.path.dirname(sys.executable)}:{os.environ['PATH']}")
    # the "other machine"'s clones commit their experiments as this user
    (tmp_path / "gitconfig").write_text("[user]\n\temail = t@example.com\n\tname = t\n")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(tmp_path / "gitconfig"))

    def run(cwd, *cmd):
        return subprocess.run(cmd, cwd=cwd, check=True, capture_output=True, text=True).stdout

    here, there, git_remote, dvc_remote = (tmp_path / n for n in ("here", "there", "r.git", "s"))
    run(tmp_path, "git", "init", "-q", "--bare", str(git_remote))
    here.mkdir()
    (here / "train.py").write_text(TOY_TRAIN)
    (here / "evaluate.py").write_text(TOY_EVALUATE)
    (here / "teacher.py").write_text(TOY_TEACHER)
    (here / "dvc.yaml").write_text(TOY_DVC)
    (here / "params.yaml").write_text(
        "scale: 1\nlabel: {quality: 7}\nteacher_eval: {episodes: 1}\n"
        "train:\n  base: {env: E-v0, method: toy, steps: 1, seed: 0}\n"
    )
    table = tmp_path / "toy.yaml"
    table.write_text(yaml.safe_dump(TOY_TABLE, sort_keys=False))
    for cmd in (
        ("git", "init", "-q", "-b", "main"),
        ("dvc", "init", "-q"),
        ("dvc", "remote", "add", "-d", "store", str(dvc_remote)),
        ("dvc", "repro", "-q"),
        ("git", "add", "-A"),
        ("git", "commit", "-qm", "baseline"),
        ("git", "remote", "add", "origin", str(git_remote)),
        ("git", "push", "-q", "origin", "main"),
    ):
        run(here, *cmd)

    assert main(["queue", str(table), "--repo", str(here), "--cell", "a", "--jobs", "1",
                 "--wait"]) == 0  # fmt: skip
    out = capsys.readouterr().out
    assert "queued 4 experiment(s): toy-a-s0, toy-a-s1, toy-a-s2, toy-teacher-a" in out
    assert "4 done" in out

    args = ["--repo", str(here), "--cell", "b", "--push", "origin", "--clone", str(git_remote)]
    assert main(["commands", str(table), *args]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 4 and "teacher_eval@E-v0" in lines[3]  # the teacher a and b share
    lines = lines[:3]  # which ran here already
    there.mkdir()
    for line in lines:  # each line one job on another machine: it clones, runs, pushes
        run(there, "bash", "-c", line)
    assert sorted(p.name for p in there.iterdir()) == ["toy-b-s0", "toy-b-s1", "toy-b-s2"]
    for seed in (0, 1, 2):
        run(here, "dvc", "exp", "pull", "origin", f"toy-b-s{seed}")

    report = tmp_path / "report"
    assert main(["report", str(table), "--repo", str(here), "--out", str(report)]) == 0
    text = (report / "table.md").read_text()
    a, b = [10.0, 11.0, 12.0], [25.0, 26.0, 27.0]  # 10 * scale + seed + bonus
    p = stats.ttest_ind(b, a, equal_var=False).pvalue
    # steps to 11, read from each experiment's cached curve (b's pulled from the DVC remote):
    # a's seed 0 never gets there (0, 5, 10), seeds 1-2 at step 3; b's at step 2
    assert "| a | 3 | 11.0 +- 1.0 |  | 3 [2/3] | 0: 10.0, 1: 11.0, 2: 12.0 |" in text
    assert f"| b | 3 | 26.0 +- 1.0 | {p:.2g} | 2 [3/3] | 0: 25.0, 1: 26.0, 2: 27.0 |" in text
    assert "Not in the table" not in text
    assert (
        "| a, b | `toy:q=7` | 3 | 70.0 +- 0.5 | 1.0 +- 0.2 | action 2, judge 1 | 100.0% | 100.0% |"
        in text
    )
    # each run's curve (0, v/2, v) at steps 1-3 of 1: all of it is past half its training
    assert "| return | vpg/gate_open |" in text
    assert "| a | 5.5 +- 0.5 [3] | |\n" in text and "| b | 13 +- 0.5 [3] | |\n" in text
    assert (report / "return_mean.png").read_bytes()[:4] == b"\x89PNG"
    import json

    raw = json.loads((report / "results.json").read_text())
    assert {(e["name"], e["state"], e["value"]) for e in raw["experiments"]} == {
        (f"toy-{c}-s{s}", "done", v) for c, vs in (("a", a), ("b", b)) for s, v in enumerate(vs)
    } | {("toy-teacher-a", "done", None)}
    assert raw["experiments"][-1]["teacher"]["teacher_id"] == "toy:q=7"
    assert [
        e["steps_to"] for e in raw["experiments"] if e["cell"] == "a" and e["seed"] is not None
    ] == [
        {"11": None},
        {"11": 3},
        {"11": 3},
    ]
    # the raw curves beside what was read from them (a fresh clone keeps only git)
    curves = {e["name"]: e["curves"] for e in raw["experiments"] if e["seed"] is not None}
    assert curves["toy-a-s0"] == {"return": [[1, 0.0], [2, 5.0], [3, 10.0]]}  # no gate_open
    assert curves["toy-b-s2"] == {"return": [[1, 0.0], [2, 13.5], [3, 27.0]]}

    # a later commit that no stage reads: the experiments stay with the commit they ran on
    old = run(here, "git", "rev-parse", "HEAD").strip()
    (here / "NOTES.md").write_text("results\n")
    run(here, "git", "add", "NOTES.md")
    run(here, "git", "commit", "-qm", "notes")
    assert main(["status", str(table), "--repo", str(here)]) == 0
    assert "7 missing" in capsys.readouterr().out
    assert main(["status", str(table), "--repo", str(here), "--rev", old]) == 0
    assert "7 done" in capsys.readouterr().out
    run(here, "git", "checkout", "-q", old)

    changed = {**TOY_TABLE, "params": {"scale": 3}}
    table.write_text(yaml.safe_dump(changed, sort_keys=False))
    assert main(["status", str(table), "--repo", str(here)]) == 0
    out = capsys.readouterr().out
    assert "3 stale" not in out and "4 stale" in out and "scale=1.0 (table: 3)" in out
    assert "toy-a-s0" in out and "toy-teacher-a" in out  # the teacher reads the table's params


def test_a_job_line_clones_at_the_commit_pulls_runs_and_pushes(tmp_path, capsys):
    from pipeline.tools.sweeps.table import job_line

    table = Table.model_validate(TABLE)
    command = exp_command(table, "base", 1, pull=True)
    line = job_line(command, "origin", "git@host:lab/repo.git", "abc123")
    steps = [shlex.split(step) for step in line.split(" && ")]
    assert steps[:3] == [
        ["git", "clone", "-q", "git@host:lab/repo.git", "t-base-s1"],
        ["cd", "t-base-s1"],
        ["git", "checkout", "-q", "abc123"],
    ]
    assert steps[3] == command and "--pull" in command
    assert steps[4] == ["dvc", "exp", "push", "origin", "t-base-s1"]
    path = tmp_path / "t.yaml"
    path.write_text(yaml.safe_dump(TABLE))
    assert main(["commands", str(path), "--clone", "git@host:lab/repo.git"]) == 2
    assert "--clone needs --push REMOTE" in capsys.readouterr().err


def test_a_report_names_its_table_by_its_path_in_its_repository(tmp_path):
    """results.json is committed: it names no directory of the machine that made it."""
    from pipeline.tools.sweeps.report import repo_path

    assert repo_path(REPO / "benchmarks" / "tables" / "rounds.yaml") == (
        "benchmarks/tables/rounds.yaml"
    )
    (tmp_path / "lab" / ".git").mkdir(parents=True)
    (tmp_path / "lab" / "t").mkdir()
    assert repo_path(tmp_path / "lab" / "t" / "x.yaml") == "t/x.yaml"


def test_queue_says_which_commit_it_queued_on_and_when_that_is_not_revs():
    """DVC queues on the checked-out commit: a clone left at another table's commit would run
    a table's new cells on the wrong code, so the line names the commit and the mismatch."""
    from pipeline.tools.sweeps.cli import queued_line

    table = Table.model_validate(TABLE)
    found = statuses(table, {})[:2]
    head, other = "a" * 40, "b" * 40
    assert queued_line([], head, [other]) == "queued 0 experiment(s): every one is done or queued"
    line = queued_line(found, head, [head, other])
    assert (
        line == "queued 2 experiment(s): t-base-s0, t-base-s1 (on aaaaaaa, the commit checked out)"
    )
    wrong = queued_line(found, head, [other])
    assert "not --rev's bbbbbbb" in wrong and "dvc queue remove" in wrong
    assert "not --rev" not in queued_line(found, head, [])


def test_holm_adjusts_the_family_step_down_and_leaves_untested_out():
    from pipeline.tools.experiments import holm

    assert holm([0.01, 0.04, 0.03, None]) == pytest.approx([0.03, 0.06, 0.06, None])
    assert holm([0.5, 0.9]) == pytest.approx([1.0, 1.0])
    assert holm([]) == []


# five seeds of two cells: every seed of `more` at the flag (>= 80), none of `base`
FLAG_SEEDS = {"more": [93.0, 94.0, 92.0, 95.0, 91.0], "base": [-5.0, 0.0, 10.0, -1.0, 3.0]}


def report_of(spec: dict, values: dict[str, list[float]]) -> str:
    """The report of the table `spec` with every experiment done at `values[cell][seed]`."""
    table = Table.model_validate(spec)
    found = [dataclasses.replace(f, state="done", value=values[f.cell][f.seed])
             for f in statuses(table, {})]  # fmt: skip
    return format_report(table, found)


# five seeds of `more`, `base` and `bad`; the family: more and bad each against base, at the flag
FLAG_FAMILY = {
    **TABLE,
    "seeds": [0, 1, 2, 3, 4],
    "cells": {**TABLE["cells"], "bad": TABLE["cells"]["base"]},
    "preregistered": {
        "hypothesis": "more beats base",
        "primary": "seeds at the flag",
        "test": "fisher",
        "success": 80.0,
        "comparisons": [["more", "base"], ["bad", "base"]],
    },
}


def test_the_report_runs_the_preregistered_family_with_fisher_and_holm():
    """5/5 seeds at the flag against 0/5: Fisher's one-sided p = 1/252 (0.004), Holm over the
    two comparisons doubles the smaller; a pair without a difference is `not detected at n`."""
    spec = FLAG_FAMILY
    text = report_of(spec, {**FLAG_SEEDS, "bad": [0.0, 2.0, -4.0, 85.0, 1.0]})
    p = stats.fisher_exact([[5, 0], [0, 5]], "greater").pvalue
    q = stats.fisher_exact([[1, 4], [0, 5]], "greater").pvalue
    assert "Holm over 2): more beats base" in text
    assert f"| more | base | 5/5 vs 0/5 | {p:.2g} | {2 * p:.2g} | detected |" in text
    assert f"| bad | base | 1/5 vs 0/5 | {q:.2g} | {q:.2g} | not detected at n = 5 |" in text
    with pytest.raises(ValueError, match="success"):
        Table.model_validate({**spec, "preregistered": {**spec["preregistered"], "success": None}})
    with pytest.raises(ValueError, match="not cells"):
        Table.model_validate(
            {**spec, "preregistered": {**spec["preregistered"], "comparisons": [["x", "base"]]}}
        )


def test_an_amendment_is_its_own_holm_family_over_the_cells_it_adds():
    """The first family keeps its Holm over its own comparisons; an amendment written later
    adds cells and tests them in a family of its own. It cannot re-test an earlier family's
    cells, nor a pair that involves none of its cells."""
    first = {
        "hypothesis": "more beats base",
        "primary": "seeds at the flag",
        "test": "fisher",
        "success": 80.0,
        "comparisons": [["more", "base"], ["bad", "base"]],
    }
    amendment = {
        "why": "what blocks bad",
        "hypothesis": "fixed beats bad",
        "primary": "seeds at the flag",
        "test": "fisher",
        "success": 80.0,
        "cells": ["fixed"],
        "comparisons": [["fixed", "bad"]],
    }
    base = TABLE["cells"]["base"]
    spec = {
        **TABLE,
        "seeds": [0, 1, 2, 3, 4],
        "cells": {**TABLE["cells"], "bad": base, "fixed": base},
        "preregistered": {**first, "amendments": [amendment]},
    }
    text = report_of(spec, {**FLAG_SEEDS, "bad": [0.0, 2.0, -4.0, 85.0, 1.0],
                            "fixed": [90.0, 91.0, 92.0, 93.0, 0.0]})  # fmt: skip
    p = stats.fisher_exact([[5, 0], [0, 5]], "greater").pvalue
    r = stats.fisher_exact([[4, 1], [1, 4]], "greater").pvalue
    assert "Pre-registered (greater, alpha 0.05, Holm over 2): more beats base" in text
    assert f"| more | base | 5/5 vs 0/5 | {p:.2g} | {2 * p:.2g} | detected |" in text
    assert ("Amendment 1, its own family, adding fixed (what blocks bad) (greater, alpha "
            "0.05, Holm over 1): fixed beats bad") in text  # fmt: skip
    # one comparison in its family: Holm leaves its p as it is
    assert f"| fixed | bad | 4/5 vs 1/5 | {r:.2g} | {r:.2g} | not detected at n = 5 |" in text
    assert text.index("Pre-registered") < text.index("Amendment 1")

    def invalid(**change: object) -> None:
        changed = {**spec, "preregistered": {**first, "amendments": [{**amendment, **change}]}}
        Table.model_validate(changed)

    with pytest.raises(ValueError, match="already in an earlier family"):
        invalid(cells=["bad"], comparisons=[["bad", "fixed"]])
    with pytest.raises(ValueError, match="involves none of its cells"):
        invalid(comparisons=[["more", "bad"]])
    with pytest.raises(ValueError, match=r"amendment cells \['nope'\]"):
        invalid(cells=["fixed", "nope"])
    with pytest.raises(ValueError, match="give success"):
        invalid(success=None)


def test_a_comparison_that_can_no_longer_reach_alpha_is_said_while_seeds_are_to_come():
    """P1b's case: a cell 0/2 at the flag can at best be 3/5 against 0/5 (Fisher p 1/12, Holm's
    second step leaves it), so at alpha 0.05 it cannot be detected whatever its last seeds do;
    2/2 against 0/2 can still be (5/5 against 0/5, p 1/252, doubled by Holm). Once every seed is
    in, nothing is added."""
    spec = FLAG_FAMILY
    table = Table.model_validate(spec)
    values = {"more": [93.0, 94.0], "base": [-5.0, 0.0], "bad": [0.0, 2.0]}
    found = [dataclasses.replace(f, state="done", value=values[f.cell][f.seed])
             if f.seed is not None and f.seed < 2 else f for f in statuses(table, {})]  # fmt: skip
    text = format_report(table, found)
    open_p = 2 * stats.fisher_exact([[5, 0], [0, 5]], "greater").pvalue
    shut_p = stats.fisher_exact([[3, 2], [0, 5]], "greater").pvalue
    assert f"at n = 5 at best Holm p {open_p:.2g}: still open |" in text
    assert f"| bad | base | 0/2 vs 0/2 | 1 | 1 | not detected at n = 2; at n = 5 at best Holm p " \
        f"{shut_p:.2g}: cannot be detected |" in text  # fmt: skip
    complete = report_of(spec, {**FLAG_SEEDS, "bad": [0.0, 2.0, -4.0, 85.0, 1.0]})
    assert "at best" not in complete


def test_the_best_case_p_moves_every_value_to_come_the_tests_way():
    """Mann-Whitney: the values to come of x above all, of y below all (distinct, no ties);
    Fisher: x's to come successes, y's failures; two-sided: the better way."""
    x, y = [1.0, 2.0], [3.0, 4.0, 5.0]
    want = stats.mannwhitneyu([1, 2, 6, 7, 8], [3, 4, 5, 0, -1], alternative="greater").pvalue
    assert best_case_p(x, y, 5) == pytest.approx(want)
    want = stats.mannwhitneyu([1, 2, 0, -1, -2], [3, 4, 5, 6, 7], alternative="less").pvalue
    assert best_case_p(x, y, 5, "less") == pytest.approx(want)
    ways = [
        stats.mannwhitneyu([1, 2, 6, 7, 8], [3, 4, 5, 0, -1], alternative="two-sided"),
        stats.mannwhitneyu([1, 2, 0, -1, -2], [3, 4, 5, 6, 7], alternative="two-sided"),
    ]
    assert best_case_p(x, y, 5, "two-sided") == pytest.approx(min(w.pvalue for w in ways))
    # complete: the p itself
    assert best_case_p([5.0, 6.0], [1.0, 2.0], 2) == pytest.approx(
        stats.mannwhitneyu([5, 6], [1, 2], alternative="greater").pvalue)  # fmt: skip
    assert best_case_p([-90.0, -80.0], [0.0], 5, success=80.0) == pytest.approx(
        stats.fisher_exact([[3, 2], [0, 5]], "greater").pvalue)  # fmt: skip
    assert best_case_p([], [], 1) is None  # one value each: no Mann-Whitney test


def test_holms_adjusted_p_never_falls_when_a_raw_p_rises():
    """What makes Holm over the best cases a bound on each comparison's final adjusted p."""
    rng = np.random.default_rng(0)
    for _ in range(2000):
        p = list(rng.uniform(0, 0.2, size=int(rng.integers(1, 5))))
        i = int(rng.integers(len(p)))
        higher = [*p[:i], p[i] + float(rng.uniform(0, 0.2)), *p[i + 1 :]]
        for low, high in zip(holm(p), holm(higher), strict=True):
            assert high >= low - 1e-12


TOY_RESUMING_TRAIN = """
import json, os, sys
from pathlib import Path
import yaml
from pipeline.learn.methods.base import resume_for
run = sys.argv[1]
p = yaml.safe_load(open("params.yaml"))
cfg = p["train"][run]
resume = resume_for(f".resume/{run}", 1, {"run": run, "train": cfg})
state = resume.load() or {"step": 0, "total": 0, "started_at": []}
state["started_at"] = state["started_at"] + [state["step"]]
def tell(what):  # to the test, if it is listening on its FIFO
    try:
        fd = os.open(os.environ["TOY_REACHED"], os.O_WRONLY | os.O_NONBLOCK)
    except OSError:  # no reader: the test is not waiting
        return
    os.write(fd, what.encode())
    os.close(fd)
try:
    while state["step"] < cfg["steps"]:
        state["step"] += 1
        state["total"] += state["step"] * (cfg["seed"] + 1)
        resume.save(state)
        if state["step"] == 2 and state["started_at"] == [0]:  # the first run, state saved:
            with open(os.environ["TOY_REACHED"], "w") as reached:  # waits for the test
                reached.write("2\\n")
            open(os.environ["TOY_HALT"]).read()  # and block: no writer comes; killed here
except BaseException as exc:
    tell(f"failed: {exc!r}\\n")  # never leave the test waiting on a dead run
    raise
resume.clear()
os.makedirs("models", exist_ok=True)
Path(f"models/{run}.txt").write_text(json.dumps(state))
"""
PR_SET_CHILD_SUBREAPER = 36  # prctl(2): orphaned descendants are reparented to this process
TOY_RESUMING_EVALUATE = """
import json, os, sys
run = sys.argv[1]
state = json.load(open(f"models/{run}.txt"))
os.makedirs("metrics/eval", exist_ok=True)
json.dump({"return_mean": float(state["total"]), "started_at": state["started_at"]},
          open(f"metrics/eval/{run}.json", "w"))
"""


@pytest.mark.slow  # a DVC project, queue workers killed and started again: about a minute
def test_a_killed_queue_goes_on_from_each_runs_resume_state(tmp_path, monkeypatch, capsys, request):
    """The machine stops in the middle of a table: every process of the queue is SIGKILLed once
    the run has saved its state (driven by its progress, not by a clock). `status` reads the
    run as partial at its step; `queue` again runs it from there, to the value an uninterrupted
    run gives, and `--results` keeps it: the next `queue` finds nothing to do."""
    import contextlib
    import ctypes
    import json
    import os
    import signal
    import subprocess
    import sys

    from pipeline.learn.agents.resume import read_plain

    monkeypatch.setenv("PATH", f"{os.path.dirname(sys.executable)}:{os.environ['PATH']}")
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    (tmp_path / "gitconfig").write_text("[user]\n\temail = t@example.com\n\tname = t\n")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(tmp_path / "gitconfig"))
    # the run's progress reaches the test through FIFOs: blocking reads, no clock
    for name in ("reached", "halt"):
        os.mkfifo(tmp_path / name)
        monkeypatch.setenv(f"TOY_{name.upper()}", str(tmp_path / name))
    # the queue's workers detach from this process; as their subreaper it reaps them, killed
    libc = ctypes.CDLL(None, use_errno=True)
    assert libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    request.addfinalizer(lambda: libc.prctl(PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0))
    root = tmp_path / "states"

    def run(cwd, *cmd):
        return subprocess.run(cmd, cwd=cwd, check=True, capture_output=True, text=True).stdout

    here = tmp_path / "here"

    def kill_all() -> list[int]:
        """SIGKILL every process whose working directory is in the project (the queue's
        workers in it, each experiment in its workspace under .dvc/tmp/exps), then reap them
        (blocking until each has exited): as after a restart, none is left, not even a zombie."""
        killed = []
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                cwd = os.readlink(f"/proc/{pid}/cwd")
            except OSError:
                continue
            if cwd.startswith(str(here)) and int(pid) != os.getpid():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(pid), signal.SIGKILL)
                    killed.append(int(pid))
        with contextlib.suppress(ChildProcessError):  # none of ours left
            while True:
                os.waitpid(-1, 0)
        return killed

    request.addfinalizer(kill_all)  # no worker outlives the test, whatever it asserts
    here.mkdir()
    (here / "train.py").write_text(TOY_RESUMING_TRAIN)
    (here / "evaluate.py").write_text(TOY_RESUMING_EVALUATE)
    (here / "dvc.yaml").write_text(TOY_DVC.split("  teacher_eval:")[0].replace(
        "      plots:\n        - plots/train/${key}\n", ""))  # fmt: skip
    (here / "params.yaml").write_text("scale: 1\ntrain:\n  base: {env: E-v0, steps: 4, seed: 0}\n")
    (here / ".gitignore").write_text("models/\n")
    spec = {"table": "toy", "seeds": [1],
            "cells": {"a": {"train": {"env": "E-v0", "method": "toy", "steps": 4}}}}  # fmt: skip
    table = tmp_path / "toy.yaml"
    table.write_text(yaml.safe_dump(spec))
    for cmd in (("git", "init", "-q", "-b", "main"), ("dvc", "init", "-q"),
                ("git", "add", "-A"), ("git", "commit", "-qm", "baseline")):  # fmt: skip
        run(here, *cmd)
    common = ["--repo", str(here), "--resume-root", str(root)]
    assert main(["queue", str(table), *common, "--jobs", "1"]) == 0
    state_dir = root / "toy-a"
    with open(tmp_path / "reached") as reached:  # blocks until the run has saved step 2
        assert reached.readline() == "2\n"
    assert read_plain(next(state_dir.glob("*/state.json")).parent)["step"] == 2
    # the machine stops: every process working in the project dies at once
    killed = kill_all()
    assert killed and not any(os.path.exists(f"/proc/{pid}") for pid in killed)
    capsys.readouterr()
    assert main(["status", str(table), *common]) == 0
    out = capsys.readouterr().out
    assert "partial  at step 2 of 4 (resume state, saved " in out, out  # DVC: still "Running"

    # the next day: queued again, the run resumes at step 2 and does not halt there
    results = tmp_path / "results"
    assert main(["queue", str(table), *common, "--jobs", "1", "--wait",
                 "--results", str(results)]) == 0  # fmt: skip
    out = capsys.readouterr().out
    assert "1 done" in out, out
    raw = json.loads((results / "results.json").read_text())
    (done,) = [e for e in raw["experiments"] if e["name"] == "toy-a-s1"]
    assert done["value"] == 2 * (1 + 2 + 3 + 4)  # the uninterrupted run's total, seed 1
    from dvc.api import DVCFileSystem

    metrics = json.loads(DVCFileSystem(str(here), rev=done["rev"]).read_text(
        "metrics/eval/toy-a.json"))  # fmt: skip
    assert metrics["started_at"] == [0, 2]  # killed at step 2, went on from there
    assert not any(state_dir.glob("*/state.json"))  # a finished run leaves no state
    # a new machine: no DVC experiment, the committed results say it is done
    run(here, "dvc", "exp", "remove", "--all-commits")
    assert main(["queue", str(table), *common, "--results", str(results)]) == 0
    assert "queued 0 experiment(s)" in capsys.readouterr().out


def test_the_seeds_verb_is_vlmrl_seeds(monkeypatch):
    """`vlmrl-sweep seeds ARGS` runs vlmrl-seeds' statistics with ARGS (one command for tables
    and for seeds over any experiments)."""
    import pipeline.tools.experiments as experiments
    from pipeline.tools.sweeps.cli import main

    seen = []
    monkeypatch.setattr(experiments, "main", lambda argv: seen.append(argv) or 7)
    assert main(["seeds", "--runs", "cartpole-.*"]) == 7
    assert seen == [["--runs", "cartpole-.*"]]


def test_requeueing_after_a_commit_reads_the_commit_the_table_was_queued_on(tmp_path, monkeypatch):
    """A table queued on one commit and requeued after another (`queue --rev OLD`): what is
    queued, running or done on OLD is read beside HEAD and not queued twice."""
    import pipeline.tools.sweeps.cli as cli
    import pipeline.tools.sweeps.queue as sweeps

    table = Table.model_validate(TABLE)
    on_old = {r["Experiment"]: r for r in (
        *(_row(table, "base", s, None, state="Queued") for s in table.seeds),
        *(_row(table, "more", s, None, state="Running") for s in table.seeds),
    )}  # fmt: skip
    asked, ran = [], []

    def settled_rows(repo, rev=None, every_s=10.0):
        asked.append(rev)
        return on_old if isinstance(rev, list) and "old-full" in rev else {}

    def run_checked(args, repo):
        ran.append(args)
        out = "\n".join("old-full" if a == "543a509" else "head-full" for a in args[2:])
        return dataclasses.make_dataclass("Done", [("stdout", str)])(out)

    monkeypatch.setattr(sweeps, "settled_rows", settled_rows)
    monkeypatch.setattr(sweeps, "run_checked", run_checked)
    monkeypatch.setattr(cli, "run_checked", run_checked)
    monkeypatch.setattr(sweeps, "check_clean", lambda repo: None)
    (tmp_path / "t.yaml").write_text(yaml.safe_dump(TABLE))
    assert cli.main(["queue", str(tmp_path / "t.yaml"), "--rev", "543a509"]) == 0
    assert asked == [["old-full", "head-full"]]
    assert ran == [["git", "rev-parse", "543a509", "HEAD"]]  # nothing queued: all are on OLD
    # without --rev only HEAD's experiments count: every one would be queued again
    asked.clear(), ran.clear()
    assert cli.main(["queue", str(tmp_path / "t.yaml")]) == 0
    assert asked == ["head-full"] and len([a for a in ran if a[:3] == ["dvc", "exp", "run"]]) == 6


def test_results_are_committed_where_they_lie_not_in_the_queueing_clone(tmp_path, monkeypatch):
    """`--results DIR --commit` from a clone: the report's files are committed in the repository
    that holds DIR (the checkout where work goes on), those files alone, and nothing in the
    clone that ran the experiments."""
    import pipeline.tools.sweeps.keep as keep

    def git(repo, *args):
        return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True,
                              text=True).stdout  # fmt: skip

    main, clone = tmp_path / "main", tmp_path / "clone"
    for repo in (main, clone):
        repo.mkdir()
        git(repo, "init", "-q")
        git(repo, "config", "user.email", "t@example.com")
        git(repo, "config", "user.name", "t")
        (repo / "notes.txt").write_text("x\n")
        git(repo, "add", "notes.txt")
        git(repo, "commit", "-qm", "base")
    (main / "notes.txt").write_text("work in progress\n")  # not the table's to commit
    table = Table.model_validate(TABLE)
    monkeypatch.setattr(keep, "read_curves", lambda table, found, repo: found)
    monkeypatch.setattr(keep, "read_teachers", lambda table, found, repo: found)
    (tmp_path / "t.yaml").write_text(yaml.safe_dump(TABLE))
    done = [dataclasses.replace(f, state="done", value=1.0, rev="abc") for f in statuses(table, {})]
    results = main / "benchmarks" / "results" / "t"
    keep.keep_results(table, tmp_path / "t.yaml", done, clone, keep.Keep(results, commit=True))
    assert (
        git(main, "log", "-1", "--format=%s") == "Table t: 6 of 6 experiments done (raw results)\n"
    )
    committed = git(main, "show", "--name-only", "--format=", "HEAD").split()
    assert committed and all(p.startswith("benchmarks/results/t/") for p in committed)
    assert git(main, "status", "--porcelain") == " M notes.txt\n"
    assert git(clone, "log", "--format=%s") == "base\n"


def test_queueing_refuses_a_checkout_with_changed_tracked_files(tmp_path):
    """`dvc exp run --queue` copies a checkout's uncommitted changes into each experiment, and
    its stash and restore while it queues overwrote an edit saved meanwhile: queue refuses a
    checkout whose tracked files differ from the commit, naming them; untracked files pass."""
    import subprocess

    from pipeline.tools.sweeps.queue import check_clean

    def git(*args):
        subprocess.run(["git", *args], cwd=tmp_path, check=True, capture_output=True)

    git("init", "-q")
    (tmp_path / "code.py").write_text("x = 1\n")
    git("add", "code.py")
    git("-c", "user.email=t@example.com", "-c", "user.name=t", "commit", "-qm", "base")
    (tmp_path / "notes.txt").write_text("untracked\n")
    check_clean(tmp_path)  # untracked files only
    (tmp_path / "code.py").write_text("x = 2\n")
    with pytest.raises(SweepError, match=r"1 tracked file\(s\) differ from the commit \(code\.py\)"
                       r".*queue the table from its own clone"):  # fmt: skip
        check_clean(tmp_path)


def test_a_params_file_that_dvcs_rewrite_would_change_is_named_line_by_line(tmp_path, capsys):
    """`dvc exp run -S` rewrites params.yaml as YAML 1.2, dropping quotes the stages' YAML 1.1
    reader needs: a quoted milestone "ON" becomes the boolean True. check names each such value
    with its line, and queue refuses before anything is queued; the shipped params.yaml and a
    flow-style server URL survive."""
    from pipeline.tools.sweeps.roundtrip import roundtrip_problems

    assert roundtrip_problems(REPO / "params.yaml") == []
    params = tmp_path / "params.yaml"
    params.write_text(
        "label:\n"
        '  teacher: {backend: openai, openai: {base_url: "http://127.0.0.1:8000/v1", model: m,\n'
        '            revision: "r1"}}\n'
        "env:\n"
        "  lamp:\n"
        '    labels: {milestones: {"OFF": 0.0, DIM: 0.5, "ON": 1.0}, objects: ["no", lamp]}\n'
    )
    problems = roundtrip_problems(params)
    assert len(problems) == 3, problems
    assert problems[0].startswith(f"{params}:6: env.lamp.labels.milestones.OFF: the key is read")
    assert any("env.lamp.labels.objects.0: 'no' now, False after DVC rewrites" in p
               for p in problems)  # fmt: skip
    assert not any("base_url" in p for p in problems)
    # the command line: check fails naming the line; queue refuses before queueing anything
    table = tmp_path / "t.yaml"
    table.write_text(yaml.safe_dump(TABLE))
    assert main(["check", str(table), "--repo", str(tmp_path)]) == 2
    assert f"{params}:6: env.lamp.labels.milestones.OFF" in capsys.readouterr().err
    assert main(["queue", str(table), "--repo", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "nothing queued: DVC's rewrite of params.yaml" in err and "objects.0" in err


def test_a_checkout_whose_top_level_plots_lie_in_an_output_it_lacks_is_refused(tmp_path):
    """DVC stages dvc.yaml's top-level plots when it commits an experiment, after its stages
    ran: a plot in a directory output that a fresh clone's empty cache lacks would have failed
    every P1b experiment so, each after its compute. `check_commit_paths` reads the same now: the clone
    is refused, naming the output and what to do; with the cache of the checkout that built it,
    it passes, as the checkout itself does."""
    import subprocess

    from pipeline.tools.sweeps.queue import check_commit_paths, tool_env

    def run(cwd, *cmd):
        subprocess.run(cmd, cwd=cwd, check=True, capture_output=True, text=True, env=tool_env())

    built, clone = tmp_path / "built", tmp_path / "clone"
    built.mkdir()
    (built / "dvc.yaml").write_text(
        "stages:\n  tables:\n    cmd: mkdir -p out && printf 'x,y\\n0,1\\n' > out/curve.csv\n"
        "    outs: [out]\nplots:\n  - out/curve.csv: {x: x, y: y}\n"
    )
    for cmd in (("git", "init", "-q"), ("dvc", "init", "-q"), ("dvc", "repro", "-q"),
                ("git", "add", "-A"),
                ("git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "built")):  # fmt: skip
        run(built, *cmd)
    check_commit_paths(built)  # the workspace and the cache hold it
    run(tmp_path, "git", "clone", "-q", str(built), str(clone))
    with pytest.raises(SweepError, match=r"would fail as DVC commits it.*'out'.*dvc cache dir"):
        check_commit_paths(clone)
    run(clone, "dvc", "cache", "dir", "--local", str(built / ".dvc" / "cache"))
    check_commit_paths(clone)
