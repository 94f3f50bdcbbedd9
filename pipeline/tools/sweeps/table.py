"""A table file: its schema (cells, seeds, pre-registration), each (cell, seed) as params merged
over params.yaml and as the `dvc exp run` command that runs it, and the check that each cell
passes the DVC gate."""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from pipeline.core.errors import PipelineError
from pipeline.tools.sweeps.preregistration import Preregistration

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
    def run_checked(cls, train: dict[str, Any]) -> dict[str, Any]:
        missing = [k for k in ("env", "method", "steps") if k not in train]
        if missing:
            raise ValueError(f"train needs {', '.join(missing)}")
        if "seed" in train:
            raise ValueError("train.seed is set per experiment from the table's `seeds`")
        return train


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
            for family in self.preregistered.families():
                for pair in family.comparisons:
                    unknown = [c for c in pair if c not in self.cells]
                    if unknown:
                        raise ValueError(
                            f"preregistered comparison {list(pair)}: {unknown} not cells"
                        )
            for amendment in self.preregistered.amendments:
                unknown = [c for c in amendment.cells if c not in self.cells]
                if unknown:
                    raise ValueError(f"amendment cells {unknown} are not cells of the table")
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

    def trainings(self, cell: str) -> list[tuple[str, int]]:
        """The cell's run and then each of its labelling rounds, by name, with the training
        steps before each (a round's own steps count from 0)."""
        spec = self.cells[cell]
        out, before = [(self.run(cell), 0)], int(spec.train["steps"])
        if spec.rounds is not None:
            for name in self.round_names(cell):
                out.append((name, before))
                before += spec.rounds.steps
        return out

    def steps(self, cell: str) -> int:
        """A cell's training steps: its run's, and its rounds' when it has rounds."""
        spec = self.cells[cell]
        rounds = spec.rounds.count * spec.rounds.steps if spec.rounds is not None else 0
        return int(spec.train["steps"]) + rounds

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


def round_seed(seed: int, k: int) -> int:
    """The seed of round k (its collection and training) of the experiment of `seed`."""
    return 1000 * seed + k


def cell_params(table: Table, cell: str, seed: int) -> dict[str, Any]:
    """What the experiment (cell, seed) sets in params.yaml: the table's params, the cell's, its
    train run with the seed, and its labelling rounds, each naming the agent and data it follows
    (round k's seed: `round_seed`)."""
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
                "seed": round_seed(seed, k), "explore": spec.rounds.explore,
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
