"""A benchmark table as DVC experiments: `vlmrl-sweep`.

A table (a YAML file, for example `benchmarks/tables/*.yaml`) is params plus cells. A cell is
one train run (and, optionally, labelling rounds after it) and what it changes in params.yaml;
each (cell, seed) is one DVC experiment named `<table>-<cell>-s<seed>` that reproduces
`evaluate@<table>-<cell>` (with rounds: `evaluate_round@<table>-<cell>-r<count>`, the last
round's agent) and what that stage needs. DVC does the rest: params hashing decides what is
stale, the run cache restores every stage it has run before on the same code, data and params
(the dataset and C_V that many cells share are built once; not collect, label and masks, whose
persisted outputs it skips: they run again in each experiment, collect in full, label and masks
from the caches the commit holds), `dvc queue` runs cells in
parallel, and `dvc exp push` / `pull` carry them between machines.

    vlmrl-sweep check TABLE                  # every cell's params pass the DVC gate's checks
    vlmrl-sweep status TABLE                 # every cell x seed: done, queued, running, failed,
                                             # stale or missing
    vlmrl-sweep queue TABLE --jobs 2 --wait  # queue what is not done, run 2 at a time, wait
    vlmrl-sweep resume PLAN --repo CLONE --jobs 2 --nice 19 --wait --commit
                                             # the day's restart of the tables run as
                                             # background work, in the plan's order
                                             # (pipeline/tools/sweeps/background.py)
    vlmrl-sweep wait PLAN --repo CLONE --jobs 2 --nice 19 --commit
                                             # its poller alone, started again: the queue as
                                             # it stands (after an update of this tool)
    vlmrl-sweep report TABLE --out DIR       # table.md (mean +- std, ddof 1; Welch p against
                                             # the control), the figure, results.json (raw)
    vlmrl-sweep commands TABLE --cell C --seed S
                                             # the command that reruns one experiment
    vlmrl-sweep commands TABLE --push origin --clone URL
                                             # one self-contained shell job per experiment, for
                                             # any scheduler: clone, run, `dvc exp push`
    vlmrl-sweep seeds --runs REGEX           # seed statistics over any experiments
                                             # (`vlmrl-seeds`, pipeline/tools/experiments.py)

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

The code, by job: `table` (the file's schema, params and commands), `status` (what DVC holds and
what outlives a machine), `queue` (background work and the wait that keeps results), `report`
and `cli`.
"""
