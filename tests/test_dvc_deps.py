"""dvc.yaml's code deps cover what each stage imports: a change to any module a stage runs reruns
the stage (issue: hand-written deps had drifted from the imports, leaving stale outputs marked up
to date)."""

import ast
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from pipeline.learn.methods.table import METHOD_MODULES
from tests.conftest import REPO, write_params

PACKAGES = ("pipeline", "stages")


def _module_file(module: str) -> Path | None:
    """The project file of a dotted module name (a package's __init__.py), or None."""
    if not module.startswith(PACKAGES):
        return None
    path = REPO / module.replace(".", "/")
    if (path / "__init__.py").exists():
        return path / "__init__.py"
    if path.with_suffix(".py").exists():
        return path.with_suffix(".py")
    return None


def _imports(path: Path) -> set[str]:
    """Every project module `path` imports, function-local imports included."""
    package = ".".join(path.relative_to(REPO).with_suffix("").parts[:-1])
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parts, base]) if base else ".".join(parts)
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)  # submodules
    return found


def import_closure(entry: Path) -> set[Path]:
    """The project files `entry` runs: itself, what it imports, transitively, and the
    __init__.py of every package on the way (Python executes them too)."""
    seen: set[Path] = set()
    todo = [entry]
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        for module in _imports(path):
            parts = module.split(".")
            for i in range(1, len(parts) + 1):  # parent packages' __init__.py run first
                target = _module_file(".".join(parts[:i]))
                if target is not None and target not in seen:
                    todo.append(target)
    return seen


def _stages() -> list[tuple[str, str, list[str]]]:
    """(stage, entry module, deps) of every stage in dvc.yaml (foreach bodies once)."""
    out = []
    for name, stage in yaml.safe_load((REPO / "dvc.yaml").read_text())["stages"].items():
        body = stage.get("do", stage)
        match = re.search(r"python -m (stages\.\w+)", body["cmd"])
        assert match, f"stage {name}: no `python -m stages.<x>` in its cmd"
        out.append((name, match.group(1), [d for d in body.get("deps", []) if "$" not in d]))
    return out


def _stage_closure(entry: str, *more: Path) -> set[Path]:
    """What a stage runs: its entry module and `more` (modules it imports by name), with what
    they import; Python runs the entry's package first (stages/__init__.py)."""
    closure = import_closure(_module_file(entry)) | import_closure(REPO / "stages" / "__init__.py")
    for path in more:
        closure |= import_closure(path)
    if REPO / "pipeline" / "teach" / "labels" / "tasks.py" in closure:  # reads the prompt templates
        closure.add(REPO / "pipeline" / "teach" / "labels" / "prompts")
    return closure


def _missing(closure: set[Path], deps: list[str]) -> list[str]:
    covered = [REPO / d for d in deps]
    return sorted(
        str(path.relative_to(REPO))
        for path in closure
        if not any(path == dep or dep in path.parents for dep in covered)
    )


TABLE = REPO / "pipeline" / "learn" / "methods" / "table.py"
PER_RUN = ("train", "evaluate")  # a stage per run: its method's module is its own (tests below)


@pytest.mark.parametrize(("stage", "entry", "deps"), _stages(), ids=[s[0] for s in _stages()])
def test_stage_deps_cover_its_import_closure(stage, entry, deps):
    closure = _stage_closure(entry)
    if TABLE in closure and stage not in PER_RUN and _looks_up_methods(closure):
        # it loads agents of any method (a policy teacher, collect's checkpoint behaviour): the
        # table imports the checkpoint's method by name, which the closure cannot see
        closure = _stage_closure(entry, *map(_method_file, METHOD_MODULES))
    missing = _missing(closure, deps)
    assert not missing, f"dvc.yaml stage {stage} imports but does not depend on: {missing}"


def _looks_up_methods(closure: set[Path]) -> bool:
    """Whether code of `closure` imports from the table more than its names (METHOD_MODULES, as
    pretrain_critic does for its markers): `load_agent`, `get_method` and the rest import methods
    by name."""
    table = "pipeline.learn.methods.table"
    for path in closure:
        if path.suffix != ".py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import) and any(a.name == table for a in node.names):
                return True
            if (
                isinstance(node, ast.ImportFrom)
                and node.module == table
                and {a.name for a in node.names} - {"METHOD_MODULES"}
            ):
                return True
    return False


