"""Wheels for a GPU machine that has torch but not the rest, in batches that each fit one call's
carry: the `device` tool's image has torch, transformers, pyarrow and pandas, and lacks mujoco,
dm_control, polars and gymnasium (about 40 of dm_control's 56.5 MB are assets of its locomotion,
manipulation and blender parts, which the control suite never reads), and a call carries 64 MiB
together with the working tree.

The recipe (each device call within the machine's idle release of the one before, or the
installed packages are gone):

    # 1. on the device: what its image has
    pip freeze > $OUT/device_freeze.txt; python -V > $OUT/python.txt
    # 2. here: the wheels of every distribution a pixel training run imports that the device
    #    lacks, at this environment's versions; dm_control stripped to what the suite reads
    #    (add --python-version 3.12 if python.txt says the device's Python is not this one's)
    python -m benchmarks.device_wheels --device-freeze device_freeze.txt --out wheelhouse
    # 3. on the device, one call per batch (carry: ["wheelhouse/batch1"], ...)
    pip install --no-index --no-deps wheelhouse/batch1/*.whl
    # 4. then
    pip install --no-deps --no-build-isolation -e . && MUJOCO_GL=egl vlmrl-sweep queue benchmarks/tables/pixels_paper.yaml ...

Where the batches need more than one call, `--site-archive` also installs every wheel here for
the device's Python (`pip install --target`, its tags checked), drops what the runs never read
(SITE_UNUSED) and writes `<out>/site.tar.xz`: 55.7 MB for the pixel benchmark's 35
distributions, whose wheels take 102 MiB. One call carries it; the device unpacks it into a
folder on PYTHONPATH (benchmarks/device_pixels.sh does).

Which distributions a run imports is read from `python -X importtime` of a command (by default
the test that trains every pixel method a few steps from a pipeline-built dataset), not listed by
hand; imports that only another code path makes are not seen (pass that path's command).
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import importlib.metadata as metadata
import json
import re
import shutil
import subprocess
import sys
import tarfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name as normalize  # PEP 503: the name pip compares
from packaging.utils import parse_wheel_filename

MIB = 1024 * 1024
CARRY_BYTES = 64 * MIB  # the device tool's carry, working tree included
TRACE_COMMAND = [
    "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider", "tests/learn/test_pixel_methods.py",
    "-k", "test_each_pixel_method_trains",
]  # fmt: skip
# dm_control's parts that the control suite (dm_control.suite) never imports or reads
DM_CONTROL_UNUSED = (
    "dm_control/locomotion/",
    "dm_control/manipulation/",
    "dm_control/blender/",
)
# parts of installed distributions that no pixel run imports or reads: mujoco's bundled studio
# app, test data, C headers and USD exporter (41 of its 72 MB), and every package's own tests
SITE_UNUSED = (
    "mujoco/experimental/",
    "mujoco/testdata/",
    "mujoco/include/",
    "mujoco/usd/",
)
SITE_UNUSED_SUFFIXES = ("_test.py",)
_IMPORT_LINE = re.compile(r"import time:\s+\d+ \|\s+\d+ \|\s*(\S+)")


def imported_distributions(importtime_log: str) -> set[str]:
    """Distributions (normalized) whose top-level modules a `python -X importtime` log shows."""
    modules = {
        m.group(1).split(".")[0] for m in map(_IMPORT_LINE.match, importtime_log.splitlines()) if m
    }
    owners = metadata.packages_distributions()
    return {normalize(d) for m in modules for d in owners.get(m, [])}


def freeze_names(freeze_text: str) -> set[str]:
    """Normalized names in a `pip freeze` (`name==v`, `name @ url`; comments and `-e` skipped)."""
    names = set()
    for line in freeze_text.splitlines():
        line = line.strip()
        if not line or line.startswith(("#", "-")):
            continue
        names.add(normalize(Requirement(line).name))
    return names


def strip_wheel(src: Path, dst: Path, drop_prefixes: tuple[str, ...]) -> int:
    """A copy of wheel `src` without the members under `drop_prefixes`, its RECORD rewritten to
    what is left (pip checks nothing against it, but `pip uninstall` reads it). Returns the number
    of members dropped; 0 means the prefixes matched nothing (a different wheel layout): an error."""
    with zipfile.ZipFile(src) as zin:
        records = [n for n in zin.namelist() if n.endswith(".dist-info/RECORD")]
        if len(records) != 1:
            raise ValueError(f"{src}: expected one .dist-info/RECORD, found {records}")
        record = records[0]
        kept = [i for i in zin.infolist() if not i.filename.startswith(drop_prefixes)]
        dropped = len(zin.infolist()) - len(kept)
        if dropped == 0:
            raise ValueError(f"{src}: nothing under {drop_prefixes} to strip")
        dst.parent.mkdir(parents=True, exist_ok=True)
        rows = []
        with zipfile.ZipFile(dst, "w", zipfile.ZIP_DEFLATED) as zout:
            for info in kept:
                if info.filename == record:
                    continue
                data = zin.read(info)
                zout.writestr(info, data, compress_type=zipfile.ZIP_DEFLATED)
                digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
                rows.append(f"{info.filename},sha256={digest.decode()},{len(data)}")
            rows.append(f"{record},,")
            zout.writestr(record, "\n".join(rows) + "\n")
    return dropped


@dataclass
class Batch:
    wheels: list[Path]
    size: int


def pack(wheels: list[Path], limit: int) -> list[Batch]:
    """First-fit decreasing: the fewest batches (near enough) of total size <= `limit` each."""
    too_big = [w for w in wheels if w.stat().st_size > limit]
    if too_big:
        raise ValueError(
            f"{', '.join(f'{w.name} ({w.stat().st_size / MIB:.1f} MiB)' for w in too_big)} "
            f"exceed one call's {limit / MIB:.1f} MiB: strip them or carry them in parts"
        )
    batches: list[Batch] = []
    for wheel in sorted(wheels, key=lambda w: w.stat().st_size, reverse=True):
        size = wheel.stat().st_size
        batch = next((b for b in batches if b.size + size <= limit), None)
        if batch is None:
            batch = Batch([], 0)
            batches.append(batch)
        batch.wheels.append(wheel)
        batch.size += size
    return batches


def working_tree_bytes(repo: Path) -> int:
    """Bytes of what the device tool copies besides the carry: files git tracks or would track."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=repo, capture_output=True, check=True,
    ).stdout  # fmt: skip
    return sum(
        (repo / p).stat().st_size for p in listed.decode().split("\0") if p and (repo / p).is_file()
    )


