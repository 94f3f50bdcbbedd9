"""Environment settings that make this x86 CPU compute as another one would: the kernels numpy
and OpenBLAS choose per CPU model round differently, and a stage output must not notice. Both
libraries read these variables at import, so each setting needs its own process."""

from __future__ import annotations

import platform

from pipeline.core.kernels import cpu_flags

X86 = platform.machine() == "x86_64"
VARIABLES = ("NPY_DISABLE_CPU_FEATURES", "OPENBLAS_CORETYPE")
NUMPY_WITHOUT_AVX512 = {"NPY_DISABLE_CPU_FEATURES": "X86_V4 AVX512_ICL AVX512_SPR"}
NUMPY_WITHOUT_AVX2 = {"NPY_DISABLE_CPU_FEATURES": "X86_V3 X86_V4 AVX512_ICL AVX512_SPR"}
OPENBLAS_HASWELL = {"OPENBLAS_CORETYPE": "Haswell"}
OPENBLAS_SKYLAKEX = {"OPENBLAS_CORETYPE": "SkylakeX"}  # AVX-512: only where the CPU has it
# AVX without FMA: a kernel every x86-64 CPU with AVX runs, and none picks by itself any more
OPENBLAS_SANDYBRIDGE = {"OPENBLAS_CORETYPE": "Sandybridge"}


def has_avx512() -> bool:
    return "avx512f" in cpu_flags()


def other_cpu() -> dict[str, str]:
    """Another machine's kernels than the ones `import pipeline` pins (pipeline/core/kernels.py: numpy
    without AVX-512, OpenBLAS's Haswell kernel): numpy without its AVX2 targets and OpenBLAS's
    Sandybridge kernel, which any x86-64 CPU with AVX runs. (Before the pin, a CI machine
    differed from the one that wrote dvc.lock in numpy's AVX-512 targets.)"""
    if not X86:
        return {}
    return {**NUMPY_WITHOUT_AVX2, **OPENBLAS_SANDYBRIDGE}


def variants() -> list[dict[str, str]]:
    """Every setting this CPU can run: none, numpy's SIMD targets off one level at a time, and
    OpenBLAS's kernels forced."""
    found = [{}, NUMPY_WITHOUT_AVX512, NUMPY_WITHOUT_AVX2, OPENBLAS_HASWELL, OPENBLAS_SANDYBRIDGE]
    return found + ([OPENBLAS_SKYLAKEX] if has_avx512() else [])