def _method_file(method: str) -> Path:
    """The module the method table imports for `method` (on use, so no import names it)."""
    path = _module_file(METHOD_MODULES[method].split(":")[0])
    assert path is not None, METHOD_MODULES[method]
    return path


def _run_deps(stage: str, method: str, env: str = "MountainCar-v0", run: str = "run") -> list[str]:
    """<stage>@<run>'s deps (a stage per `train.<run>`) for a run of `method` on `env`, as DVC
    resolves the foreach item."""
    body = yaml.safe_load((REPO / "dvc.yaml").read_text())["stages"][stage]["do"]
    values = {"${key}": run, "${item.env}": env, "${item.method}": method}
    deps = []
    for dep in body["deps"]:
        for template, value in values.items():
            dep = dep.replace(template, value)
        assert "$" not in dep, f"{stage} dep {dep}: a template this test does not resolve"
        deps.append(dep)
    return deps


@pytest.mark.parametrize("stage", ["train", "evaluate"])
@pytest.mark.parametrize("method", list(METHOD_MODULES))
def test_a_run_depends_on_what_its_method_runs(stage, method):
    """train@<run> (evaluate@<run>) covers its stage's closure and its own method's: the table
    imports that one module (by name, which the stage's closure cannot see)."""
    closure = _stage_closure(f"stages.{stage}", _method_file(method))
    missing = _missing(closure, _run_deps(stage, method))
    assert not missing, f"a {method} run imports but {stage}@<run> does not depend on: {missing}"


def _run_depends_on(method: str, path: str, env: str = "MountainCar-v0") -> bool:
    """Whether train@<run> of a `method` run on `env` depends on `path` (or a folder of it)."""
    target = REPO / path
    deps = map(REPO.joinpath, _run_deps("train", method, env))
    return any(d == target or d in target.parents for d in deps)


@pytest.mark.parametrize("method", [m for m in METHOD_MODULES if m != "semore"])
def test_a_semore_only_edit_leaves_other_runs_up_to_date(method):
    """Editing Semore's method module reruns Semore's runs alone: a PPO (or SAC, ...) run
    neither imports it nor depends on it."""
    semore = REPO / "pipeline" / "learn" / "methods" / "semore.py"
    assert semore not in _stage_closure("stages.train", _method_file(method))
    assert not _run_depends_on(method, "pipeline/learn/methods/semore.py")
    assert _run_depends_on("semore", "pipeline/learn/methods/semore.py")  # the check can see deps


# a method's own code (its agent, networks and losses with it): no other method's run reads it
OWN_CODE = {"semore": "pipeline/learn/methods/semore.py", "erpv": "pipeline/learn/methods/erpv.py"}
OWN_CLASSES = {"semore": "(Semore|CrossAttention)", "erpv": "(ERPv|VLMCritic)"}


@pytest.mark.parametrize("owner", list(OWN_CODE))
@pytest.mark.parametrize("method", list(METHOD_MODULES))
def test_a_methods_agent_code_is_a_dep_of_its_own_runs_alone(owner, method):
    """ERPv's and Semore's agents, losses and networks live in their method's module: editing
    one reruns that method's runs alone, and C_V's pre-training (pipeline/learn/critic.py) is a dep of
    no run (a run reads the C_V it made, through models/critic)."""
    path = OWN_CODE[owner]
    if method == owner:
        assert _run_depends_on(method, path)
        return
    assert REPO / path not in _stage_closure("stages.train", _method_file(method))
    assert not _run_depends_on(method, path)
    assert not _run_depends_on(method, "pipeline/learn/critic.py")
    # what every run shares holds no module named after the method and none of its classes
    classes = re.compile(rf"^class {OWN_CLASSES[owner]}", re.MULTILINE)
    shared = sorted((REPO / "pipeline" / "learn" / "agents").rglob("*.py"))
    assert not [p.name for p in shared if owner in p.stem or classes.search(p.read_text())]


def _dvc(repo: Path, *args: str) -> str:
    path = f"{os.path.dirname(sys.executable)}:{os.environ['PATH']}"
    result = subprocess.run(
        ["dvc", *args], cwd=repo, env={**os.environ, "PATH": path}, capture_output=True, text=True
    )
    assert result.returncode == 0, f"dvc {args} failed:\n{result.stdout}\n{result.stderr}"
    return result.stdout


