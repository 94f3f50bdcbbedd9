"""`env_code`: the file that makes a brought env's code a dependency of its stages. Editing any
Python file of the factory's package changes that env's file and no other env's; an installed
module is named by its distribution's version; a module that is not there is refused with its
key."""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path

import pytest
import yaml

from pipeline.core.env_code import EnvCodeError, env_code, module_code
from stages import env_code as stage
from tests.conftest import tiny_params_dict

FACTORY = "def make(**kwargs):\n    from .util import build\n    return build(**kwargs)\n"


@pytest.fixture()
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A project with a factory package `arm_envs` (two modules) and params for two envs: the
    brought one and a shipped one."""
    package = tmp_path / "arm_envs"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "arm.py").write_text(FACTORY)
    (package / "util.py").write_text("def build(**kwargs):\n    return None\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    yield tmp_path
    for name in [m for m in sys.modules if m == "arm_envs" or m.startswith("arm_envs.")]:
        del sys.modules[name]


def test_a_package_is_its_files(project: Path) -> None:
    code = module_code("arm_envs.arm", project, "env.arm.make.factory")
    assert sorted(code["files"]) == ["arm_envs/__init__.py", "arm_envs/arm.py", "arm_envs/util.py"]
    before = code["files"]["arm_envs/util.py"]
    # an edit of a module the factory imports, not of the factory's own file
    (project / "arm_envs" / "util.py").write_text("def build(**kwargs):\n    return 1\n")
    after = module_code("arm_envs.arm", project, "env.arm.make.factory")["files"]
    assert after["arm_envs/util.py"] != before
    assert after["arm_envs/arm.py"] == code["files"]["arm_envs/arm.py"]


def test_an_installed_module_is_its_distribution(project: Path) -> None:
    code = module_code("gymnasium.envs.classic_control", project, "env.x.make.package")
    assert code == {
        "module": "gymnasium.envs.classic_control",
        "distributions": {"gymnasium": importlib.metadata.version("gymnasium")},
    }


def test_a_missing_module_names_its_key(project: Path) -> None:
    with pytest.raises(EnvCodeError, match=r"env\.arm\.make\.factory: no module 'arm_envs\.nope'"):
        module_code("arm_envs.nope", project, "env.arm.make.factory")
    with pytest.raises(EnvCodeError, match=r"env\.arm\.make\.package: module 'no_such_pkg\.x'"):
        module_code("no_such_pkg.x", project, "env.arm.make.package")


def test_a_shipped_env_is_its_id() -> None:
    assert env_code("cartpole-swingup", None, Path.cwd()) == {"env": "cartpole-swingup"}


def _params(project: Path, factory: str) -> None:
    """params.yaml of MountainCar-v0 (shipped) and `arm`, brought by `factory`."""
    params = tiny_params_dict()
    params["envs"].append("arm")
    params["env"]["arm"] = {
        "image_size": 32, "action_repeat": 1, "max_episode_steps": 50, "include_state": True,
        "make": {"factory": factory},
        "labels": {"task_description": "reach", "action_names": ["torque"],
                   "milestones": {"FAR": 0.0, "NEAR": 1.0}, "objects": ["arm"]},
    }  # fmt: skip
    params["collect"]["arm"] = {"behaviour": "random", "episodes": 1, "seed": 0,
                                "shard_max_samples": 100}  # fmt: skip
    params["label"]["per_env"]["arm"] = {"teacher": {"backend": "random", "seed": 0}}
    (project / "params.yaml").write_text(yaml.safe_dump(params))


def test_the_stage_writes_one_file_per_env_and_only_the_edited_env_changes(project: Path) -> None:
    """Two runs of the stage around an edit of the factory's package: the brought env's file
    changes, the shipped env's bytes do not (so DVC reruns the brought env's stages alone)."""
    _params(project, "arm_envs.arm:make")
    out = project / "data" / "env_code"
    assert stage.main(["--params", "params.yaml", "--out", str(out)]) == 0
    first = {p.name: p.read_bytes() for p in out.iterdir()}
    assert sorted(first) == ["MountainCar-v0.json", "arm.json"]
    assert sorted(json.loads(first["arm.json"])["factory"]["files"]) == [
        "arm_envs/__init__.py", "arm_envs/arm.py", "arm_envs/util.py"
    ]  # fmt: skip
    (project / "arm_envs" / "util.py").write_text("def build(**kwargs):\n    return 2\n")
    assert stage.main(["--params", "params.yaml", "--out", str(out)]) == 0
    second = {p.name: p.read_bytes() for p in out.iterdir()}
    assert second["MountainCar-v0.json"] == first["MountainCar-v0.json"]
    assert second["arm.json"] != first["arm.json"]


def test_the_stage_refuses_a_missing_factory_and_writes_nothing(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _params(project, "arm_envs.gone:make")
    assert stage.main(["--params", "params.yaml", "--out", "data/env_code"]) == 2
    assert "env.arm.make.factory: no module 'arm_envs.gone'" in capsys.readouterr().err
    assert not (project / "data" / "env_code").exists()