def python_specific(wheel_name: str) -> bool:
    """Whether a wheel is built for particular Pythons: any ABI tag but `none`, or an interpreter
    tag naming a version (multiprocess ships `-py311-none-any` for 3.11 alone)."""
    _, _, _, tags = parse_wheel_filename(wheel_name)
    return any(t.abi != "none" or t.interpreter not in ("py3", "py2") for t in tags)


def site_archive(wheels: list[Path], out: Path, python_version: str) -> Path:
    """`wheels` installed for CPython `python_version` on x86-64 Linux into `<out>/site`
    (`pip install --target`, which checks each wheel's tags), SITE_UNUSED removed, and packed as
    `<out>/site.tar.xz` (xz preset 9: the binaries of polars and mujoco shrink to ~55%)."""
    site = out / "site"
    if site.exists():
        shutil.rmtree(site)
    cmd = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index",
           "--no-compile", "--only-binary=:all:", "--target", str(site), "--implementation", "cp",
           "--python-version", python_version]  # fmt: skip
    for tag in ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64",
                "manylinux2014_x86_64"):  # fmt: skip
        cmd += ["--platform", tag]
    subprocess.run([*cmd, *map(str, wheels)], check=True)
    for folder in SITE_UNUSED:
        if (site / folder).is_dir():
            shutil.rmtree(site / folder)
    for path in [p for p in site.rglob("*") if p.name.endswith(SITE_UNUSED_SUFFIXES)]:
        path.unlink()
    archive = out / "site.tar.xz"
    partial = archive.with_suffix(".xz.partial")
    with tarfile.open(partial, "w:xz", preset=9) as tar:
        for path in sorted(site.iterdir()):
            tar.add(path, arcname=path.name)
    partial.replace(archive)
    return archive


