"""One set of floating-point kernels on every x86-64 machine, so that a stage's outputs, and the
dvc.lock that hashes them, are the same on every machine that runs `dvc repro`.

numpy (>= 2.0), OpenBLAS and torch's ATen, oneDNN and MKL pick their SIMD kernels per CPU when
they load, and the AVX-512 kernels round differently from the AVX2 ones:
- numpy's float64 `exp`, `log`, `sin`, `cos` and `tanh` have X86_V4 (AVX-512) loops beside their
  X86_V3 (AVX2) ones, and `arctan`, `arctan2`, `power` and the other SVML-based loops have X86_V4
  loops only (`numpy.lib.introspect.opt_func_info` lists them); reductions change lane width.
- dm_control's rewards (`rewards.tolerance`: `np.exp`) and highway-env's kinematics (`np.cos`,
  `np.arctan`) go through them. Stop 36's CI machine (AMD Zen 3, AVX2) rebuilt the
  cartpole-swingup rollouts, the whole highway-hw chain and the CarRacing-v3-semore agent with
  other bytes than the AVX-512 machine that wrote dvc.lock; every other output was the same.
- oneDNN runs torch's CPU convolutions with JIT kernels for the widest ISA it finds.
- MKL, torch's BLAS, also dispatches by vendor: with the same data and the kernels above pinned,
  stop 43's CI (Intel, AVX-512) trained every C_V and agent to other bytes than the AMD EPYC
  Zen 3 that wrote dvc.lock (stop 42's CI, on AMD, had matched it). On the Intel machine no MKL
  or ATen setting tried (MKL's AVX, SSE4.2 and COMPATIBLE branches, ATen's default kernels)
  reproduced the AMD bytes of the MountainCarContinuous-v0 C_V.

`pin_portable_kernels` (run by `import pipeline`, before numpy can be imported through it) makes an
AVX-512 machine run the AVX2 kernels that every x86-64 machine since 2013 has, and MKL run its
COMPATIBLE branch on every machine, the one Intel documents to give the same results on Intel and
AMD CPUs. `portable_torch` (run by the stages that train or evaluate agents) fixes torch's thread
count and moves convolutions off oneDNN onto that BLAS. The AVX2 caps are no-ops on an AVX2
machine: there, all 103 stage outputs came out byte-identical with and without the oneDNN and MKL
caps (before MKL_CBWR), and the highway-hw collection and the CarRacing-v3-semore agent with and
without the whole pin. It sets the libraries' own switches, which they read once, at load: a
process that imported numpy or torch before `pipeline` keeps its kernels, and
`check_portable_kernels` (run by every stage) refuses to write outputs from one whose numpy
dispatches to AVX-512. `VLMRL_NATIVE_KERNELS=1` opts out, for speed, at the price of outputs that
hash differently from machine to machine.
"""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Iterable, Mapping, MutableMapping
from pathlib import Path

from pipeline.errors import PipelineError

OPT_OUT = "VLMRL_NATIVE_KERNELS"
# numpy's AVX-512 dispatch targets (numpy 2.x names); it ignores names it does not know
NUMPY_AVX512_TARGETS = ("X86_V4", "AVX512_ICL", "AVX512_SPR")
AVX2_FLAGS = frozenset({"avx2", "fma"})  # what the kernels below need
# where the CPU has AVX2 and FMA: each library's own switch to its AVX2 kernels (a ceiling for
# oneDNN's JIT, torch's convolutions, and for MKL, torch's BLAS)
AVX2_KERNELS = {
    "OPENBLAS_CORETYPE": "Haswell",
    "ATEN_CPU_CAPABILITY": "avx2",
    "ONEDNN_MAX_CPU_ISA": "AVX2",
    "MKL_ENABLE_INSTRUCTIONS": "AVX2",
}


# MKL, torch's BLAS, picks its code path by the CPU's vendor as well as its ISA: on an AMD CPU it
# takes other sgemm paths than on an Intel one, whatever MKL_ENABLE_INSTRUCTIONS says (stop 43's CI:
# an Intel machine trained every C_V and agent to other bytes than the AMD machine that wrote
# dvc.lock, with the same data). The COMPATIBLE branch of MKL's conditional numerical
# reproducibility (SSE2 without rcpps/rsqrtps) is the one Intel documents to give the same results
# on Intel and Intel-compatible CPUs, at a fixed thread count; every x86-64 CPU runs it.
PORTABLE_BLAS = {"MKL_CBWR": "COMPATIBLE"}


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
    """The variables to set so that numpy, OpenBLAS, ATen, oneDNN and MKL run AVX2-level kernels
    on this CPU. A value the user set stays; numpy's list of disabled targets gains the AVX-512
    ones."""
    if environ.get(OPT_OUT, "") not in ("", "0"):
        return {}
    updates = {}
    disabled = environ.get("NPY_DISABLE_CPU_FEATURES", "").replace(",", " ").split()
    missing = [target for target in NUMPY_AVX512_TARGETS if target not in disabled]
    if missing:
        updates["NPY_DISABLE_CPU_FEATURES"] = " ".join([*disabled, *missing])
    updates.update({name: value for name, value in PORTABLE_BLAS.items() if name not in environ})
    if set(flags) >= AVX2_FLAGS:  # forcing a kernel the CPU cannot run would crash it
        for name, value in AVX2_KERNELS.items():
            if name not in environ:
                updates[name] = value
    return updates


def pin_portable_kernels(environ: MutableMapping[str, str] = os.environ) -> dict[str, str]:
    """Set `portable_environment` in this process (and so in the processes it starts: DVC's
    stages, Ray's workers). Warns where numpy or torch was imported first and keeps its kernels."""
    flags = cpu_flags()
    updates = portable_environment(environ, flags)
    environ.update(updates)
    early = [name for name in ("numpy", "torch") if name in sys.modules]
    if updates and early and "avx512f" in flags:  # elsewhere the kernels are AVX2's already
        warnings.warn(
            f"{' and '.join(early)} was imported before `pipeline`, so it keeps this CPU's own "
            f"kernels ({', '.join(updates)} are read at import): results may differ in the last "
            "bits from other machines'. Import pipeline first for portable numerics.",
            RuntimeWarning,
            stacklevel=2,
        )
    return updates


def portable_torch(threads: int, environ: Mapping[str, str] = os.environ) -> None:
    """Make this process's torch compute the same bytes on every x86-64 machine: `threads` intra-op
    threads (0: torch's default, one per core, whose reductions then follow the machine), and,
    unless the user opted out, convolutions through ATen's im2col and the BLAS (pinned to MKL's
    COMPATIBLE branch) instead of oneDNN's JIT kernels, which MKL's guarantee does not cover and
    which pick their loop blocking from the CPU's cache sizes. The stages that train or run agents
    call it; `benchmarks/portable_kernels.py` measures what it costs."""
    import torch

    if threads:
        torch.set_num_threads(threads)
    if environ.get(OPT_OUT, "") in ("", "0"):
        torch.backends.mkldnn.enabled = False


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
            "differ in the last bits from other machines': the outputs would not match dvc.lock. "
            "Something imported numpy before `pipeline` (a sitecustomize, PYTHONSTARTUP?); import "
            f"pipeline first, or set {OPT_OUT}=1 to accept machine-specific outputs."
        )
