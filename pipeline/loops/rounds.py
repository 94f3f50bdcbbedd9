"""Labelling rounds (issue 28): the agent's own frames labelled in batch between rounds of
training, with zero teacher calls during training.

ERPv (algorithm 1) asks its VLM about every observation the agent meets, and Semore's selective
buffer has its VLM judge the agent's own (observation, action) pairs: both call the model inside
the loop. A round does the same work offline, in batch, through the content-addressed cache:

1. the previous agent (the run's static agent for round 1, round k-1's after) collects
   `rounds.<name>.episodes` episodes (collect's shard format; the manifest's `acting_agent` names
   the agent's weights and how it explored);
2. the env's label teacher (`label.per_env.<env>` merged over `label`) answers their frames in
   batch; answers already in the env's label cache or an earlier round's cost nothing;
3. masks and a dataset part of those episodes, as the masks and dataset stages make them;
4. the agent trains `steps` more steps, going on from the previous agent's training state
   (weights, optimisers, the replay's online part: `save_training_state`; it acts from its first
   step), with the static dataset plus every round's part so far as the replay's offline half: ERPv's VPG and VER read a_v on the rounds' rows, Semore's selective replay the judge's
   verdicts on the agent's own pairs and the masks of its own frames.

Round k's data lives in `data/rounds/<name>/` (rollouts, labels, masks, dataset part, the
audit page of its labels, `parts.json`: the dataset parts its training read, and the update
and seed at which each entered the replay), its caches in
`data/round_caches/<name>/` (persisted: a rerun pays only for new frames; later rounds read
them, with the env's label cache) and its agent in `models/rounds/<name>/`; all are DVC outputs
of round@<name>, so a change to round 2 reruns rounds 2 and later only. Each round's costs
(frames, prompts, those answered before, teacher calls and what they would cost at ERPv table
14's 6.95 s per Qwen2-VL-7B call) are its metrics, the same from run to run on one machine (the
frames come from the previous agent: pipeline/tools/reproducibility.py). What the calls cost
here, at the latency the teacher's calls recorded, is `costs/rounds/<name>.json` (`round_costs`).
"""

from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import torch

from pipeline.core.config import CollectConfig, ConfigError, Params, RoundConfig, TrainRun
from pipeline.core.errors import PipelineError
from pipeline.core.io import atomic_write_json, sha256_file
from pipeline.core.tables import read_label_table
from pipeline.dataset.build import build_dataset
from pipeline.learn.agents.checkpoint import AGENT_WEIGHTS
from pipeline.learn.agents.state_io import load_plain_state
from pipeline.learn.curves import write_run_summary, write_training_log
from pipeline.learn.evaluation import Agent, deployed
from pipeline.learn.methods.base import TRAINING_STATE, TrainInputs
from pipeline.learn.methods.table import check_params, get_method, load_agent, load_policy
from pipeline.teach.labelling.audit import EarlierLabels, write_audit
from pipeline.teach.labelling.label import label_rollouts
from pipeline.teach.labels.cost import ERPV_SECONDS_PER_CALL, recorded_cost
from pipeline.teach.masks import make_mask_backend
from pipeline.teach.masks.compute import compute_masks
from pipeline.teach.rollouts.collect import Acting, collect
from pipeline.teach.rollouts.format import TEACHER_CACHE_DIR
from pipeline.teach.teachers import make_teacher

log = logging.getLogger(__name__)

PARTS = "parts.json"
# a round's caches (`data/round_caches/<name>/`): a persisted DVC output apart from its data, so
# that a rerun of the round (DVC deletes outputs first) pays only for frames it has not seen
LABEL_CACHE, MASK_CACHE = "labels", "masks"


class RoundError(PipelineError, ValueError):
    """A round cannot run: its run, its previous round or its settings; the message says why."""


