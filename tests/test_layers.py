"""The package's architecture: two wings and a door, and within them layers with no import
going up and no cycle.

`pipeline/` is `core` (foundations), `teach` (stage one: rollouts, labels, masks, the teacher),
`dataset` (the door: what stage one shares and stage two reads), `learn` (stage two: agents,
methods, evaluation), `loops` (what spans both wings: labelling rounds, the knowledge page) and
`tools` (command lines over all of it). Two rules are never broken: stage one imports nothing of
stage two, and stage two imports nothing of stage one (it reads the dataset alone).

Within that, a unit is a wing's module or subpackage (`core.io`, `teach.labels`); bottom to top,
a unit may import units of lower layers only (and itself). Function-local and TYPE_CHECKING
imports count: an import that only dodges a cycle is still a cycle.
"""

import ast

from tests.conftest import REPO

WINGS = ("core", "teach", "dataset", "learn", "loops", "tools")
# wing -> the wings it never imports (besides the order of LAYERS below)
NEVER = {
    "core": {"teach", "dataset", "learn", "loops", "tools"},
    "teach": {"dataset", "learn", "loops", "tools"},  # stage one: nothing of stage two
    "dataset": {"learn", "loops", "tools"},
    "learn": {"teach", "loops", "tools"},  # stage two: the dataset, never stage one
    "loops": {"tools"},
}

LAYERS: list[set[str]] = [
    {"core.errors"},  # the base of the project's error types
    # leaves: atomic writes; env ids; label/mask table schemas; the float kernels of every CPU;
    # a brought env's code as a file its stages depend on
    {"core.io", "core.env_registry", "core.tables", "core.kernels", "core.env_code"},
    {"core.config"},  # params.yaml -> typed config
    # env factory; the append-only parquet store; Ray batches; keys -> cache -> batched compute;
    # frame stacking
    {"core.envs", "core.segments", "core.distributed", "core.cached_map", "core.stacking"},
    {"core.policy"},  # a trained agent as stage one acts with it: loaded by its stage
    {"teach.labels"},  # tasks, prompts, parsers, schema, status vocabulary, the label cache
    {"teach.teachers"},  # back ends that answer prompts (and asking through the cache)
    {"teach.rollouts"},  # collect (behaviours act on teachers), shard format, reader, verify
    {"teach.masks"},  # segmenters and the masks stage over rollouts + objects labels
    # label stage + audit; the labelling teacher acting alone
    {"teach.labelling", "teach.teacher_eval"},
    {"dataset"},  # the shareable dataset: shards, Hugging Face dataset, card; its readers
    {"learn.shaping"},  # hybrid PBRS: potentials, prototypes, the shaped reward
    {"learn.agents"},  # PPO and the SAC family on one base, replay, checkpoints, resume state
    # curve TSVs (dvclive layout), figures; deployed policies, evaluation
    {"learn.curves", "learn.evaluation"},
    {"learn.methods"},  # one unit per method (params, train, load) and the method table
    {"learn.training", "learn.critic", "learn.play"},  # train logic; C_V's pre-training; vlmrl-play
    {"loops.knowledge"},  # the page of teachers and agents (reads the method table)
    {"loops.rounds"},  # labelling rounds: collect, label, masks, dataset and train, per round
    # vlmrl-verify; vlmrl-seeds; vlmrl-lockcheck and its code deps
    {"tools.integrity", "tools.experiments", "tools.reproducibility", "tools.code_deps"},
    {"tools.sweeps"},  # vlmrl-sweep: a benchmark table as DVC experiments
]
LAYER_OF = {unit: i for i, layer in enumerate(LAYERS) for unit in layer}
# Known upward imports, each with its reason; the list is to shrink, not grow.
KNOWN_UPWARD: set[str] = set()


def _unit(module: str) -> str | None:
    parts = module.split(".")
    if parts[0] != "pipeline" or len(parts) < 2:
        return None
    if parts[1] == "dataset" or len(parts) == 2:
        return parts[1]
    return f"{parts[1]}.{parts[2]}"


