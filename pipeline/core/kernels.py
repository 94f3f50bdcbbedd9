"""The float kernels behind the reproducibility policy (`pipeline.tools.reproducibility` states and
checks it): data outputs are the same bytes on every x86-64 machine; what a network computes is
the same bytes on one machine and agrees across machines within a stated tolerance, at the CPU's
own speed.

**Data** (rollouts, label and mask tables, caches, datasets, the teacher's competence) is computed
by numpy code: envs, scripted teachers and masks, parsers. numpy (>= 2.0) and OpenBLAS pick their
SIMD kernels per CPU when they load, and the AVX-512 kernels round differently from the AVX2 ones:
numpy's float64 `exp`, `log`, `sin`, `cos` and `tanh` have X86_V4 (AVX-512) loops beside their
X86_V3 (AVX2) ones, and `arctan`, `arctan2`, `power` and the other SVML-based loops have X86_V4
loops only (`numpy.lib.introspect.opt_func_info` lists them); dm_control's rewards
(`rewards.tolerance`: `np.exp`) and highway-env's kinematics (`np.cos`, `np.arctan`) go through
them, and an AMD Zen 3 (AVX2) machine once rebuilt the cartpole-swingup rollouts and the whole
highway-hw chain with other bytes than an AVX-512 one. `pin_portable_kernels` (run by
`import pipeline`, before numpy can be imported through it) makes an AVX-512 machine run numpy's
and OpenBLAS's AVX2 kernels, which every x86-64 machine since 2013 has; `check_portable_kernels`
(run by every stage) refuses to write outputs from a process whose numpy dispatches to AVX-512.
It costs data stages nothing measurable: their time is the envs' and the disk's.

**Networks** (C_V, agents, their evaluations, labelling rounds, and whatever reads them) are
computed by torch's CPU kernels: MKL, its BLAS, picks its code path by the CPU's vendor and ISA,
and oneDNN JIT-compiles convolutions for the widest ISA it finds, with loop blocking from the
cache sizes. Pinning them (MKL's COMPATIBLE branch, convolutions off oneDNN, AVX2 caps) ran
training at 0.50x the native rate for state SAC and 0.34-0.36x for pixel drq on a 2-core Intel
machine (0.63x and 0.47-0.50x on an AMD EPYC: benchmarks.portable_kernels), and still did not
give an Intel machine the AMD bytes of the same C_V (no MKL branch tried did). So torch runs
natively, with what one-machine identity needs: a fixed intra-op thread count (`training_torch`)
and MKL's AUTO branch of conditional numerical reproducibility, which Intel documents to give
the same results run after run on one machine (a 1024^3 sgemm took 17 % longer with it than
with no branch set, 3.8x longer with COMPATIBLE). Training then reruns and resumes to the same
bytes on one machine; across machines its metrics agree within `pipeline.tools.reproducibility`'s
tolerance.

Each library reads its switch once, at load (MKL at its first call): a process that imported
numpy before `pipeline` keeps its kernels. `VLMRL_NATIVE_KERNELS=1` opts out of the data pin
too, at the price of data outputs that hash differently from machine to machine.
"""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Iterable, Mapping, MutableMapping
from pathlib import Path

from pipeline.core.errors import PipelineError

OPT_OUT = "VLMRL_NATIVE_KERNELS"
# numpy's AVX-512 dispatch targets (numpy 2.x names); it ignores names it does not know
NUMPY_AVX512_TARGETS = ("X86_V4", "AVX512_ICL", "AVX512_SPR")
AVX2_FLAGS = frozenset({"avx2", "fma"})  # what the kernels below need
# where the CPU has AVX2 and FMA: OpenBLAS's (numpy's BLAS) switch to its AVX2 kernels
AVX2_KERNELS = {"OPENBLAS_CORETYPE": "Haswell"}
# MKL's conditional numerical reproducibility, AUTO branch: the code path this CPU picks, with
# the same results from run to run on it (Intel's documentation); its absence allows run-to-run
# differences (memory alignment picks kernels). COMPATIBLE, the cross-vendor branch, cost 3.8x.
ONE_MACHINE_BLAS = {"MKL_CBWR": "AUTO"}