@dataclass
class RoundSummary:
    """What one round costs: its metrics (metrics/rounds/<name>.json), a pure function of its
    inputs. `teacher_calls` is what the round pays on a fresh build: its distinct prompts that
    neither the env's label table nor an earlier round's answered. What this run actually sent
    (none on a rerun that finds its own cache) is `calls_made_now`, printed, not a metric."""

    round: int
    frames_collected: int
    env_steps_collected: int
    prompts: int  # queried (frame, task) rows
    distinct_prompts: int  # distinct cache keys among them
    answered_before: int  # of those, answered in the env's label table or an earlier round's
    teacher_calls: int  # distinct_prompts - answered_before
    teacher_seconds_at_erpv_rate: float
    dataset_parts: int
    offline_transitions_added: int
    calls_made_now: int = 0

    def metrics(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if k != "calls_made_now"}


class AgentBehaviour:
    """A trained agent of this pipeline acting in collect (behaviour `agent`), as `deployed`
    plays it (frames stacked as in training); `explore`: `sample` draws from the policy,
    `deterministic` takes its mean. Seeded per episode, so a collection is a function of
    (weights, seed)."""

    tag = "agent"

    def __init__(self, agent: Agent, explore: str) -> None:
        self.policy = deployed(agent, deterministic=explore == "deterministic")
        self.fresh = True

    def reset(self, seed: int) -> None:
        torch.manual_seed(seed)
        self.fresh = True

    def act(self, obs: dict[str, np.ndarray], info: dict[str, Any]) -> tuple[Any, str]:
        if self.fresh:
            self.policy.begin(obs)
            self.fresh = False
        return self.policy.act(obs), self.tag


def _update_step(agent_dir: Path) -> int:
    """The update count of a saved agent's training state: where the next round goes on."""
    try:
        return int(load_plain_state(agent_dir, TRAINING_STATE)["agent"]["update_step"])
    except (KeyError, TypeError) as exc:
        raise RoundError(
            f"{agent_dir / TRAINING_STATE}.json has no update count ({exc}): rebuild it with "
            "`dvc repro`"
        ) from None


def _own_entry(round_dir: Path) -> tuple[int, int]:
    """(update, seed) at which an earlier round's own part entered the replay."""
    path = round_dir / PARTS
    try:
        update, seed = json.loads(path.read_text(encoding="utf-8"))["entries"][-1]
        return int(update), int(seed)
    except (FileNotFoundError, KeyError, IndexError, TypeError, ValueError) as exc:
        raise RoundError(
            f"{path} does not say when its part entered the replay ({exc!r}): rebuild that "
            f"round with `dvc repro round@{round_dir.name}`"
        ) from None


def _earlier_rounds(params: Params, cfg: RoundConfig) -> list[str]:
    """The names of the rounds of the same run before `cfg`, oldest first."""
    earlier = [(r.round, n) for n, r in params.rounds.items() if r.run == cfg.run]
    return [n for k, n in sorted(earlier) if k < cfg.round]


