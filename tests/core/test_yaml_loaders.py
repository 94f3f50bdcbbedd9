"""DVC reads params.yaml and dvc.lock with ruamel.yaml's C loader when ruamel.yaml.clib is
installed (a dependency: it makes `dvc status` ~40 % faster). libyaml speaks YAML 1.1, the pure
loader 1.2 (`on`, `yes`, `010` resolve differently): the files must mean the same to both."""

import pytest
from ruamel.yaml import YAML

from tests.conftest import REPO


@pytest.mark.parametrize("name", ["params.yaml", "dvc.yaml", "dvc.lock"])
def test_the_c_and_pure_loaders_read_the_same_values(name):
    c_loader = YAML(typ="safe")
    assert "clib" in c_loader.Parser.__module__, "ruamel.yaml.clib is not installed"
    text = (REPO / name).read_text()
    assert c_loader.load(text) == YAML(typ="safe", pure=True).load(text)
