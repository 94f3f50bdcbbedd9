"""train / evaluate / compare for the PPO family (hybrid VLM-PPO), on tiny MountainCar data."""

import json
import subprocess
import sys

import numpy as np
import pytest
import torch

from pipeline.core.config import ConfigError, parse_params
from pipeline.learn.agents.checkpoint import read_meta
from pipeline.learn.curves import read_metric
from pipeline.learn.evaluation import deployed, evaluate_policy
from pipeline.learn.methods.base import TrainInputs
from pipeline.learn.methods.table import METHODS, check_params, get_method, load_agent
from pipeline.learn.training import train_run
from tests.conftest import (
    PPO_DEFAULTS,
    REPO,
    build_stage_one,
    collect_cfg,
    env_cfg,
    label_cfg,
    sigkill_once_saved,
    tiny_params_dict,
)

HYBRID = {"alpha": 10.0, "bandwidth": 0.5, "confirm_steps": 2, "embedder": "grey", "grey_size": 8}


def train_params(**runs) -> dict:
    raw = tiny_params_dict()
    raw["env"]["MountainCar-v0"]["max_episode_steps"] = 50  # short episodes: some end in training
    raw["train"] = runs
    # one torch thread, as params.yaml sets: tiny networks run faster on one, and a busy machine
    # does not slow them down
    raw["ppo"] = {**PPO_DEFAULTS, "num_envs": 2, "rollout_steps": 64, "threads": 1}
    raw["hybrid_ppo"] = {**raw["ppo"], **HYBRID}
    raw["evaluate"] = {"episodes": 2, "seed": 100}
    return raw


@pytest.fixture(scope="module")
def labelled(tmp_path_factory):
    """A MountainCar dataset with milestone labels of the scripted teacher, built by stage one in
    this process (the training subprocess below must not import it)."""
    root = tmp_path_factory.mktemp("mc")
    dataset = build_stage_one(
        root, env=env_cfg(max_episode_steps=40), collect=collect_cfg(episodes=2),
        label=label_cfg(tasks={"milestone": 4}),
    )  # fmt: skip
    return TrainInputs(dataset)


def test_hybrid_run_writes_a_checkpoint_that_acts_like_the_trained_agent(labelled, tmp_path):
    run = {"env": "MountainCar-v0", "method": "hybrid_ppo", "steps": 256, "seed": 0}
    params = parse_params(train_params(hyb=run))
    curve = train_run(
        "hyb", params, labelled, tmp_path / "agent", tmp_path / "live", tmp_path / "summary.json"
    )
    assert read_metric(tmp_path / "live") == [(s, pytest.approx(r, abs=1e-4)) for s, r in curve]
    # 256 env steps = 128 in each of the 2 envs: two 50-step episodes end in each
    assert len(curve) == 2 * 2 and [s for s, _ in curve] == [100, 100, 200, 200]
    # the curve is the native return (-1 per step), not the shaped one the agent was trained on
    assert all(r == -50.0 for _, r in curve)
    meta = json.loads((tmp_path / "agent" / "agent.json").read_text())
    assert meta["method"] == "hybrid_ppo" and meta["reward_terms"] == [
        "env",
        "kinematic",
        "potential",
    ]
    # the dataset's hashes: stage two's only input (dataset_hashes)
    assert meta["data"] == TrainInputs(labelled.dataset).dataset_hashes()

    policy = deployed(load_agent(tmp_path / "agent"), read_meta(tmp_path / "agent"))
    agent = load_agent(tmp_path / "agent")
    states = (
        np.random.default_rng(0).uniform([-1.2, -0.07], [0.6, 0.07], (32, 2)).astype(np.float32)
    )
    expected = agent.sample(torch.as_tensor(states), deterministic=True).tolist()
    assert expected == [agent.act(s, deterministic=True) for s in states]
    assert [policy.act({"state": s}) for s in states] == expected
    # the obs bounds travelled with the checkpoint (MountainCar's native space)
    assert agent.obs_half_range.tolist() == pytest.approx([0.9, 0.07])