def run_round(
    name: str,
    params: Params,
    data_dir: str | Path,
    caches_dir: str | Path,
    model_dir: str | Path,
    live_dir: str | Path,
    summary_path: str | Path,
    *,
    resume_dir: str | Path | None = None,
    telemetry_dir: str | Path | None = None,
    costs_path: str | Path | None = None,
    progress: bool = True,
) -> RoundSummary:
    """Round `rounds.<name>` of params.yaml: collect with the previous agent, label, masks, a
    dataset part, train; see the module doc. Paths in what it writes are the params' (relative
    to the repository), never machine paths. Interrupted, it resumes: collection by episode,
    labels and masks from their caches, training from `resume_dir`. `telemetry_dir`: where the
    teacher calls' latency is kept (the env's store, which label@<env> appends to as well);
    `costs_path`: this machine's cost of the round's teacher calls (`round_costs`), apart from
    the metrics because it depends on the machine and the server."""
    check_params(params)
    if name not in params.rounds:
        known = ", ".join(params.rounds) or "none"
        raise RoundError(f"params.yaml has no round rounds.{name} (rounds: {known})")
    cfg = params.rounds[name]
    assert params.train is not None  # check_params: a round's run exists
    run = params.train[cfg.run]
    method = get_method(run.method)  # the SAC family: check_params refuses other methods
    if params.label is None or params.masks is None or params.dataset is None:
        raise ConfigError("a round needs the label, masks and dataset sections of params.yaml")
    data_dir, env_id = Path(data_dir), run.env
    previous = Path(cfg.previous_agent)
    weights = previous / AGENT_WEIGHTS
    if not weights.exists():
        raise RoundError(
            f"{weights} does not exist: train {cfg.previous_agent} first (`dvc repro`)"
        )

    # 1. the previous agent collects
    acting = Acting(
        AgentBehaviour(load_agent(previous), cfg.explore),
        {"round": cfg.round, "run": cfg.run, "agent": cfg.previous_agent,
         "agent_sha256": sha256_file(weights), "explore": cfg.explore},
    )  # fmt: skip
    shard_max = params.collect[env_id].shard_max_samples
    collect_cfg = CollectConfig(
        behaviour="agent", episodes=cfg.episodes, seed=cfg.seed, shard_max_samples=shard_max
    )
    rollouts = data_dir / "rollouts"
    manifest = collect(
        env_id, params.env[env_id], collect_cfg, rollouts, replace=True, acting=acting,
        progress=progress,
    )  # fmt: skip

    # 2. labels through the cache: the env's answers and every earlier round's are free
    label_cfg = params.label.for_env(env_id)
    caches_dir = Path(caches_dir)
    earlier = _earlier_rounds(params, cfg)  # their data and caches lie beside this round's
    for n in earlier:
        if not (data_dir.parent / n / "dataset").exists():
            raise RoundError(f"{data_dir.parent / n} is not built: run `dvc repro round@{n}` first")
    labels = data_dir / "labels.parquet"
    labelled = label_rollouts(
        rollouts, label_cfg, make_teacher(label_cfg.teacher, params.label.teacher_path(env_id), load_policy),
        caches_dir / LABEL_CACHE, labels,
        # the acting teacher's answers bought while collecting the env's data (RAE) count too
        read_also=[Path("data/label_cache") / env_id,
                   *[p for p in [Path("data/rollouts") / env_id / TEACHER_CACHE_DIR] if p.is_dir()],
                   *(caches_dir.parent / n / LABEL_CACHE for n in earlier)],
        telemetry_dir=telemetry_dir,
        progress=progress,
        rebuild=f"`dvc repro round@{name}`",
    )  # fmt: skip

    queried = read_label_table(labels, ["cache_key", "queried"]).filter(pl.col("queried"))
    keys = set(queried["cache_key"])
    tables = [Path("data/labels") / f"{env_id}.parquet"]
    tables += [data_dir.parent / n / "labels.parquet" for n in earlier]
    before = set().union(*(set(read_label_table(t, ["cache_key"])["cache_key"]) for t in tables))

    # 3. masks and this round's dataset part
    masks = data_dir / "masks.parquet"
    compute_masks(
        rollouts, labels, make_mask_backend(params.masks), caches_dir / MASK_CACHE, masks,
        batch_size=params.masks.batch_size, progress=progress, rebuild=f"`dvc repro round@{name}`",
    )  # fmt: skip
    # what the VLM said of this round's frames, beside every earlier label of the run with its
    # round (0: the env's static data), so one page says which round each label came from
    shown = [
        EarlierLabels(0, Path("data/rollouts") / env_id, Path("data/labels") / f"{env_id}.parquet")
    ]
    shown += [
        EarlierLabels(params.rounds[n].round, data_dir.parent / n / "rollouts",
                      data_dir.parent / n / "labels.parquet")
        for n in earlier
    ]  # fmt: skip
    write_audit(rollouts, labels, data_dir / "audit.html", masks, earlier=shown)
    part = data_dir / "dataset"
    build_dataset(rollouts, labels, masks, part, shard_max_samples=params.dataset.shard_max_samples)
    round_parts = [(data_dir.parent / n / "dataset").as_posix() for n in earlier]
    round_parts.append(part.as_posix())
    # when each part entered the replay (Semore's selective insertion): the static dataset at
    # update 0, each round's part at its round's first update, with its round's seed
    entries = [(0, run.seed), *(_own_entry(data_dir.parent / n) for n in earlier)]
    entries.append((_update_step(previous), cfg.seed))
    atomic_write_json(data_dir / PARTS, {"static": f"data/datasets/{env_id}",
                                         "round_parts": round_parts,
                                         "entries": [list(e) for e in entries]})  # fmt: skip

    # 4. train on, from the previous agent, on the static dataset and every round's part
    # the round's own seed for its training episodes (resets) and batches: not the static run's,
    # whose episodes' starting states would repeat in every round
    round_run = TrainRun(
        env=env_id, method=run.method, steps=cfg.steps, seed=cfg.seed, overrides=run.overrides
    )
    inputs = TrainInputs(
        dataset=Path("data/datasets") / env_id,
        critics=Path("models/critic"),
        round_parts=tuple(Path(p) for p in round_parts),
        warm_start=previous,
        part_entries=tuple(entries),
    )
    result = method.train(
        f"{cfg.run}@{name}", round_run, params, inputs, progress=progress, resume_dir=resume_dir
    )
    result.meta |= {"round": cfg.round, "round_name": name}
    result.save(model_dir)
    summary = RoundSummary(
        round=cfg.round,
        frames_collected=manifest["totals"]["samples"],
        env_steps_collected=manifest["totals"]["steps"],
        prompts=queried.height,
        distinct_prompts=len(keys),
        answered_before=len(keys & before),
        teacher_calls=len(keys - before),
        teacher_seconds_at_erpv_rate=round(len(keys - before) * ERPV_SECONDS_PER_CALL, 2),
        dataset_parts=1 + len(round_parts),
        offline_transitions_added=manifest["totals"]["steps"],
        calls_made_now=labelled.teacher_calls,
    )
    write_training_log(live_dir, summary_path, result.curve, result.logs)
    eval_episodes = getattr(method.params(params, round_run), "eval_episodes", None)
    write_run_summary(summary_path, eval_episodes)
    costs = json.loads(Path(summary_path).read_text())
    atomic_write_json(summary_path, {**costs, "costs": summary.metrics()})
    if costs_path is not None:
        atomic_write_json(costs_path, round_costs(keys - before, telemetry_dir, cfg.round))
    return summary