def _wing(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if parts[0] == "pipeline" and len(parts) > 1 else None


def _edges() -> dict[str, set[str]]:
    """module -> project modules it imports (dotted names), for every file under pipeline/."""
    edges: dict[str, set[str]] = {}
    for path in sorted((REPO / "pipeline").rglob("*.py")):
        module = ".".join(path.relative_to(REPO).with_suffix("").parts).removesuffix(".__init__")
        package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
        found = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                found.update(a.name for a in node.names if a.name.startswith("pipeline."))
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = package.split(".")
                    base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
                if base.startswith("pipeline"):
                    found.add(base)
        edges[module] = found
    return edges


def test_the_package_top_is_the_wings():
    top = {p.name for p in (REPO / "pipeline").iterdir() if not p.name.startswith("__")}
    assert top == set(WINGS), f"pipeline/ holds the wings only: {sorted(top - set(WINGS))}"


def test_every_unit_has_a_layer():
    units = {_unit(m) for m in _edges()} - {None} - set(WINGS)
    assert units <= set(LAYER_OF), f"put these in LAYERS: {sorted(units - set(LAYER_OF))}"


def test_stage_one_and_stage_two_never_import_each_other():
    crossing = [
        f"{module} -> {target}"
        for module, imports in _edges().items()
        for target in imports
        if (wing := _wing(module)) and _wing(target) in NEVER.get(wing, set())
    ]
    assert not crossing, "imports across the wings' boundary:\n" + "\n".join(sorted(crossing))


def test_no_module_imports_a_layer_above_it():
    upward = []
    for module, imports in _edges().items():
        unit = _unit(module)
        for target in imports:
            other = _unit(target)
            if (
                unit in LAYER_OF
                and other in LAYER_OF
                and other != unit
                and (LAYER_OF[other] >= LAYER_OF[unit])
            ):
                upward.append(f"{module} -> {target}")
    upward = [edge for edge in upward if edge not in KNOWN_UPWARD]
    assert not upward, "imports that go up (or sideways) a layer:\n" + "\n".join(sorted(upward))


def test_no_import_cycle_between_modules():
    edges = _edges()
    modules = set(edges)

    def resolve(target: str) -> str | None:  # `from pipeline.x import name` names module x
        while target and target not in modules:
            target = target.rpartition(".")[0]
        return target or None

    graph = {m: {r for t in ts if (r := resolve(t)) and r != m} for m, ts in edges.items()}
    state: dict[str, int] = {}  # 1: on the stack, 2: done
    cycle: list[str] = []

    def visit(node: str, stack: list[str]) -> bool:
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycle.extend([*stack[stack.index(nxt) :], nxt])
                return True
            if nxt not in state and visit(nxt, [*stack, nxt]):
                return True
        state[node] = 2
        return False

    for module in sorted(graph):
        if module not in state and visit(module, [module]):
            break
    assert not cycle, "import cycle: " + " -> ".join(cycle)


def test_the_checks_see_function_local_imports(tmp_path):
    """A function-local import is an import (the checks would catch one that goes up)."""
    edges = _edges()
    assert "pipeline.learn.shaping.potential" in edges["pipeline.learn.methods.hybrid_ppo"]
    assert any(t.startswith("pipeline.teach.teachers.") for t in edges["pipeline.teach.teachers"])


LONG_MODULE = 450  # lines
REASON = "Why one module of this length:"


def test_a_long_module_says_at_its_top_why_it_is_one_module():
    """Past ~450 lines a module must say why it is not split (in its docstring, after REASON):
    the next person to grow it reads the reason, or splits it."""
    unexplained = []
    for path in sorted((REPO / "pipeline").rglob("*.py")):
        source = path.read_text()
        if len(source.splitlines()) > LONG_MODULE and REASON not in (
            ast.get_docstring(ast.parse(source)) or ""
        ):
            unexplained.append(f"{path.relative_to(REPO)} ({len(source.splitlines())} lines)")
    assert not unexplained, f"modules over {LONG_MODULE} lines without {REASON!r}: {unexplained}"