def test_evaluate_reports_success_and_lengths(labelled, tmp_path, capsys):
    run = {"env": "MountainCar-v0", "method": "ppo", "steps": 128, "seed": 0}
    params = parse_params(train_params(base=run))
    train_run(
        "base", params, labelled, tmp_path / "agent", tmp_path / "live", tmp_path / "summary.json"
    )
    policy = deployed(load_agent(tmp_path / "agent"), read_meta(tmp_path / "agent"))
    capsys.readouterr()
    result = evaluate_policy(
        policy, "MountainCar-v0", params.env["MountainCar-v0"], 2, 100, progress="evaluate base"
    )
    assert result.lengths == [50, 50] and result.returns == [-50.0, -50.0]
    assert result.success_rate == 0.0  # an untrained agent does not reach the flag in 50 steps
    bar = capsys.readouterr().err  # one tick per episode, the running mean beside it
    assert "evaluate base" in bar and "2/2" in bar and "return_mean=-50.0" in bar


def test_kinematic_only_ablation_reads_no_frames(labelled, tmp_path):
    run = {
        "env": "MountainCar-v0",
        "method": "hybrid_ppo",
        "steps": 128,
        "seed": 0,
        "reward_terms": ["env", "kinematic"],
    }
    params = parse_params(train_params(kin=run))
    from pipeline.learn.methods.hybrid_ppo import METHOD

    hp = METHOD.params(params)
    env = METHOD.env_factory(params.train["kin"], hp, params, None)()  # no data without Phi
    obs, _ = env.reset(seed=0)
    assert set(obs) == {"state"}
    _, reward, *_ = env.step(2)
    position = env.unwrapped.state[0]
    assert reward == pytest.approx(-1.0 + max(0.0, 2.0 * (position + 0.4)))


@pytest.mark.parametrize(
    ("run", "drop", "message"),
    [
        (
            {"env": "CarRacing-v3", "method": "ppo", "steps": 1, "seed": 0},
            (),
            "not listed in `envs`",
        ),
        (
            {
                "env": "MountainCar-v0",
                "method": "ppo",
                "steps": 1,
                "seed": 0,
                "reward_terms": ["env"],
            },
            (),
            "reward_terms: applies to method hybrid_ppo, not 'ppo'",
        ),
        (
            {"env": "MountainCar-v0", "method": "hybrid_ppo", "steps": 1, "seed": 0},
            ("hybrid_ppo",),
            "needs a `hybrid_ppo:` section",
        ),
        (
            {"env": "MountainCar-v0", "method": "sarsa", "steps": 1, "seed": 0},
            (),
            "train.bad.method: unknown method 'sarsa'",
        ),
    ],
)
def test_bad_train_runs_are_named(run, drop, message, tmp_path):
    """parse_params names what the stage sections alone show (an env not in `envs`); the method
    table's check_params the rest, and train_run refuses to start such a run."""
    raw = train_params(bad=run)
    for section in drop:
        del raw[section]
    with pytest.raises(ConfigError, match=message):
        check_params(parse_params(raw))
    if run["env"] in raw["envs"]:
        inputs = TrainInputs()
        with pytest.raises(ConfigError, match=message):
            train_run(
                "bad", parse_params(raw), inputs, tmp_path / "a", tmp_path / "l", tmp_path / "s"
            )


# every method with a warm-up, from the method table (a new one is tested without editing here)
_WARMED_UP = [n for n in METHODS if "start_steps" in METHODS[n].params_class.model_fields]


@pytest.mark.parametrize("method", _WARMED_UP)
def test_a_run_shorter_than_start_steps_is_refused(method):
    """It would make 0 updates and save an untrained agent."""
    raw = train_params(bad={"env": "MountainCar-v0", "method": method, "steps": 99, "seed": 0})
    raw[method] = {"start_steps": 100}
    with pytest.raises(ConfigError, match=rf"train.bad: 99 steps never reach {method}.start_steps=100"):  # fmt: skip
        check_params(parse_params(raw))
    raw["train"]["bad"]["steps"] = 100
    try:
        check_params(parse_params(raw))
    except ConfigError as exc:
        assert "start_steps" not in str(exc)


