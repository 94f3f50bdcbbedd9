"""A benchmark table as DVC experiments: `vlmrl-sweep`.

A table (a YAML file, for example `benchmarks/tables/*.yaml`) is params plus cells. A cell is
one train run (and, optionally, labelling rounds after it) and what it changes in params.yaml;
each (cell, seed) is one DVC experiment named `<table>-<cell>-s<seed>` that reproduces
`evaluate@<table>-<cell>` (with rounds: `evaluate_round@<table>-<cell>-r<count>`, the last
round's agent) and what that stage needs. DVC does the rest: params hashing decides what is
stale, the run cache restores every stage it has run before on the same code, data and params
(the dataset and C_V that many cells share are built once; not label and masks, whose persisted
caches it skips: they run again, from the caches the commit holds), `dvc queue` runs cells in
parallel, and `dvc exp push` / `pull` carry them between machines.

    vlmrl-sweep check TABLE                  # every cell's params pass the DVC gate's checks
    vlmrl-sweep status TABLE                 # every cell x seed: done, queued, running, failed,
                                             # stale or missing
    vlmrl-sweep queue TABLE --jobs 2 --wait  # queue what is not done, run 2 at a time, wait
    vlmrl-sweep report TABLE --out DIR       # table.md (mean +- std, ddof 1; Welch p against
                                             # the control), the figure, results.json (raw)
    vlmrl-sweep commands TABLE --cell C --seed S
                                             # the command that reruns one experiment
    vlmrl-sweep commands TABLE --push origin --clone URL
                                             # one self-contained shell job per experiment, for
                                             # any scheduler: clone, run, `dvc exp push`

The table file:

    table: mcc-guidance       # experiment and run names start with it
    metric: return_mean       # a key of metrics/eval/<run>.json
    control: sac-offline      # every other cell gets Welch's p-value against this one
    seeds: [0, 1, 2, 3, 4]    # train.<run>.seed of each experiment
    thresholds: [0, 90]       # report: steps until the mean of the last `window` (5) values of
                              # the training curve (`curve`: return) first reaches each
    params:                   # merged over params.yaml, key by key, for every cell
      evaluate: {episodes: 10, seed: 10000}
    cells:
      sac-offline:
        train: {env: MountainCarContinuous-v0, method: sac, steps: 5000,
                overrides: {offline_fraction: 0.5}}   # train.<table>-<cell>; the seed is added
        params: {}            # the cell's own params, merged after the table's
      erpv-rounds:
        train: {env: ..., method: erpv, steps: 2000, overrides: {save_training_state: true}}
        rounds: {count: 3, episodes: 2, steps: 500}   # rounds.<table>-<cell>-r1..r3, chained;
                              # the report reads the last round's agent and adds the rounds'
                              # teacher calls (metrics/rounds/<round>.json); steps-to thresholds
                              # read the run's curve alone, so a rounds cell has none
    teacher_eval: {episodes: 10}   # optional: params' `teacher_eval` for the teacher rows

The instrument beside the effect: with `teacher_eval`, each labelling teacher the cells use (cells
whose env, collection, label and policy-teacher params agree share one) gets one experiment,
`<table>-teacher-<cell>` (the first cell using it), that reproduces `teacher_eval@<env>`: the
teacher acting alone, asked every k-th agent step, beside uniform random actions (ERPv's "Only
VLMs" row). `queue` runs them with the cells, and the report adds their rows under the table.

Each leaf of a cell's params is one `-S ++key=value` of `dvc exp run` (DVC's Hydra overrides:
dicts are merged key by key, a list is replaced whole). An experiment is `done` when it succeeded
and its params hold every leaf the table gives it now; a successful one whose params differ is
`stale` (the table changed after it ran): `queue` runs it again and `report` leaves it out, saying
so. Experiments are those of the commit checked out (`dvc exp show`; `--rev` reads another's, and
repeated, several):
after a commit that changes no stage's code or data, requeued cells restore from the run cache
in seconds.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import io
import os
import re
import shlex
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import polars as pl
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from pipeline.core.errors import PipelineError, print_error
from pipeline.learn.curves import METRICS_SUBDIR, median_steps, parse_metric_tsv, steps_to
from pipeline.loops.knowledge import prompts_text, return_text, share_text
from pipeline.teach.labels.cost import read_label_cost
from pipeline.tools.experiments import SeedSummary, welch_p

# the params sections `teacher_eval@<env>` reads besides its own: the env, its rollouts (whose
# frames it answers first from the label cache), the labelling teacher, a policy teacher's training
TEACHER_SECTIONS = ("env", "collect", "label", "policy_teachers")
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]*$")  # a git ref and a Hydra key segment
KEY = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_-]*$")  # a segment of a params path
STATES = ("done", "queued", "running", "partial", "failed", "stale", "missing")
# where `queue` tells its workers to keep the runs' resume states (VLMRL_RESUME_ROOT), outside
# the work tree and DVC's per-experiment workspaces: a run killed with its machine goes on there
DEFAULT_RESUME_ROOT = Path("~/.cache/vlmrl/resume")


class SweepError(PipelineError, ValueError):
    pass


class Rounds(BaseModel):
    """Labelling rounds that go on from the cell's run (`rounds.<run>-r<k>` of params.yaml, stage
    `round@`): the experiment then evaluates the last round's agent."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    count: int = Field(ge=1, description="rounds after the run: r1 .. r<count>")
    episodes: int = Field(ge=1, description="episodes the previous agent collects each round")
    steps: int = Field(ge=1, description="agent steps of each round's training")
    explore: Literal["sample", "deterministic"] = Field(
        default="sample", description="rounds.<name>.explore of every round"
    )


