"""What a method is (`Method`), what a run reads (`TrainInputs`) and returns (`TrainResult`).

A method is one module of this package with one `Method` subclass: its name, its params class
(the params.yaml section named after it), its checks of a run, how it trains an agent for a run
and how a saved agent comes back. After LeRobot's `configuration_<policy>.py` + `modeling_<policy>
.py` and DrQ-v2's `make_agent`; the table (pipeline.learn.methods.table) maps names to them.
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from pipeline.core.config import (
    ConfigError,
    Params,
    Section,
    TrainRun,
    merge_settings,
    validate_section,
)
from pipeline.core.errors import PipelineError
from pipeline.core.io import sha256_file
from pipeline.dataset.layout import dataset_hashes
from pipeline.learn.agents.checkpoint import AGENT_WEIGHTS
from pipeline.learn.evaluation import Agent

if TYPE_CHECKING:  # torch (and the state files' safetensors.torch) are imported where a run
    # trains or saves: the method table, and check_params through it, need none of it
    import torch

    from pipeline.learn.agents.resume import Resume

TRAIN_EVAL_SEED = 10_000  # seeds of the evaluation episodes played during training
TRAINING_STATE = "training_state"  # <name>.json + <name>.safetensors beside a checkpoint


class TrainError(PipelineError, ValueError):
    """A run cannot start: missing inputs or settings that do not fit the env."""


@dataclass(frozen=True)
class TrainInputs:
    """The data a run may read (DVC deps of train@<run>): the env's labelled dataset (the SAC
    family's offline replay, hybrid_ppo's prototypes) and the directory of pre-trained VLM
    critics, one sub-directory per env (erpv). Never stage one's rollouts or label table: what
    stage two reads is what the dataset shares."""

    dataset: Path | None = None
    critics: Path | None = None
    # a labelling round (pipeline.loops.rounds): the rounds' dataset parts, read after `dataset`, and
    # the previous agent's checkpoint, whose training state (weights, optimisers, online replay)
    # the run goes on from (it acts from its first step)
    round_parts: tuple[Path, ...] = ()
    warm_start: Path | None = None
    # (update, seed) at which the dataset and each round part entered the replay, in that order
    # (Semore's selective insertion); () outside rounds: the dataset at update 0, the run's seed
    part_entries: tuple[tuple[int, int], ...] = ()

    def dataset_hashes(self) -> dict[str, Any]:
        if self.dataset is None:
            raise TrainError("no dataset was given (--dataset)")
        try:
            hashes: dict[str, Any] = dict(dataset_hashes(self.dataset))
            if self.round_parts:
                hashes["round_parts"] = [dataset_hashes(part) for part in self.round_parts]
            if self.warm_start is not None:
                hashes["warm_start_sha256"] = sha256_file(self.warm_start / AGENT_WEIGHTS)
            return hashes
        except FileNotFoundError as exc:
            raise TrainError(str(exc)) from None


@dataclass
class TrainResult:
    """A trained agent, the (step, native return) of every training episode, metric rows (each
    with a `step`) and what the checkpoint records besides the agent's own meta."""

    agent: Agent
    curve: list[tuple[int, float]]
    meta: dict[str, Any]
    logs: list[dict[str, float]] = field(default_factory=list)
    # the final optimisers and replay (SAC family with `save_training_state`): written beside
    # the checkpoint as TRAINING_STATE, what a labelling round resumes from
    training_state: dict[str, Any] | None = None

    def save(self, out_dir: str | Path) -> None:
        from pipeline.learn.agents.state_io import save_state

        self.agent.save(out_dir, self.meta)
        if self.training_state is not None:
            save_state(out_dir, TRAINING_STATE, self.training_state)