def _sac_and_erpv(**erpv_run):
    raw = train_params(
        pix={"env": "MountainCarContinuous-v0", "method": "sac", "steps": 200, "seed": 0,
             "overrides": {"network": {"obs": "pixels"}, "image_pad": 4}},
        state={"env": "MountainCarContinuous-v0", "method": "sac", "steps": 200, "seed": 0},
        guided={"env": "MountainCarContinuous-v0", "method": "erpv", "steps": 200, "seed": 0,
                **erpv_run},
    )  # fmt: skip
    raw["envs"] = ["MountainCar-v0", "MountainCarContinuous-v0"]
    raw["env"]["MountainCarContinuous-v0"] = raw["env"]["MountainCar-v0"]
    raw["collect"]["MountainCarContinuous-v0"] = raw["collect"]["MountainCar-v0"]
    raw["label"]["per_env"]["MountainCarContinuous-v0"] = {}
    raw["sac"] = {"start_steps": 100, "network": {"obs": "state"}}
    raw["erpv"] = {"start_steps": 100, "network": {"obs": "state"}}
    raw["critic"] = {"envs": ["MountainCarContinuous-v0"], "steps": 10, "seed": 0}
    return raw


def test_a_run_overrides_its_method_section_for_itself():
    raw = _sac_and_erpv()
    params = parse_params(raw)
    check_params(params)
    sac = get_method("sac")
    pix, state = sac.params(params, params.train["pix"]), sac.params(params, params.train["state"])
    assert (pix.network.obs, pix.image_pad) == ("pixels", 4)
    assert (state.network.obs, state.image_pad) == ("state", 0)
    assert sac.params(params).network.obs == "state"  # the section itself is unchanged
    assert pix.network.hidden_dim == state.network.hidden_dim  # merged key by key

    raw["train"]["pix"]["overrides"] = {"network": {"obs": "frames"}, "nope": 1}
    with pytest.raises(ConfigError) as err:
        check_params(parse_params(raw))
    assert "train.pix.overrides: sac.nope: unknown key" in str(err.value)
    assert "train.pix.overrides: sac.network.obs" in str(err.value)


def test_a_pixel_erpv_run_needs_a_pixel_critic():
    raw = _sac_and_erpv(overrides={"network": {"obs": "pixels"}})
    with pytest.raises(ConfigError, match=r"train.guided: the agent's network.obs is 'pixels', "
                       r"the C_V of 'MountainCarContinuous-v0' reads 'state': set "
                       r"critic.overrides.MountainCarContinuous-v0.network.obs"):  # fmt: skip
        check_params(parse_params(raw))
    raw["critic"]["overrides"] = {"MountainCarContinuous-v0": {"network": {"obs": "pixels"}}}
    params = parse_params(raw)
    check_params(params)
    from pipeline.learn.methods.erpv import critic_params

    assert critic_params(params, "MountainCarContinuous-v0").network.obs == "pixels"
    raw["critic"]["overrides"] = {"MountainCarContinuous-v0": {"lambda_1": 0.0},
                                  "MountainCar-v0": {"gamma": 0.9}}  # fmt: skip
    with pytest.raises(ConfigError) as err:
        check_params(parse_params(raw))
    assert "critic.overrides.MountainCarContinuous-v0: C_V does not read ['lambda_1']" in str(
        err.value
    )
    assert "critic.overrides.MountainCar-v0: 'MountainCar-v0' is not in critic.envs" in str(
        err.value
    )


def test_bad_run_name_is_refused():
    raw = train_params(
        **{"../escape": {"env": "MountainCar-v0", "method": "ppo", "steps": 1, "seed": 0}}
    )
    with pytest.raises(ConfigError, match="a run name is a directory name"):
        parse_params(raw)