class Cell(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    train: dict[str, Any] = Field(
        description="the cell's run, `train.<table>-<cell>` of params.yaml (env, method, steps, "
        "overrides); the seed is set per experiment"
    )
    params: dict[str, Any] = Field(
        default_factory=dict, description="params merged over params.yaml after the table's"
    )
    rounds: Rounds | None = Field(
        default=None,
        description="labelling rounds after the run (its overrides need `save_training_state: "
        "true`); the experiment's metric is then the last round's agent's",
    )

    @field_validator("train")
    @classmethod
    def _run(cls, train: dict[str, Any]) -> dict[str, Any]:
        missing = [k for k in ("env", "method", "steps") if k not in train]
        if missing:
            raise ValueError(f"train needs {', '.join(missing)}")
        if "seed" in train:
            raise ValueError("train.seed is set per experiment from the table's `seeds`")
        return train


class Preregistration(BaseModel):
    """What a table tests, written before any seed runs (its commit is the date): the report
    computes exactly these comparisons, Holm-adjusted over the family."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    hypothesis: str = Field(description="the claim the table can refute, in words")
    primary: str = Field(description="the primary metric, in words")
    test: Literal["fisher", "mannwhitney"] = Field(
        description="`fisher`: Fisher's exact test on the seeds whose metric reaches `success`; "
        "`mannwhitney`: the Mann-Whitney U test on the per-seed metric"
    )
    success: float | None = Field(
        default=None, description="fisher: a seed succeeds when its metric is >= this"
    )
    alternative: Literal["greater", "two-sided"] = Field(
        default="greater", description="one-sided (the cell above the other) or two-sided"
    )
    alpha: float = Field(default=0.05, gt=0, lt=1, description="family-wise error rate (Holm)")
    comparisons: list[tuple[str, str]] = Field(
        min_length=1, description="(cell, against): the pre-registered family"
    )
    secondary: list[str] = Field(
        default_factory=list,
        description="secondary outcomes, in words (the report adds Mann-Whitney on the metric)",
    )

    @model_validator(mode="after")
    def _success_for_fisher(self) -> Preregistration:
        if self.test == "fisher" and self.success is None:
            raise ValueError("test fisher counts seeds that reach `success`: give success")
        return self


class Table(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    table: str = Field(description="the prefix of every experiment and run name")
    metric: str = Field(default="return_mean", description="a key of metrics/eval/<run>.json")
    control: str | None = Field(
        default=None, description="the cell every other cell is compared with (Welch's test)"
    )
    seeds: list[int] = Field(min_length=1, description="train.<run>.seed of each experiment")
    params: dict[str, Any] = Field(default_factory=dict, description="params of every cell")
    cells: dict[str, Cell] = Field(min_length=1)
    thresholds: list[float] = Field(
        default_factory=list,
        description="report: steps to each threshold, the first training step at which the mean "
        "of the last `window` values of `curve` reaches it (read from each experiment's curves)",
    )
    window: int = Field(default=5, ge=1, description="episodes of the moving mean (thresholds)")
    curve: str = Field(
        default="return",
        description="the curve the thresholds read: a metric of plots/train/<run> (`return`: the "
        "native return of each training episode; `eval_return`: the periodic evaluations)",
    )
    diagnostics: list[str] = Field(
        default_factory=list,
        description="report: curves of plots/train/<run> (e.g. `vpg/gate_open`, `alpha`), each "
        "shown per cell as the mean over seeds of each run's mean over the second half of its "
        "training; blank where a run does not log it",
    )
    teacher_eval: dict[str, Any] | None = Field(
        default=None,
        description="params' `teacher_eval` section of the table's teacher experiments (one per "
        "labelling teacher the cells use, reproducing `teacher_eval@<env>`); none without it",
    )
    preregistered: Preregistration | None = Field(
        default=None, description="the hypothesis, primary metric, test and alpha (report)"
    )

    @model_validator(mode="after")
    def _names(self) -> Table:
        for name in (self.table, *self.cells):
            if not NAME.match(name):
                raise ValueError(
                    f"{name!r}: table and cell names are letters, digits, '-' and '_' (they name "
                    "git refs and params keys)"
                )
        if len(set(self.seeds)) != len(self.seeds):
            raise ValueError(f"seeds repeat: {self.seeds}")
        if self.control is not None and self.control not in self.cells:
            raise ValueError(f"control {self.control!r} is not a cell: {sorted(self.cells)}")
        for cell in self.cells:
            _leaves(cell_params(self, cell, self.seeds[0]))  # every key a params path
        if self.preregistered is not None:
            for pair in self.preregistered.comparisons:
                unknown = [c for c in pair if c not in self.cells]
                if unknown:
                    raise ValueError(f"preregistered comparison {list(pair)}: {unknown} not cells")
        return self

    def run(self, cell: str) -> str:
        """The cell's train run: `train.<table>-<cell>`, stages `train@` / `evaluate@` it."""
        return f"{self.table}-{cell}"

    def experiment(self, cell: str, seed: int) -> str:
        return f"{self.table}-{cell}-s{seed}"

    def round_names(self, cell: str) -> list[str]:
        """The cell's labelling rounds, `<run>-r1` .. `<run>-r<count>` (none without rounds)."""
        rounds = self.cells[cell].rounds
        return [f"{self.run(cell)}-r{k}" for k in range(1, 1 + (rounds.count if rounds else 0))]

    def target(self, cell: str) -> str:
        """The stage an experiment reproduces: the evaluation of the cell's last agent."""
        names = self.round_names(cell)
        return f"evaluate_round@{names[-1]}" if names else f"evaluate@{self.run(cell)}"

    def metrics_file(self, cell: str) -> str:
        """That stage's metrics file, whose `metric` the report reads."""
        names = self.round_names(cell)
        if names:
            return f"metrics/eval/rounds/{names[-1]}.json"
        return f"metrics/eval/{self.run(cell)}.json"

    def teacher_groups(self) -> dict[str, tuple[str, ...]]:
        """The cells by the labelling teacher they share, keyed by the first cell of each: cells
        whose env and whose env, collect, label and policy_teachers params agree (what
        `teacher_eval@<env>` reads) share one. Empty without `teacher_eval`."""
        if self.teacher_eval is None:
            return {}
        first: dict[str, str] = {}
        groups: dict[str, tuple[str, ...]] = {}
        for cell, spec in self.cells.items():
            merged = _merge(self.params, spec.params)
            key = repr((spec.train["env"], [(s, _leaves(merged.get(s) or {}))
                                             for s in TEACHER_SECTIONS]))  # fmt: skip
            group = first.setdefault(key, cell)
            groups[group] = (*groups.get(group, ()), cell)
        return groups

    def teacher_groups_of(self, cells: Sequence[str] | None) -> list[str]:
        """The teacher groups that label one of `cells` (every group when None)."""
        return [group for group, members in self.teacher_groups().items()
                if cells is None or set(members) & set(cells)]  # fmt: skip

    def teacher_experiment(self, group: str) -> str:
        return f"{self.table}-teacher-{group}"

    def teacher_file(self, group: str) -> str:
        """`teacher_eval@<env>`'s output: the teacher's rows and random's."""
        return f"metrics/teacher/{self.cells[group].train['env']}.json"

    def label_file(self, group: str) -> str:
        """`label@<env>`'s output: the label table the group's cells read."""
        return f"data/labels/{self.cells[group].train['env']}.parquet"


def load_table(path: str | Path) -> Table:
    """The table file at `path`, checked; a bad file raises SweepError naming it and the field."""
    path = Path(path)
    try:
        raw = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise SweepError(f"{path}: {exc}") from exc
    try:
        return Table.model_validate(raw)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or '(top)'}: {e['msg']}" for e in exc.errors()
        )
        raise SweepError(f"{path}: {problems}") from exc


# ---- params as DVC's overrides -------------------------------------------------------------------


