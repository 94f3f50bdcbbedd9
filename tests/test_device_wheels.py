"""benchmarks/device_wheels.py: dm_control stripped to what the control suite reads, and wheels
packed into batches that each fit one device call's carry."""

from __future__ import annotations

import base64
import hashlib
import subprocess
import sys
import tarfile
import zipfile

import pytest

from benchmarks.device_wheels import (
    DM_CONTROL_UNUSED,
    SITE_UNUSED,
    freeze_names,
    imported_distributions,
    pack,
    python_specific,
    site_archive,
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


def test_a_version_tagged_pure_wheel_is_fetched_again_for_another_python():
    assert python_specific("multiprocess-0.70.19-py311-none-any.whl")
    assert python_specific("mujoco-3.17.0-cp311-cp311-manylinux_2_28_x86_64.whl")
    assert python_specific("polars_runtime_32-2.1.0-cp311-abi3-manylinux2014_x86_64.whl")
    assert not python_specific("dm_control-1.0.50-py3-none-any.whl")
    assert not python_specific("braceexpand-0.1.7-py2.py3-none-any.whl")


def test_site_archive_installs_for_the_device_python_without_the_unused_parts(tmp_path):
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    mujoco = _dist_wheel(
        wheels / "mujoco-3.17.0-cp312-cp312-manylinux_2_28_x86_64.whl", "mujoco", "3.17.0",
        "cp312-cp312-manylinux_2_28_x86_64",
        {"mujoco/__init__.py": "", "mujoco/libmujoco.so": b"\1" * 64,
         "mujoco/experimental/studio/app.so": b"\0" * 4096, "mujoco/testdata/m.xml": "<x/>",
         "mujoco/include/mujoco.h": "", "mujoco/render_test.py": ""},
    )  # fmt: skip
    pure = _dist_wheel(
        wheels / "braceexpand-0.1.7-py2.py3-none-any.whl", "braceexpand", "0.1.7",
        "py2.py3-none-any", {"braceexpand.py": "X = 1\n"},
    )  # fmt: skip
    archive = site_archive([mujoco, pure], tmp_path / "out", "3.12")
    with tarfile.open(archive) as tar:
        names = set(tar.getnames())
    assert {"mujoco/__init__.py", "mujoco/libmujoco.so", "braceexpand.py"} <= names
    assert "mujoco-3.17.0.dist-info/RECORD" in names  # installed by pip, not unzipped
    assert not [n for n in names if n.startswith(SITE_UNUSED) or n.endswith("_test.py")]
    # a wheel for another Python is refused by pip's tag check, not packed
    other = _dist_wheel(
        wheels / "mujoco-3.17.0-cp311-cp311-manylinux_2_28_x86_64.whl", "mujoco", "3.17.0",
        "cp311-cp311-manylinux_2_28_x86_64", {"mujoco/__init__.py": ""},
    )  # fmt: skip
    with pytest.raises(subprocess.CalledProcessError):
        site_archive([other], tmp_path / "out2", "3.12")
    assert not (tmp_path / "out2" / "site.tar.xz").exists()


def _dist_wheel(path, name, version, tag, members):
    info = f"{name}-{version}.dist-info"
    with zipfile.ZipFile(path, "w") as z:
        for member, data in members.items():
            z.writestr(member, data)
        z.writestr(f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        pure = "true" if tag.endswith("none-any") else "false"
        tags = "".join(
            f"Tag: {py}-{abi}-{plat}\n"
            for py in tag.split("-")[0].split(".")
            for abi in [tag.split("-")[1]]
            for plat in [tag.split("-")[2]]
        )
        z.writestr(
            f"{info}/WHEEL", f"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: {pure}\n{tags}"
        )
        z.writestr(f"{info}/RECORD", "")
    return path