# a train stage in a fresh interpreter; fast: the import closure of every method, below, and the
# agents' imports in a fresh interpreter (test_sac.py)
@pytest.mark.slow
def test_train_stage_never_imports_a_teacher(labelled, tmp_path):
    """The design's contract: agents learn from cached labels only. The stage runs in a fresh
    interpreter (a hybrid run, which reads the label table), then lists what it imported."""
    import yaml

    run = {"env": "MountainCar-v0", "method": "hybrid_ppo", "steps": 128, "seed": 0}
    params_path = tmp_path / "params.yaml"
    params_path.write_text(yaml.safe_dump(train_params(hyb=run)))
    code = f"""
import sys
from stages.train import main
rc = main(["--params", {str(params_path)!r}, "--run", "hyb", "--dataset", {str(labelled.dataset)!r},
           "--out", {str(tmp_path / "agent")!r},
           "--live", {str(tmp_path / "live")!r}, "--summary", {str(tmp_path / "s.json")!r}])
assert rc == 0, rc
print("\\n".join(sorted(sys.modules)))
"""
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True
    )
    modules = out.stdout.split()
    assert "pipeline.learn.shaping.prototypes" in modules  # it did read the labels
    assert not [m for m in modules if m.startswith("pipeline.teach.teachers")]
    assert "transformers" not in modules and "openai" not in modules


def _import_closure(roots: list[str]) -> tuple[set[str], set[str]]:
    """The project modules that `roots` import, transitively and statically: every `import` and
    `from ... import` statement of each module's source, those inside functions included (a lazy
    import runs only on some paths, which one run may not take), with the packages above each
    module. Returns (project modules, top-level names of the other packages imported)."""
    import ast

    seen: set[str] = set()
    external: set[str] = set()
    todo = list(roots)
    while todo:
        name = todo.pop()
        base = REPO.joinpath(*name.split("."))
        path = base / "__init__.py" if (base / "__init__.py").exists() else base.with_suffix(".py")
        if name in seen or not path.exists():
            continue  # seen, or a name imported from a module rather than a module
        seen.add(name)
        parts = name.split(".")
        todo += [".".join(parts[:i]) for i in range(1, len(parts))]
        package = parts if path.name == "__init__.py" else parts[:-1]
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                start = ".".join(package[: len(package) - node.level + 1]) if node.level else ""
                module = ".".join(p for p in (start, node.module or "") if p)
                targets = [module, *(f"{module}.{alias.name}" for alias in node.names)]
            else:
                continue
            for target in targets:
                if target.split(".")[0] in ("pipeline", "stages"):
                    todo.append(target)
                else:
                    external.add(target.split(".")[0])
    return seen, external


def test_nothing_training_imports_imports_a_teacher():
    """The same contract for every method, not only the one a run exercises: the import closure
    of pipeline.learn.training, the method table, every method's module (the table imports them on
    use, by name) and the train stage reaches no teacher and no teacher client library, lazy
    imports included."""
    from pipeline.learn.methods.table import METHOD_MODULES, METHODS

    methods = [entry.split(":")[0] for entry in METHOD_MODULES.values()]
    modules, external = _import_closure(
        ["pipeline.learn.training", "pipeline.learn.methods.table", "stages.train", *methods]
    )
    assert {type(method).__module__ for method in METHODS.values()} <= modules
    assert not [
        m for m in modules if m.startswith(("pipeline.teach.teachers", "pipeline.teach.labelling"))
    ]
    assert not {"transformers", "openai"} & external
    # the walk does find a teacher where there is one: the label stage's
    labelling, _ = _import_closure(["stages.label"])
    assert "pipeline.teach.teachers.scripted" in labelling


