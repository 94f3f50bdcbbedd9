"""The method table imports a method's module on use: importing the table runs no method's
code, and loading a saved agent imports that agent's method alone (the policy teacher and
evaluate load one agent; train@<run> depends on its own method, tests/test_dvc_deps.py)."""

from __future__ import annotations

import json
import subprocess
import sys

from pipeline.learn.methods.base import Method
from pipeline.learn.methods.table import METHOD_MODULES, METHODS
from tests.conftest import REPO


def test_every_entry_is_the_method_it_is_named_after():
    assert list(METHODS) == list(METHOD_MODULES)
    for name, method in METHODS.items():
        assert isinstance(method, Method) and method.name == name


def test_unknown_names_are_not_methods_and_import_nothing():
    assert "ppo" in METHODS and "ppoo" not in METHODS and len(METHODS) == len(METHOD_MODULES)


SCRIPT = """
import json, sys, tempfile
from pipeline.learn.methods.table import load_agent

def loaded():
    return sorted(m for m in sys.modules if m.startswith(("pipeline.learn.methods.", "pipeline.learn.agents.",
                                                          "pipeline.learn.shaping")))

print(json.dumps(loaded()))
from pipeline.learn.agents.ppo import ActorCritic
with tempfile.TemporaryDirectory() as d:
    ActorCritic(2, 3, 8).save(d, {"method": "ppo"})
    load_agent(d)
print(json.dumps(loaded()))
"""


def test_loading_a_ppo_agent_imports_ppo_alone():
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.splitlines()
    at_import, after_load = json.loads(out[0]), json.loads(out[1])
    methods = {entry.split(":")[0] for entry in METHOD_MODULES.values()}
    assert not methods & set(at_import), at_import
    assert methods & set(after_load) == {"pipeline.learn.methods.ppo"}, after_load
    for other in (
        "pipeline.learn.methods.semore",
        "pipeline.learn.methods.erpv",
        "pipeline.learn.agents.off_policy",
    ):
        assert other not in after_load
    assert not any(m.startswith("pipeline.learn.shaping") for m in after_load)