class Method(ABC):
    """One training method. A subclass sets `name` and `params_class` and implements `train` and
    `load`; `run_options` names the TrainRun fields beyond env/method/steps/seed that it reads."""

    name: ClassVar[str]
    params_class: ClassVar[type[Section]]
    run_options: ClassVar[frozenset[str]] = frozenset()
    # whether a run keeps a replay that a labelling round (pipeline.loops.rounds) extends: the SAC family
    extends_replay: ClassVar[bool] = False
    # the label tasks whose answers a run can read: the teacher's knowledge reaches it through
    # these alone (the `knowledge` report's "reads" column); none for a method that reads no label
    teacher_tasks: ClassVar[tuple[str, ...]] = ()

    def params(self, params: Params, run: TrainRun | None = None) -> Any:
        """The method's section of params.yaml, typed (its params class; paper defaults); with
        `run`, the run's `overrides` merged over it first."""
        raw = params.section(self.name)
        if raw is None:
            raise ConfigError(f"params.yaml has no `{self.name}:` section (method {self.name})")
        if run is not None and run.overrides:
            raw = merge_settings(raw, run.overrides)
        return validate_section(self.params_class, raw, self.name)

    def check_run(self, name: str, run: TrainRun, params: Params) -> list[str]:
        """Problems of `train.<name>` that involve other sections (one line each, with the fix)."""
        return []

    @abstractmethod
    def train(
        self,
        name: str,
        run: TrainRun,
        params: Params,
        inputs: TrainInputs,
        *,
        progress: bool = True,
        resume_dir: str | Path | None = None,
    ) -> TrainResult:
        """Train `train.<name>`; with `resume_dir` and the section's `resume_every`, a killed run
        goes on from its last resume state."""

    @abstractmethod
    def load(self, directory: str | Path, device: torch.device | str = "cpu") -> Agent:
        """The agent a `train` of this method saved in `directory`, for acting."""


RESUME_ROOT_ENV = "VLMRL_RESUME_ROOT"


def resume_for(
    resume_dir: str | Path | None, every: int, material: dict[str, Any]
) -> Resume | None:
    """The run's resume state when it has a directory and saves one every `every` steps/updates;
    `material`: what the run depends on (settings and data), fingerprinted.

    With `VLMRL_RESUME_ROOT` set (an absolute directory: what `vlmrl-sweep queue` gives its
    workers), the state lives in `<root>/<name of resume_dir>/<fingerprint[:16]>/` instead: DVC's
    queue runs each experiment in a workspace of its own that is deleted after it (or lost with
    the machine), and the seeds of one table cell share a run name, so states are found by what
    they are a state of, from any workspace (see docs/benchmarks.md, "Tables that take days").
    There a finished run keeps its final state (`Resume.keep_final`; the SAC family's runs, which
    labelling rounds go on from): an experiment killed in a later stage runs the stages that DVC's
    run cache cannot restore again (a labelling round, whose caches persist), and each finished
    one then loads its final state and trains no step. The poller (`vlmrl-sweep ... --wait`)
    deletes an experiment's final states once it is done (`clear_done_states`)."""
    from pipeline.learn.agents.resume import Resume, fingerprint

    if resume_dir is None or not every:
        return None
    digest = fingerprint(material)
    train = material.get("train")
    about = (
        {"run": material.get("run"), "seed": train.get("seed"), "steps": train.get("steps")}
        if isinstance(train, dict)
        else {}
    )
    root = os.environ.get(RESUME_ROOT_ENV)
    if root:
        if not Path(root).is_absolute():
            raise TrainError(
                f"{RESUME_ROOT_ENV}={root!r}: give an absolute directory (a DVC queue runs each "
                "stage in a workspace of its own, where a relative one would be lost with it)"
            )
        resume_dir = Path(root) / Path(resume_dir).name / digest[:16]
    return Resume(resume_dir, digest, every, about, keep_final=bool(root))


def run_material(name: str, run: TrainRun, hp: Section, env_cfg: Section, data: dict) -> dict:
    """Everything a run depends on, for its resume state's fingerprint."""
    return {
        "run": name,
        "train": run.model_dump(mode="json"),
        "hyperparameters": hp.model_dump(mode="json"),
        "env": env_cfg.model_dump(mode="json"),
        "data": data,
    }