def test_dvc_stales_only_the_runs_an_edit_touches(tmp_path):
    """The same, as DVC itself resolves the foreach: with the runs' outputs committed (stand-ins:
    nothing trains), editing methods/semore.py stales the Semore run alone, and a new C_V (a
    changed file in models/critic/<env>/erpv/) the erpv run alone."""
    repo = tmp_path / "repo"
    repo.mkdir()
    for name in ("pipeline", "stages"):
        shutil.copytree(REPO / name, repo / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "dvc.yaml", repo / "dvc.yaml")
    params = yaml.safe_load((REPO / "params.yaml").read_text())
    env = params["envs"][0]
    runs = ("ppo", "semore", "erpv")
    params["train"] = {m: {"env": env, "method": m, "steps": 1, "seed": 0} for m in runs}
    write_params(repo / "params.yaml", params)
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    _dvc(repo, "init", "-q")
    train = yaml.safe_load((repo / "dvc.yaml").read_text())["stages"]["train"]["do"]
    for run in runs:
        outs = [
            x if isinstance(x, str) else next(iter(x)) for x in (*train["outs"], *train["metrics"])
        ]
        data = [d for d in train["deps"] if d.startswith(("data/", "models/"))]
        for path in [*data, *outs]:
            path = path.replace("${key}", run).replace("${item.env}", env)
            path = path.replace("${item.method}", run)
            target = repo / path / "stand-in" if "." not in Path(path).name else repo / path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(path)
    stages = [f"train@{run}" for run in runs]
    _dvc(repo, "commit", "-f", *stages)
    assert "up to date" in _dvc(repo, "status", *stages)

    def stale() -> list[str]:
        return re.findall(r"^(train@\S+):$", _dvc(repo, "status", *stages), re.MULTILINE)

    with (repo / "pipeline" / "learn" / "methods" / "semore.py").open("a") as f:
        f.write("# a Semore-only edit\n")
    assert stale() == ["train@semore"]
    _dvc(repo, "commit", "-f", "train@semore")
    (repo / "models" / "critic" / env / "erpv" / "stand-in").write_text("a retrained C_V")
    assert stale() == ["train@erpv"]


@pytest.mark.parametrize("method", list(METHOD_MODULES))
def test_a_run_depends_on_the_critic_only_if_its_method_reads_it(method):
    """pretrain_critic@<env> writes C_V in models/critic/<env>/erpv/ and a constant marker in a
    folder per other method: a run depends on its own method's folder, so a retrained C_V reruns
    the env's erpv runs alone."""
    env = "CarRacing-v3"
    reads = _run_depends_on(method, f"models/critic/{env}/erpv/agent.json", env=env)
    assert reads == (method == "erpv")
    assert not _run_depends_on(method, f"models/critic/{env}", env=env)  # not the whole folder
    assert _run_depends_on(method, f"models/critic/{env}/{method}", env=env)


def test_the_critic_stage_writes_a_folder_for_every_method(tmp_path):
    """What a run depends on exists for every method of the table, the marker's bytes do not
    depend on C_V, and erpv's folder is where ERPv reads C_V (`critic_dir`)."""
    from pipeline.learn.critic import READS_NO_CRITIC, write_critic_markers, write_no_critic
    from pipeline.learn.methods.erpv import NO_CRITIC, critic_dir

    write_no_critic(tmp_path / "a", "CarRacing-v3")
    write_critic_markers(tmp_path / "b", "CarRacing-v3")
    assert critic_dir(tmp_path / "a") == tmp_path / "a" / "erpv"
    assert (critic_dir(tmp_path / "a") / NO_CRITIC).is_file()
    for method in METHOD_MODULES:
        if method != "erpv":
            marker = (tmp_path / "a" / method / READS_NO_CRITIC).read_bytes()
            assert marker == (tmp_path / "b" / method / READS_NO_CRITIC).read_bytes()
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == sorted(METHOD_MODULES)