def round_costs(
    new_keys: set[str], telemetry_dir: str | Path | None, round_number: int
) -> dict[str, Any]:
    """What a round's teacher calls (its prompts that no earlier table answered) cost on this
    machine (costs/rounds/<name>.json): their recorded latency and tokens, the seconds per call
    measured, and the same calls at ERPv table 14's 6.95 s per call. Without a telemetry store,
    or for answers with no record (a pulled cache), only the count and the paper's price."""
    recorded = recorded_cost(new_keys, telemetry_dir) if telemetry_dir is not None else None
    return {
        "round": round_number,
        "teacher_calls": len(new_keys),
        "recorded": recorded,
        "seconds_at_erpv_rate": round(len(new_keys) * ERPV_SECONDS_PER_CALL, 2),
    }


def cost_line(name: str, costs: dict[str, Any]) -> str:
    """One line of what round `name`'s teacher calls cost (`round_costs`)."""
    calls, recorded = costs["teacher_calls"], costs["recorded"]
    line = f"round {name}: {calls} teacher calls"
    if recorded and recorded["calls"]:
        line += (
            f"; {recorded['seconds']:.1f} s at the latency measured here "
            f"({recorded['seconds_per_call']:.3f} s per call over {recorded['calls']} recorded "
            "calls)"
        )
    return (
        f"{line}; {costs['seconds_at_erpv_rate']:.0f} s at ERPv table 14's "
        f"{ERPV_SECONDS_PER_CALL} s per call"
    )
