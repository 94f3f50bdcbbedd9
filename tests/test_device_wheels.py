"""benchmarks/device_wheels.py: dm_control stripped to what the control suite reads, and wheels
packed into batches that each fit one device call's carry."""

from __future__ import annotations

import base64
import hashlib
import subprocess
import sys
import zipfile

import pytest

from benchmarks.device_wheels import (
    DM_CONTROL_UNUSED,
    freeze_names,
    imported_distributions,
    pack,
    strip_wheel,
)

DIST = "dm_control-1.0.50.dist-info"


def _wheel(path, members):
    with zipfile.ZipFile(path, "w") as z:
        for name, data in members.items():
            z.writestr(name, data)
        z.writestr(f"{DIST}/METADATA", "Metadata-Version: 2.1\nName: dm_control\nVersion: 1.0.50\n")
        z.writestr(
            f"{DIST}/WHEEL",
            "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        )
        z.writestr(f"{DIST}/RECORD", "stale,,\n")
    return path


def test_stripped_dm_control_keeps_the_suite_and_installs(tmp_path):
    src = _wheel(
        tmp_path / "dm_control-1.0.50-py3-none-any.whl",
        {
            "dm_control/__init__.py": "",
            "dm_control/suite/__init__.py": "TASK = 'cartpole'\n",
            "dm_control/suite/cartpole.xml": "<mujoco/>",
            "dm_control/locomotion/walkers/assets/big.stl": b"\0" * 4096,
            "dm_control/manipulation/__init__.py": "",
            "dm_control/blender/x.py": "",
        },
    )
    dst = tmp_path / "stripped" / src.name
    assert strip_wheel(src, dst, DM_CONTROL_UNUSED) == 3
    with zipfile.ZipFile(dst) as z:
        names = set(z.namelist())
        record = z.read(f"{DIST}/RECORD").decode().splitlines()
        suite = z.read("dm_control/suite/__init__.py")
    assert "dm_control/suite/cartpole.xml" in names
    assert not any(n.startswith(DM_CONTROL_UNUSED) for n in names)
    digest = base64.urlsafe_b64encode(hashlib.sha256(suite).digest()).rstrip(b"=").decode()
    assert f"dm_control/suite/__init__.py,sha256={digest},{len(suite)}" in record
    assert not any(row.startswith(DM_CONTROL_UNUSED) for row in record)
    target = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--target",
         str(target), str(dst)],
        check=True,
    )  # fmt: skip
    done = subprocess.run(
        [sys.executable, "-c", "import dm_control.suite as s; print(s.__file__, s.TASK)"],
        env={"PYTHONPATH": str(target)}, capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert done.stdout.startswith(str(target)) and "cartpole" in done.stdout


def test_a_wheel_without_the_parts_to_strip_is_refused(tmp_path):
    src = _wheel(tmp_path / "dm_control-9-py3-none-any.whl", {"dm_control/suite/a.py": ""})
    with pytest.raises(ValueError, match="nothing under"):
        strip_wheel(src, tmp_path / "out.whl", DM_CONTROL_UNUSED)


def _file(path, size):
    path.write_bytes(b"\0" * size)
    return path


def test_batches_fit_the_limit_and_hold_every_wheel(tmp_path):
    sizes = [50, 30, 30, 20, 10, 5, 5]
    wheels = [_file(tmp_path / f"w{i}.whl", s) for i, s in enumerate(sizes)]
    batches = pack(wheels, 60)
    assert all(b.size <= 60 for b in batches)
    assert sorted(w.name for b in batches for w in b.wheels) == sorted(w.name for w in wheels)
    assert len(batches) == 3  # 150 bytes in 60-byte calls: 3 is the least possible


def test_a_wheel_over_the_limit_is_named(tmp_path):
    big = _file(tmp_path / "polars_runtime.whl", 100)
    with pytest.raises(ValueError, match=r"polars_runtime\.whl"):
        pack([big, _file(tmp_path / "small.whl", 1)], 60)


def test_freeze_and_importtime_parsing():
    freeze = "# comment\nnumpy==2.4.6\nPolars_Runtime-32==2.1.0\ntorch @ file:///x.whl\n-e .\n"
    assert freeze_names(freeze) == {"numpy", "polars-runtime-32", "torch"}
    log = (
        "import time: self [us] | cumulative | imported package\n"
        "import time:       120 |        900 | numpy\n"
        "import time:        10 |         10 |   numpy._core.multiarray\n"
        "import time:        50 |         50 | not_a_distribution_module\n"
    )
    assert imported_distributions(log) == {"numpy"}