def cpu_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> frozenset[str]:
    """The first CPU's feature flags, or none where /proc/cpuinfo is missing (not Linux)."""
    try:
        text = cpuinfo.read_text()
    except OSError:
        return frozenset()
    for line in text.splitlines():
        if line.startswith("flags"):
            return frozenset(line.partition(":")[2].split())
    return frozenset()


def portable_environment(environ: Mapping[str, str], flags: Iterable[str]) -> dict[str, str]:
    """The variables to set so that numpy and OpenBLAS run AVX2-level kernels on this CPU and MKL
    its run-to-run reproducible branch. A value the user set stays; numpy's list of disabled
    targets gains the AVX-512 ones. Opted out: MKL's branch only (one-machine identity)."""
    updates = {name: value for name, value in ONE_MACHINE_BLAS.items() if name not in environ}
    if environ.get(OPT_OUT, "") not in ("", "0"):
        return updates
    disabled = environ.get("NPY_DISABLE_CPU_FEATURES", "").replace(",", " ").split()
    missing = [target for target in NUMPY_AVX512_TARGETS if target not in disabled]
    if missing:
        updates["NPY_DISABLE_CPU_FEATURES"] = " ".join([*disabled, *missing])
    if set(flags) >= AVX2_FLAGS:  # forcing a kernel the CPU cannot run would crash it
        for name, value in AVX2_KERNELS.items():
            if name not in environ:
                updates[name] = value
    return updates


_native_numpy: list[bool] = []  # set once by pin_portable_kernels: numpy was imported first


def pin_portable_kernels(environ: MutableMapping[str, str] = os.environ) -> dict[str, str]:
    """Set `portable_environment` in this process (and so in the processes it starts: DVC's
    stages, Ray's workers). Where numpy was imported first, it keeps its kernels: reading data
    is unaffected, and `warn_native_kernels` says so when this process writes data outputs."""
    flags = cpu_flags()
    updates = portable_environment(environ, flags)
    environ.update(updates)
    # elsewhere numpy's kernels are AVX2's already
    preloaded = "numpy" in sys.modules and "avx512f" in flags
    _native_numpy[:] = [preloaded and "NPY_DISABLE_CPU_FEATURES" in updates]
    return updates


def warn_native_kernels(output: str | Path) -> None:
    """Called by the functions that write data outputs (collect, label, masks, dataset): where
    numpy was imported before `pipeline` on an AVX-512 CPU, warn (once a process) that
    `output` may differ in its last bits from other machines'. The stages refuse outright
    (`check_portable_kernels`); a script or notebook that only reads data hears nothing."""
    if _native_numpy == [True]:
        _native_numpy[:] = [False]
        warnings.warn(
            f"numpy was imported before `pipeline`, so it keeps this CPU's own kernels "
            f"(NPY_DISABLE_CPU_FEATURES is read at import): {output} may differ in the last "
            "bits from other machines'. Import pipeline first for portable numerics.",
            RuntimeWarning,
            stacklevel=3,
        )


def training_torch(threads: int) -> None:
    """torch as the stages that run networks use it: `threads` intra-op threads (0: torch's
    default, one per core, whose reductions then follow the machine), with the CPU's own kernels
    (oneDNN's convolutions included). Same bytes from run to run on one machine at a fixed count;
    `pipeline.tools.reproducibility` states what agrees across machines."""
    if threads:
        import torch

        torch.set_num_threads(threads)


def active_avx512_targets(features: Mapping[str, bool] | None = None) -> list[str]:
    """numpy's AVX-512 targets that this process dispatches to."""
    if features is None:
        from numpy._core._multiarray_umath import __cpu_features__ as features
    return [target for target in NUMPY_AVX512_TARGETS if features.get(target)]


def check_portable_kernels(
    environ: Mapping[str, str] = os.environ, features: Mapping[str, bool] | None = None
) -> None:
    """Refuse to write stage outputs with numpy's AVX-512 kernels, unless the user opted out."""
    if environ.get(OPT_OUT, "") not in ("", "0"):
        return
    active = active_avx512_targets(features)
    if active:
        raise PipelineError(
            f"numpy runs its {', '.join(active)} kernels in this process, whose float64 results "
            "differ in the last bits from other machines': the data outputs would not match "
            "dvc.lock. Something imported numpy before `pipeline` (a sitecustomize, "
            f"PYTHONSTARTUP?); import pipeline first, or set {OPT_OUT}=1 to accept "
            "machine-specific outputs."
        )
