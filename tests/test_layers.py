"""The package's layers: no module imports one above it, and no import cycle.

Bottom to top; a unit is a top-level module (`pipeline/io.py`) or a subpackage
(`pipeline/labels/`). A unit may import units of lower layers only (and itself). Function-local
and TYPE_CHECKING imports count: an import that only dodges a cycle is still a cycle.
"""

import ast

from tests.conftest import REPO

LAYERS: list[set[str]] = [
    {"errors"},  # the base of the project's error types
    # leaves: atomic writes; env ids; label/mask table schemas; the float kernels of every CPU
    {"io", "env_registry", "tables", "kernels"},
    {"config"},  # params.yaml -> typed config
    # env factory; the append-only parquet store; Ray batches; keys -> cache -> batched compute
    {"envs", "segments", "distributed", "cached_map"},
    {"labels"},  # tasks, prompts, parsers, schema, status vocabulary, the label cache
    {"teachers"},  # back ends that answer prompts (and asking through the cache)
    {"rollouts"},  # collect (behaviours act on teachers), shard format, reader, verify
    {"masks"},  # segmenters and the masks stage over rollouts + objects labels
    {"labelling", "dataset", "shaping", "teacher_eval"},  # label stage + audit; shareable
    # dataset; hybrid PBRS; the labelling teacher acting alone
    {"agents"},  # PPO and the SAC family on one base, replay, checkpoints, resume state
    {"curves", "evaluation"},  # curve TSVs (dvclive layout), figures; deployed policies, evaluation
    {"methods"},  # one unit per method (params, train, load) and the method table
    # train logic; C_V's pre-training; vlmrl-verify; vlmrl-seeds; vlmrl-lockcheck; the page of
    # teachers and agents (reads the method table)
    {"training", "critic", "integrity", "experiments", "reproducibility", "knowledge"},
    {"sweeps"},  # vlmrl-sweep: a benchmark table as DVC experiments (on vlmrl-seeds statistics)
    {"rounds"},  # labelling rounds: collect, label, masks, dataset and train, per round
]
LAYER_OF = {unit: i for i, layer in enumerate(LAYERS) for unit in layer}
# Known upward imports, each with its reason; the list is to shrink, not grow. The `policy`
# teacher back end loads an agent checkpoint (a teacher of known quality) through the method
# table, above the teachers' layer. The table imports a method on use, so this costs the teacher
# no method's code (tests/test_dvc_deps.py); the edges go when the agent reaches the teacher from
# the stage that builds it, or a checkpoint reader sits below the teachers. The `checkpoint`
# collect behaviour acts with a trained agent's directory (its safetensors and known architecture,
# so that a shared actor file runs no code) for the same reason.
KNOWN_UPWARD = {
    "pipeline.rollouts.behaviours -> pipeline.agents.checkpoint",
    "pipeline.rollouts.behaviours -> pipeline.evaluation",
    "pipeline.rollouts.behaviours -> pipeline.methods.table",
    "pipeline.teachers.policy -> pipeline.agents.checkpoint",
    "pipeline.teachers.policy -> pipeline.dataset.stacking",
    "pipeline.teachers.policy -> pipeline.methods.table",
}


def _unit(module: str) -> str | None:
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


def test_every_unit_has_a_layer():
    units = {_unit(m) for m in _edges()} - {None}
    assert units <= set(LAYER_OF), f"put these in LAYERS: {sorted(units - set(LAYER_OF))}"


def test_no_module_imports_a_layer_above_it():
    upward = []
    for module, imports in _edges().items():
        unit = _unit(module)
        for target in imports:
            other = _unit(target)
            if unit and other and other != unit and LAYER_OF[other] >= LAYER_OF[unit]:
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
    assert "pipeline.shaping.potential" in edges["pipeline.methods.hybrid_ppo"]
    assert any(t.startswith("pipeline.teachers.") for t in edges["pipeline.teachers"])
