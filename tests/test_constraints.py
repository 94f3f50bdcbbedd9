"""constraints.txt, the versions a fresh `./setup.sh` installs, agrees with pyproject.toml: it
names every dependency, each at a version pyproject's specifier admits, so a pin changed in one
and not the other fails here rather than as a resolver conflict on a fresh machine."""

import tomllib

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from tests.conftest import REPO


def _locked() -> dict[str, Version]:
    locked: dict[str, Version] = {}
    for n, line in enumerate((REPO / "constraints.txt").read_text().splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        name, sep, version = line.partition("==")
        assert sep and name and version, f"constraints.txt:{n}: not `name==version`: {line!r}"
        key = canonicalize_name(name)
        assert key not in locked, f"constraints.txt:{n}: {name} is pinned twice"
        locked[key] = Version(version)
    return locked


def _declared() -> list[Requirement]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    return [Requirement(r) for r in (*project["dependencies"], *extras["dev"], *extras["ray"])]


def test_every_dependency_is_locked_at_a_version_pyproject_admits():
    locked = _locked()
    for req in _declared():
        key = canonicalize_name(req.name)
        assert key in locked, f"{req.name} ({req}) is missing from constraints.txt"
        assert req.specifier.contains(locked[key], prereleases=True), (
            f"constraints.txt pins {req.name}=={locked[key]}, outside pyproject.toml's {req}: "
            "refresh constraints.txt as its header says"
        )


def test_setup_installs_with_the_constraints():
    # the quick start's install, and so CI's: pip reads constraints.txt only when told to
    assert "pip install -c constraints.txt -e '.[dev,ray]'" in (REPO / "setup.sh").read_text()