def test_training_log_leaves_the_repository_alone(tmp_path, monkeypatch):
    """pipeline.learn.curves writes files only: no `dvc init` of a bare git repository, no failure in
    a repository with no commit, one TSV per metric with values only where measured."""
    import subprocess

    from pipeline.learn.curves import write_run_summary, write_training_log

    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    monkeypatch.chdir(tmp_path)
    rows = [{"step": 10.0, "critic_loss": 1.0}, {"step": 20.0, "critic_loss": 0.5, "alpha": 0.1}]
    write_training_log("live", "summary.json", [(5, -1.0), (15, 2.0)], rows)
    assert not (tmp_path / ".dvc").exists()
    assert read_metric("live") == [(5, -1.0), (15, 2.0)]
    assert read_metric("live", "critic_loss") == [(10, 1.0), (20, 0.5)]
    assert read_metric("live", "alpha") == [(20, 0.1)]  # not a zero at step 10
    assert json.loads((tmp_path / "summary.json").read_text())["alpha"] == 0.1
    write_run_summary("summary.json", eval_episodes=None)  # a run without periodic evaluation
    assert json.loads((tmp_path / "summary.json").read_text()) == {
        "step": 20, "last_episode_return": 2.0,
    }  # fmt: skip


def test_hybrid_with_the_position_table_renders_no_training_frame(labelled, tmp_path, monkeypatch):
    """With hybrid_ppo.position_table_spacing the env steps never render: Phi comes from the
    table (built once from frames rendered at grid positions), with the normalised PPO preset."""
    import pipeline.core.envs.gym_envs as gym_envs

    def no_frames(env, obs):
        raise AssertionError("a training step rendered a frame")

    monkeypatch.setattr(gym_envs, "mountaincar_frame", no_frames)
    run = {"env": "MountainCar-v0", "method": "hybrid_ppo", "steps": 256, "seed": 0}
    raw = train_params(hyb=run)
    raw["hybrid_ppo"].update(
        position_table_spacing=0.01,
        kinematic="potential",
        normalize_obs=True,
        normalize_reward=True,
    )
    curve = train_run(
        "hyb",
        parse_params(raw),
        labelled,
        tmp_path / "agent",
        tmp_path / "live",
        tmp_path / "s.json",
    )
    assert len(curve) == 4 and all(r == -50.0 for _, r in curve)
    meta = json.loads((tmp_path / "agent" / "agent.json").read_text())
    assert meta["config"]["kinematic"] == "potential" and meta["normalize_obs"] is True


@pytest.mark.slow  # three train stages, one in a fresh interpreter SIGKILLed: about 15 s
def test_a_killed_ppo_training_resumes_to_the_uninterrupted_result(labelled, tmp_path):
    """SIGKILL a hybrid_ppo train stage after its first resume state (saved mid-episode, with
    the envs, the lock and the normalisers); the rerun goes on from there and ends with the
    checkpoint and curve byte-identical to a run never interrupted (CPU)."""

    import yaml

    # 16 updates of 128 steps: the first resume state before the 5th, 12 more to kill in
    run = {"env": "MountainCar-v0", "method": "hybrid_ppo", "steps": 2048, "seed": 0}
    raw = train_params(long=run)
    raw["hybrid_ppo"].update(
        position_table_spacing=0.01, normalize_obs=True, normalize_reward=True, resume_every=4
    )
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(raw))

    def argv(out):
        return ["--params", str(tmp_path / "params.yaml"), "--run", "long", "--dataset",
                str(labelled.dataset), "--out",
                f"{out}/model", "--live", f"{out}/live", "--summary", f"{out}/summary.json",
                "--resume-dir", f"{out}/resume"]  # fmt: skip

    def start(out):
        code = f"from stages.train import main; raise SystemExit(main({argv(out)!r}))"
        return subprocess.Popen([sys.executable, "-c", code], cwd=REPO)

    from stages import train

    assert train.main(argv(tmp_path / "whole")) == 0  # uninterrupted, in this process
    killed = start(tmp_path / "killed")  # a fresh interpreter, SIGKILLed
    state = tmp_path / "killed" / "resume" / "state.json"
    sigkill_once_saved(killed, state)
    assert state.exists() and not (tmp_path / "killed" / "model" / "agent.json").exists()
    assert train.main(argv(tmp_path / "killed")) == 0  # the rerun, in this process
    assert not (tmp_path / "killed" / "resume").exists()  # cleared once finished
    for name in ("model/agent.safetensors", "model/agent.json", "summary.json"):
        whole, resumed = tmp_path / "whole" / name, tmp_path / "killed" / name
        assert resumed.read_bytes() == whole.read_bytes(), name
    tsv = sorted(p.relative_to(tmp_path / "whole") for p in (tmp_path / "whole").rglob("*.tsv"))
    assert tsv and all(
        (tmp_path / "killed" / p).read_bytes() == (tmp_path / "whole" / p).read_bytes() for p in tsv
    )