def _merge(base: dict[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, Mapping) and value and isinstance(out.get(key), Mapping):
            out[key] = _merge(dict(out[key]), value)
        else:
            out[key] = value
    return out


def cell_params(table: Table, cell: str, seed: int) -> dict[str, Any]:
    """What the experiment (cell, seed) sets in params.yaml: the table's params, the cell's, its
    train run with the seed, and its labelling rounds, each naming the agent and data it follows
    (round k's collection seed: 1000 * seed + k)."""
    spec = table.cells[cell]
    name = table.run(cell)
    run: dict[str, Any] = {"train": {name: {**spec.train, "seed": seed}}}
    if spec.rounds is not None:
        from pipeline.core.config import round_inputs

        names = table.round_names(cell)
        run["rounds"] = {}
        for k, r in enumerate(names, start=1):
            agent, data = round_inputs(name, spec.train["env"], names[k - 2] if k > 1 else None)
            run["rounds"][r] = {
                "run": name, "env": spec.train["env"], "method": spec.train["method"], "round": k,
                "previous_agent": agent, "previous_data": data,
                "episodes": spec.rounds.episodes, "steps": spec.rounds.steps,
                "seed": 1000 * seed + k, "explore": spec.rounds.explore,
            }  # fmt: skip
    return _merge(_merge(table.params, spec.params), run)


def teacher_params(table: Table, group: str) -> dict[str, Any]:
    """What a teacher experiment sets in params.yaml: the table's and its first cell's params
    (no train run) and the table's `teacher_eval` section."""
    merged = _merge(table.params, table.cells[group].params)
    return _merge(merged, {"teacher_eval": table.teacher_eval or {}})


def _leaves(params: Mapping[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    """(dotted path, value) of every leaf: a non-empty dict is walked, anything else is a leaf."""
    out = []
    for key, value in params.items():
        if not isinstance(key, str) or not KEY.match(key):
            raise SweepError(
                f"params key {prefix}{key!r}: a params path takes letters, digits, '-' and '_'"
            )
        if isinstance(value, Mapping) and value:
            out += _leaves(value, f"{prefix}{key}.")
        else:
            out.append((f"{prefix}{key}", value))
    return out


def hydra_value(value: Any) -> str:
    """`value` in Hydra's override grammar (what `dvc exp run -S` parses), with its YAML type:
    strings always quoted, so '1.0' or 'null' stay strings."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        if isinstance(value, float) and not np.isfinite(value):
            raise SweepError(f"{value}: params hold finite numbers only")
        text = repr(value)
        mantissa, e, exponent = text.partition("e")
        # 1e-05 would be read back as a string (YAML 1.1 floats need a dot): 1.0e-05
        return f"{mantissa}.0e{exponent}" if e and "." not in mantissa else text
    if isinstance(value, str):
        # Hydra's quoted string: a quote is escaped, and so is every backslash before a quote
        # or the closing quote; other backslashes are taken as they are
        escaped = re.sub(r'(\\*)"', lambda m: m.group(1) * 2 + '\\"', value)
        return '"' + re.sub(r"(\\+)$", lambda m: m.group(1) * 2, escaped) + '"'
    if isinstance(value, list | tuple):
        return "[" + ", ".join(hydra_value(v) for v in value) + "]"
    if isinstance(value, Mapping):
        for key in value:
            if not isinstance(key, str) or not KEY.match(key):
                raise SweepError(f"{key!r}: a dict key takes letters, digits, '-' and '_'")
        return "{" + ", ".join(f"{k}: {hydra_value(v)}" for k, v in value.items()) + "}"
    raise SweepError(f"{value!r}: a params value is a number, string, bool, null, list or dict")


def overrides(table: Table, cell: str, seed: int) -> list[str]:
    """The experiment's `-S` values: `++path=value` per leaf (adds a key or replaces its value)."""
    return _sets(cell_params(table, cell, seed))


def _sets(params: Mapping[str, Any]) -> list[str]:
    return [f"++{k}={hydra_value(v)}" for k, v in _leaves(params)]


def _exp_run(
    name: str, params: Mapping[str, Any], target: str, queue: bool, pull: bool
) -> list[str]:
    sets = [arg for o in _sets(params) for arg in ("-S", o)]
    return [
        "dvc", "exp", "run", *(["--queue"] if queue else []), *(["--pull"] if pull else []),
        "-n", name, *sets, target,
    ]  # fmt: skip


def exp_command(
    table: Table, cell: str, seed: int, queue: bool = False, pull: bool = False
) -> list[str]:
    """`dvc exp run` of one (cell, seed): only its evaluate stage and what that stage needs
    (`pull`: first from the DVC remote, where another machine pushed it)."""
    params = cell_params(table, cell, seed)
    return _exp_run(table.experiment(cell, seed), params, table.target(cell), queue, pull)


def teacher_command(table: Table, group: str, queue: bool = False, pull: bool = False) -> list[str]:
    """`dvc exp run` of one teacher experiment: `teacher_eval@<env>` and what it needs."""
    target = f"teacher_eval@{table.cells[group].train['env']}"
    params = teacher_params(table, group)
    return _exp_run(table.teacher_experiment(group), params, target, queue, pull)


def job_line(command: list[str], remote: str, clone: str | None, rev: str) -> str:
    """One experiment (its `dvc exp run ... -n NAME`, from exp_command or teacher_command, with
    `pull` where it runs in a clone) as one shell job for any scheduler (Slurm, Ray Jobs, GNU
    parallel): with `clone`, a fresh clone of that git URL at `rev`; then the experiment (what
    the DVC remote holds is pulled, not rebuilt), and `dvc exp push` of it to the git remote
    `remote` (its outputs go to the default DVC remote). `dvc exp pull <remote> <name>` brings
    it back."""
    name = command[command.index("-n") + 1]
    steps = []
    if clone is not None:
        steps += [
            shlex.join(["git", "clone", "-q", clone, name]),
            shlex.join(["cd", name]),
            shlex.join(["git", "checkout", "-q", rev]),
        ]
    steps.append(shlex.join(command))
    steps.append(shlex.join(["dvc", "exp", "push", remote, name]))
    return " && ".join(steps)


# ---- what DVC holds ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Status:
    cell: str  # a teacher experiment's: the first cell of its group
    seed: int | None  # None: a teacher experiment
    name: str
    state: str  # one of STATES
    rev: str | None = None
    value: float | None = None  # the metric, when done
    why: str = ""  # what makes it stale or failed
    steps_to: dict[str, int | None] | None = None  # threshold -> first step (report, when done)
    diagnostics: dict[str, float | None] | None = None  # curve -> second-half mean (report)
    round_calls: int | None = None  # the teacher calls of a rounds cell's rounds (when done)
    teacher: dict[str, Any] | None = None  # a teacher experiment's metrics file (report, done)
    labels: dict[str, Any] | None = None  # what its label table paid (`label_cost`; report, done)
    kept: bool = False  # done by the table's committed results (`--results`), not by DVC


def _same(actual: Any, expected: Any) -> bool:
    """A `dvc exp show` value against the table's: numbers compare as floats (DVC's flat rows
    give 5000 as 5000.0, and 1e-05 as '1e-05'; a nested bool can come as 'True'), a missing
    key reads 'None', a list comes as its Python repr ("['env', 'kinematic']")."""
    if expected is None:
        return actual in (None, "None")
    if isinstance(expected, bool) and isinstance(actual, str):
        return actual.lower() == str(expected).lower()
    if isinstance(expected, bool) or isinstance(actual, bool):
        return actual == expected
    if isinstance(expected, int | float) and isinstance(actual, int | float | str):
        try:  # DVC writes 1e-05, which YAML 1.1 (and so `dvc exp show`) reads as a string
            return float(actual) == float(expected)
        except ValueError:
            return False
    if isinstance(expected, list | tuple) and isinstance(actual, str):
        try:
            actual = ast.literal_eval(actual)
        except (ValueError, SyntaxError):
            return False
    if isinstance(expected, list | tuple) and isinstance(actual, list | tuple):
        return len(actual) == len(expected) and all(map(_same, actual, expected))
    if isinstance(expected, Mapping) and not expected:
        return actual in ({}, None, "None")
    return actual == expected


def _column(row: Mapping[str, Any], path: str, key: str) -> Any:
    """`path`'s `key` in a flat `dvc exp show` row: DVC prefixes a name with its file only where
    another file has it too (`metrics/teacher/E.json:teacher_id`), so a name that one file
    alone holds comes bare."""
    return row.get(f"{path}:{key}", row.get(key))


def exp_rows(repo: Path, rev: str | Sequence[str] | None = None) -> dict[str, dict[str, Any]]:
    """The experiments of the commit checked out (or of `rev`: one commit or several, as when a
    cell added later ran on a later commit), by name (dvc.api.exp_show's flat rows). A name held
    by two of the commits raises: which one the table means is not known."""
    import dvc.api
    from dvc.exceptions import DvcException

    try:
        rows = dvc.api.exp_show(repo=str(repo), revs=rev)
    except DvcException as exc:
        raise SweepError(f"{repo}: dvc exp show: {exc}") from exc
    out: dict[str, dict[str, Any]] = {}
    for row in rows:
        name = row.get("Experiment")
        if not name:
            continue
        if str(name) in out:
            where = f"on more than one of the commits {rev}" if rev else "twice on one commit"
            raise SweepError(
                f"{repo}: dvc exp show lists experiment {name} {where} (a queue worker taking it "
                "up lists it for a moment as queued and running): if it stays, remove one "
                "(dvc exp remove) or read one commit"
            )
        if row.get("State") == "Running" and orphaned(repo, str(row.get("rev"))):
            row = {**row, "State": ORPHANED}
        out[str(name)] = row
    return out


ORPHANED = "Orphaned"  # DVC says Running; the process it recorded is gone
ORPHANED_WHY = "its process died with its worker or machine: `queue` runs it again"


def orphaned(repo: Path, rev: str) -> bool:
    """Whether the experiment task `rev` (a queued stash commit) that DVC lists as running has
    lost its process: the pid DVC's task runner recorded (`.dvc/tmp/exps/run/<rev>/<rev>.json`)
    is not alive and no return code was written. A SIGKILLed worker, or a machine that stopped,
    leaves its task so; DVC keeps showing it as running."""
    import json

    for info in (repo / ".dvc" / "tmp" / "exps" / "run").glob(f"{rev}*/{rev}*.json"):
        try:
            proc = json.loads(info.read_text())
        except (OSError, ValueError):
            continue
        pid = proc.get("pid") if isinstance(proc, dict) else None
        if not isinstance(pid, int) or proc.get("returncode") is not None:
            continue
        return not _alive(pid)
    return False


def _alive(pid: int) -> bool:
    """Whether process `pid` runs: it exists and is not a zombie (a killed process whose parent
    died too waits for a reaper, which a container's init may be slow to be)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's: alive
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True  # no procfs: trust the signal
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


def settled_rows(
    repo: Path, rev: str | Sequence[str] | None = None, tries: int = 5, every_s: float = 10.0
) -> dict[str, dict[str, Any]]:
    """exp_rows, asked again (up to `tries` times, `every_s` apart) when `dvc exp show` meets a
    queue worker's temporary workspace half made or half gone, as it can while workers run."""
    for _ in range(tries - 1):
        try:
            return exp_rows(repo, rev)
        except SweepError as exc:
            print(f"{time.strftime('%H:%M:%S')} {exc} (trying again)", flush=True)
            time.sleep(every_s)
    return exp_rows(repo, rev)


def _unfinished(
    cell: str, seed: int | None, name: str, row: Mapping[str, Any], params: dict[str, Any]
) -> Status | None:
    """The experiment's status unless it succeeded with `params` (then None: its outputs decide)."""
    rev, state = str(row.get("rev")), row.get("State")
    if state in ("Queued", "Running"):
        return Status(cell, seed, name, state.lower(), rev)
    if state == ORPHANED:
        return Status(cell, seed, name, "failed", rev, why=ORPHANED_WHY)
    # no state: a committed experiment that no local queue ran (`dvc exp pull`)
    if state not in ("Success", None):
        return Status(cell, seed, name, "failed", rev,
                      why=f"state {state}: `dvc queue logs {name}` says why")  # fmt: skip
    differs = [f"{k}={row.get(k)!r} (table: {v!r})"
               for k, v in _leaves(params) if not _same(row.get(k), v)]  # fmt: skip
    return Status(cell, seed, name, "stale", rev, why="; ".join(differs)) if differs else None


def statuses(
    table: Table,
    rows: Mapping[str, Mapping[str, Any]],
    cells: Sequence[str] | None = None,
    seeds: Sequence[int] | None = None,
) -> list[Status]:
    """Every (cell, seed) of the table against the experiments `rows`."""
    out = []
    for cell in cells or table.cells:
        for seed in table.seeds if seeds is None else seeds:
            name = table.experiment(cell, seed)
            row = rows.get(name)
            if row is None:
                out.append(Status(cell, seed, name, "missing"))
                continue
            unfinished = _unfinished(cell, seed, name, row, cell_params(table, cell, seed))
            if unfinished is not None:
                out.append(unfinished)
                continue
            rev = str(row.get("rev"))
            column = f"{table.metrics_file(cell)}:{table.metric}"
            value = _column(row, table.metrics_file(cell), table.metric)
            if not isinstance(value, int | float) or isinstance(value, bool):
                out.append(Status(cell, seed, name, "failed", rev, why=f"no {column}"))
                continue
            calls = [_column(row, f"metrics/rounds/{r}.json", "costs.teacher_calls")
                     for r in table.round_names(cell)]  # fmt: skip
            known = bool(calls) and all(isinstance(c, int | float) for c in calls)
            out.append(Status(cell, seed, name, "done", rev, float(value),
                              round_calls=int(sum(calls)) if known else None))  # fmt: skip
    return out


def teacher_statuses(
    table: Table, rows: Mapping[str, Mapping[str, Any]], cells: Sequence[str] | None = None
) -> list[Status]:
    """Each teacher experiment whose group holds one of `cells` (default: every one) against the
    experiments `rows`: done once it succeeded with the params the table gives it now and wrote
    its teacher's id."""
    out = []
    for group in table.teacher_groups_of(cells):
        name = table.teacher_experiment(group)
        row = rows.get(name)
        if row is None:
            out.append(Status(group, None, name, "missing"))
            continue
        unfinished = _unfinished(group, None, name, row, teacher_params(table, group))
        if unfinished is not None:
            out.append(unfinished)
            continue
        rev = str(row.get("rev"))
        if not isinstance(_column(row, table.teacher_file(group), "teacher_id"), str):
            out.append(Status(group, None, name, "failed", rev,
                              why=f"no {table.teacher_file(group)}:teacher_id"))  # fmt: skip
        else:
            out.append(Status(group, None, name, "done", rev))
    return out


def all_statuses(
    table: Table,
    rows: Mapping[str, Mapping[str, Any]],
    cells: Sequence[str] | None = None,
    seeds: Sequence[int] | None = None,
) -> list[Status]:
    """The cells' experiments, then the teachers' (which have no seed: `seeds` leaves them in)."""
    return statuses(table, rows, cells, seeds) + teacher_statuses(table, rows, cells)


# ---- what outlives a machine: committed results and resume states ---------------------------------


def resume_root(path: str | Path | None = None) -> Path:
    """The resume states' directory: `path`, else $VLMRL_RESUME_ROOT, else DEFAULT_RESUME_ROOT;
    absolute (the workers run in other directories)."""
    from pipeline.learn.methods.base import RESUME_ROOT_ENV

    chosen = path or os.environ.get(RESUME_ROOT_ENV) or DEFAULT_RESUME_ROOT
    return Path(chosen).expanduser().resolve()


def resume_progress(table: Table, root: Path) -> dict[tuple[str, int], tuple[int, int | None]]:
    """(run, seed) -> (step reached, steps) of each resume state under `root` of the table's
    runs (`<root>/<run>/<fingerprint>/state.json`, pipeline.learn.methods.base.resume_for); a damaged
    one is skipped (the run starts over from it anyway)."""
    from pipeline.learn.agents.resume import ResumeStateError, read_header, read_plain

    out: dict[tuple[str, int], tuple[int, int | None]] = {}
    for cell in table.cells:
        for state in sorted((root / table.run(cell)).glob("*/state.json")):
            try:
                about = (read_header(state.parent) or {}).get("about") or {}
                plain = read_plain(state.parent) or {}
            except ResumeStateError:
                continue
            seed, step = about.get("seed"), plain.get("step")
            if isinstance(seed, int) and isinstance(step, int):
                key = (table.run(cell), seed)
                if step > out.get(key, (-1, None))[0]:
                    out[key] = (step, about.get("steps"))
    return out


def with_progress(
    table: Table, found: list[Status], progress: Mapping[tuple[str, int], tuple[int, int | None]]
) -> list[Status]:
    """`found` with each unfinished experiment's resume state: a running one says its step; one
    that no worker holds (missing, failed: its machine or worker stopped) is `partial`, and the
    next `queue` goes on from there."""
    out = []
    for f in found:
        at = progress.get((table.run(f.cell), f.seed)) if f.seed is not None else None
        if at is None or f.state in ("done", "stale", "queued"):
            out.append(f)
            continue
        where = f"at step {at[0]:,}" + (f" of {at[1]:,}" if at[1] else "") + " (resume state)"
        state = "running" if f.state == "running" else "partial"
        out.append(dataclasses.replace(f, state=state, why=where))
    return out


def committed(table: Table, results: Path) -> dict[str, Status]:
    """The experiments that `results/results.json` (a report committed to git) holds as done
    and that the table still gives the same params: by name. What a machine that stopped had
    finished is kept there and never run again."""
    import json

    path = results / "results.json"
    if not path.exists():
        return {}
    try:
        raw = json.loads(path.read_text())
        old = Table.model_validate(raw["spec"])
        experiments = [Status(**e) for e in raw["experiments"]]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise SweepError(f"{path}: not a `vlmrl-sweep report` results file ({exc})") from exc
    groups = table.teacher_groups()
    out = {}
    for e in experiments:
        if e.state != "done" or e.cell not in table.cells or e.cell not in old.cells:
            continue
        if e.seed is None:
            same = (
                e.cell in groups
                and e.cell in old.teacher_groups()
                and (teacher_params(old, e.cell) == teacher_params(table, e.cell))
            )
        else:
            same = e.seed in table.seeds and (
                cell_params(old, e.cell, e.seed) == cell_params(table, e.cell, e.seed)
            )
        if same and (e.seed is None or old.metric == table.metric):
            out[e.name] = dataclasses.replace(e, kept=True)
    return out


def with_committed(found: list[Status], kept: Mapping[str, Status]) -> list[Status]:
    """`found` with each experiment that DVC does not hold as done replaced by its committed
    result, where there is one."""
    return [kept.get(f.name, f) if f.state != "done" else f for f in found]


def count_line(found: Iterable[Status]) -> str:
    """How many experiments are in each state, e.g. `3 done, 2 queued`."""
    states = [f.state for f in found]
    return ", ".join(f"{states.count(s)} {s}" for s in STATES if s in states)


def format_status(table: Table, found: list[Status]) -> str:
    lines = [f"{f.name:48s} {f.state:8s} "
             + (f"{table.metric} {f.value:.4g}" if f.value is not None else f.why)
             + (" (committed)" if f.kept else "")
             for f in found]  # fmt: skip
    lines.append(count_line(found))
    return "\n".join(lines)


# ---- queue and run -------------------------------------------------------------------------------


def tool_env(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """`base` (the environment) with this interpreter's directory first on PATH: `dvc` and the
    stages' `python` are the project's own, whether or not its environment was activated (a
    `.venv/bin/vlmrl-sweep` run from a plain shell would otherwise find no `dvc`, or start queue
    workers whose `python` lacks the project's dependencies)."""
    env = dict(os.environ if base is None else base)
    bin_dir = str(Path(sys.executable).parent)
    path = env.get("PATH", "")
    if path.split(os.pathsep)[0] != bin_dir:
        env["PATH"] = os.pathsep.join([bin_dir, *([path] if path else [])])
    return env


def _run(args: list[str], repo: Path) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(args, cwd=repo, capture_output=True, text=True, env=tool_env())
    if done.returncode != 0:
        raise SweepError(f"{shlex.join(args)} (in {repo}) exited {done.returncode}:\n"
                         f"{(done.stderr or done.stdout).strip()}")  # fmt: skip
    return done


def queue(
    table: Table,
    repo: Path,
    cells: Sequence[str] | None = None,
    seeds: Sequence[int] | None = None,
    force: bool = False,
    kept: Mapping[str, Status] | None = None,
) -> list[Status]:
    """Queue every (cell, seed) that is not done (`force`: done ones too), queued or running;
    a failed or stale experiment of that name is replaced; the teachers' experiments too. One
    that `kept` (the committed results) holds is done. Returns what was queued."""
    queued = []
    found = with_committed(all_statuses(table, settled_rows(repo), cells, seeds), kept or {})
    for status in found:
        if status.state in ("queued", "running") or (status.state == "done" and not force):
            continue
        if status.kept:  # --force: DVC has no experiment of that name to replace
            status = dataclasses.replace(status, state="missing")
        if status.why == ORPHANED_WHY:  # DVC's task of a dead process: kill, then remove it
            _run(["dvc", "queue", "kill", str(status.rev)], repo)
            _run(["dvc", "queue", "remove", str(status.rev)], repo)
        elif status.state != "missing":
            _run(["dvc", "exp", "remove", status.name], repo)
        if status.seed is None:
            _run(teacher_command(table, status.cell, queue=True), repo)
        else:
            _run(exp_command(table, status.cell, status.seed, queue=True), repo)
        queued.append(status)
    return queued


POLL_SHARE = 0.2  # wait: at most this share of one core goes to asking `dvc exp show`


@dataclass(frozen=True)
class Workers:
    """How `queue` starts DVC's queue workers: background work that leaves the machine usable.
    Each worker runs one experiment at a time at `nice` (low priority), with `threads` threads
    for numpy / torch's thread pools (a table's cells set their own `threads` param as well), and
    keeps its runs' resume states under `resume_root` (VLMRL_RESUME_ROOT), where a run killed
    with its worker or its machine goes on from."""

    resume_root: Path
    nice: int = 10
    threads: int = 1

    def lower_priority(self) -> None:
        """In the child before it runs: niceness `nice` whatever the caller's (a poller run at
        nice 19 must not lend its workers a lower priority than its own)."""
        current = os.nice(0)
        if self.nice > current:
            os.nice(self.nice - current)

    def env(self) -> dict[str, str]:
        from pipeline.learn.methods.base import RESUME_ROOT_ENV

        threads = str(self.threads)
        return {
            **tool_env(), RESUME_ROOT_ENV: str(self.resume_root),
            "OMP_NUM_THREADS": threads, "MKL_NUM_THREADS": threads,
            "OPENBLAS_NUM_THREADS": threads,
        }  # fmt: skip


def start_workers(repo: Path, jobs: int, workers: Workers | None = None) -> None:
    """`dvc queue start -j jobs`: starts the workers 1..jobs of `repo`'s queue that are not
    running (DVC skips the live ones), with `workers`' priority, threads and resume root."""
    workers = workers or Workers(resume_root())
    workers.resume_root.mkdir(parents=True, exist_ok=True)
    # not captured: the workers it starts keep its stdout open until they stop
    start = ["dvc", "queue", "start", "-j", str(jobs)]
    done = subprocess.run(
        start, cwd=repo, stdin=subprocess.DEVNULL, env=workers.env(),
        preexec_fn=workers.lower_priority,
    )  # fmt: skip
    if done.returncode:
        raise SweepError(f"{shlex.join(start)} (in {repo}) failed: see above")


@dataclass(frozen=True)
class Keep:
    """Where `wait` keeps the table's results as experiments land: `report --out results`'s
    files, rewritten each time one more is done, and with `commit`, committed (those files
    alone): a new machine keeps only what is committed."""

    results: Path
    commit: bool = False


def keep_results(table: Table, table_path: Path, found: list[Status], repo: Path,
                 keep: Keep) -> None:  # fmt: skip
    """Write (and commit) the report of `found` to `keep.results`. A failed commit (another
    git command holding the index) is said, not raised: the next experiment commits both."""
    found = read_teachers(table, read_curves(table, found, repo), repo)
    write_report(table, table_path, found, keep.results)
    if not keep.commit:
        return
    done = sum(f.state == "done" for f in found)
    message = f"Table {table.table}: {done} of {len(found)} experiments done (raw results)"
    for args in (["git", "add", "--", str(keep.results)],
                 ["git", "commit", "-q", "-m", message, "--", str(keep.results)]):  # fmt: skip
        run = subprocess.run(args, cwd=repo, capture_output=True, text=True)
        if run.returncode and "nothing to commit" not in run.stdout + run.stderr:
            print(f"{time.strftime('%H:%M:%S')} {shlex.join(args)}: "
                  f"{(run.stderr or run.stdout).strip()[:300]}", flush=True)  # fmt: skip
            return


def wait(
    table: Table,
    repo: Path,
    every_s: float = 10.0,
    jobs: int = 0,
    *,
    rev: str | None = None,
    workers: Workers | None = None,
    kept: Mapping[str, Status] | None = None,
    keep: Keep | None = None,
    table_path: Path | None = None,
) -> list[Status]:
    """Until no experiment of the table is queued or running: one line each time the counts
    change. Driven by the queue's own progress (no time limit): a stuck worker shows as a count
    that stops moving, and `dvc queue status` / `dvc queue logs NAME` say why.

    - `rev`: the commit the experiments were queued on (default: the one checked out), so that
      commits made while they run (`keep`) do not hide them.
    - `dvc exp show` takes longer the more experiments a commit holds (3 s for 162 on an idle
      2-core machine, more while the workers hold the cores), so the pause between two asks is
      at least every_s and at least (1 / POLL_SHARE - 1) times the last ask: the workers keep
      the cores.
    - With `jobs`, a worker that died is started again: a queue worker can die on a half-written
      message of DVC's file broker (celery's "Unrecoverable error: JSONDecodeError",
      treeverse/dvc#7903): it finishes the experiment it holds, stops, and leaves the rest to
      the others. When two asks in a row find experiments queued and fewer than `jobs` running,
      `start_workers` tops the workers up.
    - With `keep`, each time one more experiment is done, the report is written there (and
      committed): each finished cell's raw results as it lands."""
    last = None
    short = 0  # asks in a row with experiments queued and fewer than `jobs` running
    done_before = None
    while True:
        started = time.monotonic()
        found = with_committed(
            all_statuses(table, settled_rows(repo, rev, every_s=every_s)), kept or {}
        )
        asked_s = time.monotonic() - started
        line = count_line(found)
        if line != last:
            print(f"{time.strftime('%H:%M:%S')} {table.table}: {line}", flush=True)
            last = line
        states = [f.state for f in found]
        if keep is not None and table_path is not None:
            if done_before is not None and states.count("done") > done_before:
                keep_results(table, table_path, found, repo, keep)
            done_before = states.count("done")
        if "queued" not in states and "running" not in states:
            return found
        short = short + 1 if jobs and "queued" in states and states.count("running") < jobs else 0
        if short >= 2:
            print(f"{time.strftime('%H:%M:%S')} {table.table}: fewer than {jobs} running with "
                  "experiments queued: starting the missing workers", flush=True)  # fmt: skip
            start_workers(repo, jobs, workers)
            short = 0
        time.sleep(max(every_s, asked_s * (1 / POLL_SHARE - 1)))


def check_table(table: Table, params_path: str | Path) -> list[str]:
    """Every cell's params (the first seed's) merged over `params_path` as `dvc exp run -S` would,
    through the DVC gate's checks (parse_params, the method table, the policy-teacher rule): one
    line per cell and problem, before hours of queued experiments find it one by one."""
    from pipeline.core.config import ConfigError, parse_params
    from pipeline.learn.methods.table import check_params

    base = yaml.safe_load(Path(params_path).read_text())
    problems = []
    runs = [(f"cell {cell}", cell_params(table, cell, table.seeds[0])) for cell in table.cells]
    runs += [(f"teacher experiment {table.teacher_experiment(group)}", teacher_params(table, group))
             for group in table.teacher_groups()]  # fmt: skip
    for what, params in runs:
        try:
            check_params(parse_params(_merge(base, params), source=f"{params_path} + {what}"))
        except ConfigError as exc:
            problems.append(f"{what}: {exc}")
    return problems


# ---- the report ----------------------------------------------------------------------------------


def summaries(table: Table, found: Iterable[Status]) -> dict[str, SeedSummary]:
    """Each cell's done experiments as a SeedSummary (one value per seed)."""
    out = {}
    for cell in table.cells:
        done = [(f, f.value) for f in found if f.cell == cell and f.value is not None]
        if done:  # statuses gives a value to done experiments alone
            out[cell] = SeedSummary(
                (("cell", cell),), table.run(cell), tuple(v for _, v in done),
                tuple(f.seed for f, _ in done), tuple(f.name for f, _ in done),
            )  # fmt: skip
    return out


def _curve_path(table: Table, cell: str, name: str) -> str:
    return f"plots/train/{table.run(cell)}/{METRICS_SUBDIR}/{name}.tsv"


def second_half_mean(curve: list[tuple[int, float]], steps: int) -> float | None:
    """The mean of a run's logged values after half of its `steps` (None if none was logged)."""
    late = [v for step, v in curve if step > steps / 2]
    return float(np.mean(late)) if late else None


def read_curves(table: Table, found: list[Status], repo: Path) -> list[Status]:
    """`found` with each done experiment's steps to the table's thresholds and its diagnostics,
    from its curves as DVC stored them (one DVCFileSystem at the experiment's revision: plots
    outputs are cached, so a pulled experiment needs `dvc exp pull` with its cache)."""
    import dataclasses

    from dvc.api import DVCFileSystem
    from dvc.exceptions import DvcException

    if not table.thresholds and not table.diagnostics:
        return found
    out = []
    for f in found:
        if (f.state != "done" or f.seed is None or f.kept
                or table.cells[f.cell].rounds is not None):  # fmt: skip
            # a rounds cell's curve goes on in plots/rounds: no thresholds; a committed
            # result holds what its report read
            out.append(f)
            continue
        path = ""
        try:
            fs = DVCFileSystem(str(repo), rev=f.rev)
            reached = None
            if table.thresholds:
                path = _curve_path(table, f.cell, table.curve)
                curve = parse_metric_tsv(fs.read_text(path), table.curve)
                reached = {f"{t:g}": steps_to(curve, t, table.window) for t in table.thresholds}
            late: dict[str, float | None] = {}
            for name in table.diagnostics:
                path = _curve_path(table, f.cell, name)
                late[name] = (
                    second_half_mean(parse_metric_tsv(fs.read_text(path), name),
                                     int(table.cells[f.cell].train["steps"]))
                    if fs.exists(path) else None
                )  # fmt: skip
        except (OSError, KeyError, ValueError, DvcException) as exc:
            raise SweepError(
                f"{f.name}: cannot read {path or 'its curves'} at {f.rev}: {exc}"
            ) from exc
        out.append(dataclasses.replace(
            f, steps_to=reached, diagnostics=late if table.diagnostics else None
        ))  # fmt: skip
    return out


def read_teachers(table: Table, found: list[Status], repo: Path) -> list[Status]:
    """`found` with each done teacher experiment's `metrics/teacher/<env>.json` (its rows are a
    list, which `dvc exp show` leaves out) and what its label table paid (`label_cost`), read
    through one DVCFileSystem at the experiment's revision (the label table is a cached output:
    a pulled experiment needs `dvc exp pull` with its cache)."""
    import dataclasses
    import json

    from dvc.api import DVCFileSystem
    from dvc.exceptions import DvcException

    out = []
    for f in found:
        if f.state != "done" or f.seed is not None or f.kept:
            out.append(f)
            continue
        path = table.teacher_file(f.cell)
        try:
            fs = DVCFileSystem(str(repo), rev=f.rev)
            teacher = json.loads(fs.read_text(path))
            path = table.label_file(f.cell)
            with fs.open(path, "rb") as handle:
                labels = read_label_cost(handle)
        except (OSError, ValueError, pl.exceptions.PolarsError, DvcException) as exc:
            raise SweepError(f"{f.name}: cannot read {path} at {f.rev}: {exc}") from exc
        out.append(dataclasses.replace(f, teacher=teacher, labels=labels))
    return out


def format_diagnostics(table: Table, found: list[Status]) -> list[str]:
    """The table's diagnostics per cell: mean +- std over seeds (ddof 1) of each run's mean over
    the second half of its training."""
    if not table.diagnostics or not any(f.diagnostics for f in found):
        return []
    lines = [
        "",
        "Diagnostics: per run, the mean of the logged values after half of its training steps; "
        "per cell, mean +- std over seeds (ddof 1), [seeds]:",
        "",
        "| cell | " + " | ".join(table.diagnostics) + " |",
        "|---|" + "---|" * len(table.diagnostics),
    ]
    for cell in table.cells:
        runs = [f.diagnostics for f in found if f.cell == cell and f.diagnostics]
        row = f"| {cell} | "
        for name in table.diagnostics:
            values = [r[name] for r in runs if r.get(name) is not None]
            std = f" +- {np.std(values, ddof=1):.3g}" if len(values) > 1 else ""
            row += f"{np.mean(values):.3g}{std} [{len(values)}] | " if values else "| "
        lines.append(row.rstrip())
    return lines


def format_teachers(table: Table, found: list[Status]) -> list[str]:
    """The teacher experiments' rows: each teacher acting alone, per k, beside random, and what
    its labels of the cells' dataset paid."""
    read = [f for f in found if f.seed is None and f.teacher is not None]
    if not read:
        return []
    ks = sorted({r["policy"] for f in read for r in f.teacher["teacher_rows"]},
                key=lambda p: int(p.rpartition("=")[2]))  # fmt: skip
    groups = table.teacher_groups()
    judge = any(f.labels is not None and "reasonable" in f.labels for f in read)
    lines = [
        "Teachers acting alone (`teacher_eval@<env>`: the labelling teacher as the policy, "
        "asked every k-th agent step and its answer held in between; uniform random actions on "
        "the same episode seeds; return mean +- std over episodes, ddof 1; beside it the cells "
        "whose data it labels, including those whose method reads no labels), and what the "
        "teacher's labels of the cells' dataset cost (`label@<env>`: prompts by task, i.e. "
        "queried frames x tasks, what a fresh build pays; the share of answers that parsed"
        + ("; the share of judge rows judged reasonable: the selective pool" if judge else "")
        + "):",
        "",
        "| cells on its data | teacher | episodes | "
        + "".join(f"{k} | " for k in ks)
        + "random | label prompts | parsed |"
        + (" judged reasonable |" if judge else ""),
        "|---|---|---|" + "---|" * len(ks) + "---|---|---|" + ("---|" if judge else ""),
    ]
    for f in read:
        rows = {r["policy"]: r for r in f.teacher["teacher_rows"]}
        lines.append(
            f"| {', '.join(groups[f.cell])} | `{f.teacher['teacher_id']}` | "
            f"{f.teacher['episodes']} | "
            + "".join(f"{return_text(rows[k]) if k in rows else ''} | " for k in ks)
            + f"{return_text(f.teacher['random'])} | {_label_cells(f.labels)} |"
            + (f" {share_text((f.labels or {}).get('reasonable'))} |" if judge else "")
        )
    return ["", *lines]


def _label_cells(labels: Mapping[str, Any] | None) -> str:
    """`label_cost` as two table cells: prompts by task, parsed share."""
    if labels is None:
        return " | "
    return f"{prompts_text(labels)} | {share_text(labels['parsed'])}"


def _steps_cell(found: list[Status], cell: str, threshold: str) -> str:
    """`median [reached/n]` of a cell's steps to `threshold`, "not reached" counted as +inf."""
    values = [f.steps_to[threshold] for f in found
              if f.cell == cell and f.state == "done" and f.steps_to is not None]  # fmt: skip
    if not values:
        return ""
    median = median_steps(values)
    reached = sum(v is not None for v in values)
    return f"{'never' if median is None else f'{median:,}'} [{reached}/{len(values)}]"


def format_preregistered(table: Table, cells: Mapping[str, SeedSummary]) -> list[str]:
    """The pre-registered family: each comparison's test, raw and Holm-adjusted p, and the
    decision at alpha; then Mann-Whitney on the metric for each pair (secondary, Holm too)."""
    from pipeline.tools.experiments import fisher_p, holm, mann_whitney_p

    pre = table.preregistered
    if pre is None:
        return []
    rows, primary, secondary = [], [], []
    for cell, against in pre.comparisons:
        a, b = cells.get(cell), cells.get(against)
        x = list(a.per_seed().values()) if a else []
        y = list(b.per_seed().values()) if b else []
        if pre.test == "fisher" and x and y:
            k = (sum(v >= pre.success for v in x), len(x))
            m = (sum(v >= pre.success for v in y), len(y))
            primary.append(fisher_p(k, m, pre.alternative))
            shown = f"{k[0]}/{k[1]} vs {m[0]}/{m[1]}"
        else:
            primary.append(mann_whitney_p(x, y, pre.alternative) if x and y else None)
            shown = f"n {len(x)} vs {len(y)}"
        secondary.append(mann_whitney_p(x, y, pre.alternative) if x and y else None)
        rows.append((cell, against, shown, min(len(x), len(y))))
    adjusted, adjusted_mw = holm(primary), holm(secondary)
    what = (f"seeds with {table.metric} >= {pre.success:g}, Fisher's exact test"
            if pre.test == "fisher" else f"{table.metric}, Mann-Whitney U")  # fmt: skip
    lines = [
        "",
        f"Pre-registered ({pre.alternative}, alpha {pre.alpha:g}, Holm over "
        f"{len(pre.comparisons)}): {pre.hypothesis}",
        f"Primary: {pre.primary} ({what}).",
        "",
        "| cell | against | primary | p | Holm p | at alpha | Mann-Whitney p (Holm) |",
        "|---|---|---|---|---|---|---|",
    ]
    for (cell, against, shown, n), p, q, mw, mwq in zip(
        rows, primary, adjusted, secondary, adjusted_mw, strict=True
    ):
        decision = (
            "" if q is None else ("detected" if q <= pre.alpha else f"not detected at n = {n}")
        )
        lines.append(
            f"| {cell} | {against} | {shown} | {_p(p)} | {_p(q)} | {decision} | "
            f"{_p(mw)} ({_p(mwq)}) |"
        )
    if pre.secondary:
        lines.append("Secondary: " + "; ".join(pre.secondary) + ".")
    return lines


def _p(p: float | None) -> str:
    return "" if p is None else f"{p:.2g}"


def format_report(table: Table, found: list[Status]) -> str:
    """The table as markdown: n, mean +- std (ddof 1), Welch p against the control, steps to
    each threshold (when read), per seed."""
    cells = summaries(table, found)
    control = cells.get(table.control) if table.control else None
    steps = [f"{t:g}" for t in table.thresholds] if any(f.steps_to for f in found) else []
    rounds = any(c.rounds is not None for c in table.cells.values())
    lines = [
        f"| cell | n | {table.metric}: mean +- std (ddof 1) | p vs {table.control or '-'} | "
        + "".join(f"steps to {t} | " for t in steps)
        + ("round teacher calls (mean) | " if rounds else "")
        + "per seed |",
        "|---|---|---|---|" + "---|" * (len(steps) + rounds) + "---|",
    ]
    for cell in table.cells:
        s = cells.get(cell)
        if s is None:
            lines.append(f"| {cell} | 0 | | | " + "| " * (len(steps) + rounds) + "|")
            continue
        std = f"{s.std:.1f}" if s.n > 1 else "n/a"
        p = None if control is None or cell == table.control else welch_p(s, control)
        seeds = ", ".join(f"{seed}: {v:.1f}" for seed, v in sorted(s.per_seed().items()))
        reach = "".join(f"{_steps_cell(found, cell, t)} | " for t in steps)
        if rounds:
            calls = [f.round_calls for f in found if f.cell == cell and f.round_calls is not None]
            reach += f"{np.mean(calls):.0f} | " if calls else "0 | "
        lines.append(f"| {cell} | {s.n} | {s.mean:.1f} +- {std} | "
                     f"{'' if p is None else f'{p:.2g}'} | {reach}{seeds} |")  # fmt: skip
    lines += format_preregistered(table, cells)
    lines += format_diagnostics(table, found)
    lines += format_teachers(table, found)
    left = [f for f in found if f.state != "done"]
    if left:
        lines.append("")
        lines.append("Not in the table: " + "; ".join(f"{f.name} {f.state}"
                                                      + (f" ({f.why})" if f.why else "")
                                                      for f in left))  # fmt: skip
    lines.append("")
    lines.append("p: Welch's two-sided t-test (unequal variances) over per-seed values.")
    if steps:
        lines.append(
            f"Steps to T: the first training step at which the mean of the last {table.window} "
            f"`{table.curve}` values reaches T; the median over seeds, a seed that never reaches "
            "it counted as infinite, [seeds that reach it / seeds]."
        )
    return "\n".join(lines)


def plot_cells(table: Table, found: list[Status], path: Path) -> None:
    """Each cell's per-seed values (dots) with the mean and +- 1 std (ddof 1) over seeds."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from pipeline.core.io import atomic_write_bytes

    cells = summaries(table, found)
    names = [c for c in table.cells if c in cells]
    fig, ax = plt.subplots(figsize=(max(4.0, 0.9 * len(names) + 1.5), 4.0), dpi=120)
    for x, cell in enumerate(names):
        s = cells[cell]
        values = list(s.per_seed().values())
        ax.scatter([x] * len(values), values, color="C0", alpha=0.6, s=14)
        ax.errorbar([x + 0.15], [s.mean], yerr=[0.0 if s.n < 2 else s.std], fmt="o",
                    color="black", capsize=4)  # fmt: skip
    ax.set_xticks(range(len(names)), names, rotation=30, ha="right", fontsize=8)
    ax.set_ylabel(table.metric)
    ax.set_title(f"{table.table}: seeds (dots), mean +- 1 std (ddof 1)", fontsize=10)
    ax.grid(alpha=0.3, axis="y")
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    plt.close(fig)
    atomic_write_bytes(path, buffer.getvalue())


def repo_path(path: Path) -> str:
    """`path` relative to the root of the git repository that holds it (where results files
    name it, so that they name no directory of the machine they were made on), else as given."""
    full = path.resolve()
    for root in full.parents:
        if (root / ".git").exists():
            return full.relative_to(root).as_posix()
    return str(path)


def write_report(table: Table, table_path: Path, found: list[Status], out: Path) -> str:
    """`out/table.md`, `out/<metric>.png` and `out/results.json` (every experiment of the table
    with its state, revision, seed and value, and the table file as read, by its path in its
    repository)."""
    from pipeline.core.io import atomic_write_bytes, atomic_write_json

    out.mkdir(parents=True, exist_ok=True)
    text = format_report(table, found)
    atomic_write_bytes(out / "table.md", (text + "\n").encode())
    plot_cells(table, found, out / f"{table.metric}.png")
    atomic_write_json(out / "results.json", {
        "table": repo_path(table_path),
        "spec": table.model_dump(mode="json"),
        "experiments": [vars(f) for f in found],
    })  # fmt: skip
    return text


# ---- command line --------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("command", choices=("check", "status", "queue", "report", "commands"))
    parser.add_argument("table", type=Path, help="the table's YAML file")
    parser.add_argument("--repo", type=Path, default=Path("."), help="the DVC repository")
    parser.add_argument("--cell", action="append", help="these cells only (repeatable)")
    parser.add_argument("--seed", type=int, action="append", help="these seeds only")
    parser.add_argument("--force", action="store_true", help="queue: done experiments too")
    parser.add_argument("--jobs", type=int, default=0, help="queue: start N queue workers")
    parser.add_argument("--wait", action="store_true", help="queue: until none is queued")
    parser.add_argument("--out", type=Path, help="report: directory of the table and figure")
    parser.add_argument(
        "--rev",
        action="append",
        help="status / report: the experiments of this commit (default: the one checked out), "
        "e.g. the commit they ran on when a later one changed only docs; repeatable, for a "
        "cell added on a later commit",
    )
    parser.add_argument(
        "--results",
        type=Path,
        help="status / queue / report: the table's committed results directory (a report's "
        "results.json): experiments done there count as done, and are never queued again; "
        "queue --wait rewrites it each time one more lands (default for report: --out)",
    )
    parser.add_argument(
        "--commit", action="store_true", help="queue --wait: git-commit --results as it changes"
    )
    parser.add_argument(
        "--resume-root",
        type=Path,
        help="status / queue: the runs' resume states (default: $VLMRL_RESUME_ROOT, else "
        f"{DEFAULT_RESUME_ROOT}); the workers keep them there",
    )
    parser.add_argument(
        "--nice", type=int, default=10, help="queue: the workers' niceness (default 10)"
    )
    parser.add_argument(
        "--threads", type=int, default=1, help="queue: each worker's BLAS/OpenMP threads (1)"
    )
    parser.add_argument("--push", metavar="REMOTE", help="commands: push each experiment there")
    parser.add_argument(
        "--clone", metavar="URL", help="commands: each job clones URL at this commit first"
    )
    args = parser.parse_args(argv)
    try:
        table = load_table(args.table)
        unknown = sorted(set(args.cell or ()) - set(table.cells))
        if unknown:
            raise SweepError(f"--cell {', '.join(unknown)}: not in {args.table}; its cells: "
                             f"{', '.join(table.cells)}")  # fmt: skip
        if args.command == "check":
            problems = check_table(table, args.repo / "params.yaml")
            for line in problems:
                print_error(line)
            if not problems:
                teachers = len(table.teacher_groups())
                print(f"{args.table}: {len(table.cells)} cells"
                      + (f" and {teachers} teacher experiment(s)" if teachers else "")
                      + f" pass check_params over {args.repo / 'params.yaml'}")  # fmt: skip
            return 2 if problems else 0
        if args.command == "commands":
            if args.clone and not args.push:
                raise SweepError("--clone needs --push REMOTE: the job's experiment must leave "
                                 "the clone")  # fmt: skip
            rev = _run(["git", "rev-parse", "HEAD"], args.repo).stdout.strip() if args.clone else ""
            pull = args.clone is not None
            commands = [exp_command(table, cell, seed, pull=pull)
                        for cell in args.cell or table.cells
                        for seed in args.seed or table.seeds]  # fmt: skip
            if not args.seed:  # a teacher experiment has no seed
                commands += [teacher_command(table, group, pull=pull)
                             for group in table.teacher_groups_of(args.cell)]  # fmt: skip
            for command in commands:
                print(job_line(command, args.push, args.clone, rev) if args.push
                      else shlex.join(command))  # fmt: skip
            return 0
        results = args.results or (args.out if args.command == "report" else None)
        kept = committed(table, results) if results is not None else {}
        root = resume_root(args.resume_root)
        if args.command == "queue":
            if args.commit and args.results is None:
                raise SweepError("--commit commits the --results directory: give --results DIR")
            workers = Workers(root, args.nice, args.threads)
            rev = _run(["git", "rev-parse", "HEAD"], args.repo).stdout.strip()
            queued = queue(table, args.repo, args.cell, args.seed, args.force, kept)
            names = ", ".join(s.name for s in queued) or "every one is done or queued"
            print(f"queued {len(queued)} experiment(s): {names}", flush=True)
            if args.jobs:
                start_workers(args.repo, args.jobs, workers)
            if args.wait:
                keep = Keep(args.results, args.commit) if args.results is not None else None
                wait(table, args.repo, jobs=args.jobs, rev=rev, workers=workers, kept=kept,
                     keep=keep, table_path=args.table)  # fmt: skip
            elif queued and not args.jobs:
                print("run them: dvc queue start -j N (then `vlmrl-sweep status`)")
            return 0
        found = all_statuses(table, settled_rows(args.repo, args.rev), args.cell, args.seed)
        found = with_committed(found, kept)
        if args.command == "status":
            found = with_progress(table, found, resume_progress(table, root))
            print(format_status(table, found))
            return 0
        found = read_teachers(table, read_curves(table, found, args.repo), args.repo)
        if args.out is None:
            print(format_report(table, found))
        else:
            print(write_report(table, args.table, found, args.out))
            print(f"\n{args.out}: table.md, {table.metric}.png, results.json")
        return 0
    except (SweepError, OSError) as exc:
        print_error(exc)
        return 2


if __name__ == "__main__":
    sys.exit(main())
