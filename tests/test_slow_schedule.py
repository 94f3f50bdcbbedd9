"""The slow set's schedule (tests/conftest.py's collection hook, `--dist loadgroup
--no-loadscope-reorder`): long tests that name their xdist group start first, every other test
keeps its module's group, as under `loadscope`."""

import re

import pytest

from tests.conftest import REPO, pytest_collection_modifyitems


class _Item:
    def __init__(self, nodeid: str, group: str | None = None):
        self.nodeid = nodeid
        self.marks = [pytest.mark.xdist_group(group).mark] if group else []

    def get_closest_marker(self, name):
        return next((m for m in self.marks if m.name == name), None)

    def add_marker(self, marker):
        self.marks.append(marker.mark)

    def group(self) -> str:
        return self.get_closest_marker("xdist_group").args[0]


def test_named_groups_go_first_and_the_rest_keep_their_modules_group_and_order():
    items = [
        _Item("tests/a.py::test_one"),
        _Item("tests/b.py::test_long", group="long"),
        _Item("tests/a.py::test_two[x]"),
        _Item("tests/c/d.py::test_three"),
        _Item("tests/b.py::test_longer", group="longer"),
    ]
    pytest_collection_modifyitems(items)
    assert [i.nodeid.split("::")[1] for i in items] == [
        "test_long", "test_longer", "test_one", "test_two[x]", "test_three",
    ]  # fmt: skip
    assert [i.group() for i in items] == [
        "long", "longer", "tests/a.py", "tests/a.py", "tests/c/d.py",
    ]  # fmt: skip


def test_the_dvc_pipeline_module_is_two_groups_and_every_slow_command_schedules_them():
    """Every test of the DVC pipeline module (some 20 minutes of one worker's time) names one of
    two groups, and each command that runs the slow set passes the flags the schedule needs."""
    source = (REPO / "tests" / "test_dvc_pipeline.py").read_text()
    marks = re.findall(r"\n@(FIRST|SECOND)\ndef (test_\w+)\(", source)
    tests = re.findall(r"\ndef (test_\w+)\(", source)
    assert sorted(t for _, t in marks) == sorted(tests) and {g for g, _ in marks} == {
        "FIRST", "SECOND",
    }  # fmt: skip
    flags = "-m slow -n 2 --dist loadgroup --no-loadscope-reorder"
    for path in (".ci/run", "README.md", "docs/guide.md"):
        text = " ".join((REPO / path).read_text().split())  # a command may wrap
        assert flags in text and "loadscope`" not in text and "loadscope >" not in text, path