def test_resumable_ppo_refuses_envs_it_cannot_pickle():
    """Rendering MountainCar holds pygame surfaces: resumable PPO says what to change, at once."""
    from pipeline.core.config import EnvConfig
    from pipeline.core.envs import make_env
    from pipeline.learn.agents.ppo import train_ppo
    from tests.conftest import ppo_params

    class Never:
        every = 1

        def load(self):
            return None

        def save(self, state):
            raise AssertionError("no save expected")

    def make():
        cfg = EnvConfig(image_size=16, action_repeat=1, max_episode_steps=20, include_state=True)
        return make_env("MountainCar-v0", cfg)

    with pytest.raises(ValueError, match="resume_every: 0"):
        train_ppo(make, ppo_params(num_envs=1, rollout_steps=8, minibatches=1), 64, 0,
                  obs_fn=lambda o: o["state"], resume=Never())  # fmt: skip


@pytest.mark.parametrize(
    "threads",
    [
        1,
        # two more train stages to see torch's default kept; that training_torch(0) keeps the
        # count is checked fast in test_kernels.py
        pytest.param(0, marks=pytest.mark.slow),
    ],
)
def test_the_train_stage_fixes_the_thread_count_the_weights_follow(labelled, tmp_path, threads):
    """The same hybrid run in two processes whose torch default is 1 and 2 threads
    (OMP_NUM_THREADS): with `threads: 1` the weights are the same bytes; with 0 (torch's
    default) they may differ in their last bits, which once left a fresh clone's dvc.lock dirty."""
    import os

    import yaml

    run = {"env": "MountainCar-v0", "method": "hybrid_ppo", "steps": 256, "seed": 0}
    raw = train_params(hyb=run)
    raw["hybrid_ppo"]["threads"] = threads
    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump(raw))
    weights = []
    for omp in ("1", "2"):
        out = tmp_path / f"omp{omp}"
        argv = ["--params", str(params), "--run", "hyb", "--dataset", str(labelled.dataset),
                "--out", f"{out}/model", "--live",
                f"{out}/live", "--summary", f"{out}/summary.json"]  # fmt: skip
        if threads and os.environ.get("OMP_NUM_THREADS") == omp:
            # this process started with that default (tests/conftest.py): no fresh one needed
            from stages import train

            assert train.main(argv) == 0
            assert torch.get_num_threads() == threads
        else:
            code = (
                "import torch, sys; from stages.train import main; rc = main(sys.argv[1:]); "
                "print('threads', torch.get_num_threads()); raise SystemExit(rc)"
            )
            result = subprocess.run([sys.executable, "-c", code, *argv], cwd=REPO, text=True,
                                    capture_output=True, env={**os.environ, "OMP_NUM_THREADS": omp})  # fmt: skip
            assert result.returncode == 0, result.stderr
            assert f"threads {threads or omp}" in result.stdout
        weights.append((out / "model" / "agent.safetensors").read_bytes())
    if threads:
        assert weights[0] == weights[1]


def test_an_erpv_run_takes_its_frame_size_from_its_env():
    """C_V is pre-trained on the dataset's frames at the env's size: an erpv run cannot set its
    own `image_size` (the SAC family's other methods can)."""
    raw = _sac_and_erpv(overrides={"network": {"obs": "pixels"}})
    raw["critic"]["overrides"] = {"MountainCarContinuous-v0": {"network": {"obs": "pixels"}}}
    raw["train"]["guided"]["image_size"] = 64
    with pytest.raises(ConfigError, match=r"train.guided.image_size: an erpv run reads its env's"):
        check_params(parse_params(raw))