def test_the_critic_stage_reads_the_method_names_alone():
    """pretrain_critic imports the table for its names (a marker per method) and loads no method
    through it: its deps need no method module besides erpv's."""
    closure = _stage_closure("stages.pretrain_critic")
    assert TABLE in closure and not _looks_up_methods(closure)
    assert _looks_up_methods(_stage_closure("stages.policy_teacher"))  # the check can see a use


def test_the_closure_follows_imports():
    """The closure finds a module reached only through another one (and function-local imports)."""
    closure = import_closure(REPO / "stages" / "train.py")
    assert REPO / "pipeline" / "learn" / "training.py" in closure
    assert (
        REPO / "pipeline" / "learn" / "methods" / "base.py" in closure
    )  # through the method table
    assert REPO / "pipeline" / "__init__.py" in closure
    hybrid = import_closure(_method_file("hybrid_ppo"))
    assert REPO / "pipeline" / "learn" / "shaping" / "potential.py" in hybrid
    assert REPO / "pipeline" / "learn" / "methods" / "ppo.py" in hybrid  # a method built on another


def test_the_method_table_imports_no_method():
    """The table imports a method's module on use: importing it runs no method's code (the
    policy teacher and evaluate load one agent through it)."""
    closure = import_closure(REPO / "pipeline" / "learn" / "methods" / "table.py")
    methods = {_method_file(m) for m in METHOD_MODULES}
    assert not closure & methods, sorted(str(p.relative_to(REPO)) for p in closure & methods)
    assert not any((REPO / "pipeline" / "learn" / "shaping") in p.parents for p in closure)


def _deps(stage: str) -> list[Path]:
    return next([REPO / d for d in deps] for name, _, deps in _stages() if name == stage)


def _depends_on(stage: str, path: str) -> bool:
    target = REPO / path
    return any(d == target or d in target.parents or target in d.parents for d in _deps(stage))


def test_the_hybrid_reward_does_not_rerun_the_critics():
    """Editing pipeline/learn/shaping (hybrid VLM-PPO's reward) must not rerun pretrain_critic@<env>,
    nor, through it, every ERPv run: C_V's stage imports ERPv's method alone."""
    closure = import_closure(_module_file("stages.pretrain_critic"))
    assert not any((REPO / "pipeline" / "learn" / "shaping") in p.parents for p in closure)
    assert not _depends_on("pretrain_critic", "pipeline/learn/shaping")
    assert not _depends_on("pretrain_critic", "pipeline/learn/methods/hybrid_ppo.py")
    assert _depends_on(
        "pretrain_critic", "pipeline/learn/methods/erpv.py"
    )  # the check can see deps


def test_compare_reads_curves_only():
    """compare draws the runs' curves: it depends on no agent, dataset or env code."""
    for code in (
        "pipeline/learn/agents",
        "pipeline/learn/methods",
        "pipeline/dataset",
        "pipeline/core/envs",
    ):
        assert not _depends_on("compare", code), code
    assert _depends_on("compare", "pipeline/learn/curves.py")


def test_every_output_but_the_metrics_is_ignored_before_its_stage_first_succeeds():
    """DVC writes a .gitignore beside an output once its stage succeeds; a first run that fails
    (a new env, a new run) must not leave partial outputs for `git add -A`. Every output path
    of dvc.yaml, its ${...} filled with a name no run has, is ignored by git, except the
    outputs git tracks (`cache: false`: the metrics and costs)."""
    stages = yaml.safe_load((REPO / "dvc.yaml").read_text())["stages"]
    paths, tracked = set(), set()
    for stage in stages.values():
        stage = stage.get("do", stage)  # a foreach stage's body
        for out in stage.get("outs", []) + stage.get("metrics", []) + stage.get("plots", []):
            path = out if isinstance(out, str) else next(iter(out))
            path = re.sub(r"\$\{[^}]*\}", "never-built-0", path)
            paths.add(path)
            if isinstance(out, dict) and (next(iter(out.values())) or {}).get("cache") is False:
                tracked.add(path)  # git tracks it (the metrics, the costs)
    assert tracked and paths - tracked
    check = subprocess.run(["git", "check-ignore", "--no-index", *sorted(paths - tracked)],
                           cwd=REPO, capture_output=True, text=True)  # fmt: skip
    ignored = set(check.stdout.split())
    assert ignored == paths - tracked, sorted(paths - tracked - ignored)