def collect_wheels(pins: list[str], dest: Path, python_version: str | None) -> list[Path]:
    """Wheels of `pins` in `dest`: `pip wheel` takes binary wheels where they exist and builds
    the rest from their sdists (e.g. antlr4-python3-runtime 4.9.3 has no wheel). For another
    Python, the wheels tied to this one's ABI are fetched again for that version."""
    pip = [sys.executable, "-m", "pip"]
    subprocess.run([*pip, "wheel", "--no-deps", "-w", str(dest), *pins], check=True)
    this = f"{sys.version_info.major}.{sys.version_info.minor}"
    if python_version and python_version != this:
        versions = {normalize(p.split("==")[0]): p for p in pins}
        for wheel in list(dest.glob("*.whl")):
            if not python_specific(wheel.name):
                continue
            wheel.unlink()
            cmd = [*pip, "download", "--no-deps", "--only-binary=:all:", "-d", str(dest),
                   "--python-version", python_version, "--implementation", "cp"]  # fmt: skip
            for tag in ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64"):
                cmd += ["--platform", tag]
            subprocess.run([*cmd, versions[normalize(wheel.name.split("-")[0])]], check=True)
    return sorted(dest.glob("*.whl"))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--device-freeze", type=Path, required=True, help="`pip freeze` of the device")
    ap.add_argument("--out", type=Path, default=Path("wheelhouse"))
    ap.add_argument("--python-version", help="the device's, e.g. 3.12, when it is not this one's")
    ap.add_argument("--trace", nargs="+", default=TRACE_COMMAND, help="python args to trace")
    ap.add_argument("--margin-mib", type=float, default=1.0, help="left free in every call")
    ap.add_argument(
        "--site-archive", action="store_true",
        help="also install the wheels for the device's Python and pack them as one "
        "<out>/site.tar.xz (one call where the batches need several)",
    )  # fmt: skip
    args = ap.parse_args(argv)

    repo = Path(__file__).resolve().parents[1]
    traced = subprocess.run(
        [sys.executable, "-X", "importtime", *args.trace], cwd=repo, capture_output=True, text=True
    )
    if traced.returncode != 0:
        raise SystemExit(
            f"the traced command failed ({traced.returncode}):\n{traced.stdout[-2000:]}"
        )
    own = normalize("vlmrl-pipeline")  # this project: installed on the device from the tree
    needed = imported_distributions(traced.stderr) - {own}
    missing = sorted(needed - freeze_names(args.device_freeze.read_text()))
    pins = [f"{name}=={metadata.version(name)}" for name in missing]
    print(f"{len(needed)} distributions imported, {len(missing)} missing on the device:", *pins)

    # this script's own earlier output: a stale wheel would be carried and installed
    for old in [args.out / "downloaded", args.out / "stripped", *args.out.glob("batch[0-9]*")]:
        if old.is_dir():
            shutil.rmtree(old)
    wheels = []
    for wheel in collect_wheels(pins, args.out / "downloaded", args.python_version):
        if normalize(wheel.name.split("-")[0]) == "dm-control":
            stripped = args.out / "stripped" / wheel.name
            dropped = strip_wheel(wheel, stripped, DM_CONTROL_UNUSED)
            print(f"{wheel.name}: {dropped} files dropped, {wheel.stat().st_size / MIB:.1f} -> "
                  f"{stripped.stat().st_size / MIB:.1f} MiB")  # fmt: skip
            wheel = stripped
        wheels.append(wheel)

    limit = int(CARRY_BYTES - working_tree_bytes(repo) - args.margin_mib * MIB)
    batches = pack(wheels, limit)
    manifest = []
    for i, batch in enumerate(batches, 1):
        folder = args.out / f"batch{i}"
        folder.mkdir(parents=True, exist_ok=True)
        for wheel in batch.wheels:
            (folder / wheel.name).write_bytes(wheel.read_bytes())
        manifest.append({"batch": folder.name, "mib": round(batch.size / MIB, 1),
                         "wheels": [w.name for w in batch.wheels]})  # fmt: skip
        print(f"{folder}: {len(batch.wheels)} wheels, {batch.size / MIB:.1f} MiB")
    (args.out / "batches.json").write_text(json.dumps(manifest, indent=1) + "\n")
    print(f"carry limit per call after the working tree: {limit / MIB:.1f} MiB; "
          f"install each with `pip install --no-index --no-deps <batch>/*.whl`")  # fmt: skip
    if args.site_archive:
        version = args.python_version or f"{sys.version_info.major}.{sys.version_info.minor}"
        archive = site_archive(wheels, args.out, version)
        size = archive.stat().st_size
        fits = "fits one call" if size <= limit else "does NOT fit one call"
        print(f"{archive}: {size / MIB:.1f} MiB, {fits} (carry it; on the device: "
              f"mkdir -p /tmp/site && xz -dc site.tar.xz | tar -x -C /tmp/site, "
              f"PYTHONPATH=/tmp/site)")  # fmt: skip


if __name__ == "__main__":
    from benchmarks import run_main

    raise SystemExit(run_main(main))
