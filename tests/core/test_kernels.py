"""pipeline/core/kernels.py: every process that imports `pipeline` first runs numpy's and OpenBLAS's
AVX2-level kernels, so that data outputs hash the same on AVX-512 and AVX2 machines (an AVX2 CI
machine once rebuilt the cartpole-swingup rollouts and the highway-hw chain with other bytes than
the AVX-512 one), and MKL's AUTO branch, run-to-run reproducible on one machine; torch otherwise
runs the CPU's own kernels, in the stages as in the benchmarks."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from pipeline.core.errors import PipelineError
from pipeline.core.kernels import (
    AVX2_KERNELS,
    NUMPY_AVX512_TARGETS,
    ONE_MACHINE_BLAS,
    OPT_OUT,
    check_portable_kernels,
    cpu_flags,
    portable_environment,
)
from tests.conftest import REPO

AVX512_CPU = {"sse4_2", "avx", "avx2", "fma", "avx512f", "avx512bw"}
VARIABLES = ("NPY_DISABLE_CPU_FEATURES", *AVX2_KERNELS, *ONE_MACHINE_BLAS, OPT_OUT)


def test_an_avx512_cpu_gets_numpys_avx2_kernels_and_torch_its_own():
    assert portable_environment({}, AVX512_CPU) == {
        "NPY_DISABLE_CPU_FEATURES": "X86_V4 AVX512_ICL AVX512_SPR",
        "OPENBLAS_CORETYPE": "Haswell",
        "MKL_CBWR": "AUTO",  # this CPU's MKL path, the same from run to run
    }


def test_a_cpu_without_avx2_is_not_forced_onto_kernels_it_cannot_run():
    assert portable_environment({}, {"sse4_2", "avx"}) == {
        "NPY_DISABLE_CPU_FEATURES": "X86_V4 AVX512_ICL AVX512_SPR",
        "MKL_CBWR": "AUTO",
    }


def test_the_users_settings_stay_and_numpy_still_loses_avx512():
    user = {
        "NPY_DISABLE_CPU_FEATURES": "X86_V3,AVX512_ICL",
        "OPENBLAS_CORETYPE": "Sandybridge",
        "MKL_CBWR": "COMPATIBLE",
    }
    updates = portable_environment(user, AVX512_CPU)
    assert updates == {"NPY_DISABLE_CPU_FEATURES": "X86_V3 AVX512_ICL X86_V4 AVX512_SPR"}
    complete = {"NPY_DISABLE_CPU_FEATURES": " ".join(NUMPY_AVX512_TARGETS)}
    assert "NPY_DISABLE_CPU_FEATURES" not in portable_environment(complete, AVX512_CPU)


@pytest.mark.parametrize("value", ["1", "yes"])
def test_the_opt_out_keeps_numpys_native_kernels_and_mkls_one_machine_branch(value):
    assert portable_environment({OPT_OUT: value}, AVX512_CPU) == {"MKL_CBWR": "AUTO"}
    check_portable_kernels({OPT_OUT: value}, features={"X86_V4": True})  # no error


def test_cpu_flags_reads_the_first_cpu(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nflags\t\t: fpu sse2 avx2 fma\n\nflags\t: other\n")
    assert cpu_flags(info) == {"fpu", "sse2", "avx2", "fma"}
    assert cpu_flags(tmp_path / "missing") == frozenset()


def test_a_process_with_numpys_avx512_kernels_may_not_write_stage_outputs():
    with pytest.raises(PipelineError, match=r"X86_V4.*import pipeline first.*VLMRL_NATIVE"):
        check_portable_kernels({}, features={"X86_V4": True, "X86_V3": True})
    check_portable_kernels({}, features={"X86_V4": False, "X86_V3": True})


def _python(code: str, **variables: str) -> subprocess.CompletedProcess:
    """`code` in a fresh python, without this process's kernel variables, with `variables`."""
    env = {k: v for k, v in os.environ.items() if k not in VARIABLES} | variables
    return subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True
    )


PROBE = """
import json, os
{imports}
from numpy._core._multiarray_umath import __cpu_features__ as features
import torch
print(json.dumps({{"env": {{k: os.environ.get(k) for k in {variables!r}}},
    "numpy_avx512": [t for t in {targets!r} if features.get(t)],
    "aten": torch.backends.cpu.get_cpu_capability(),
    "onednn": torch.backends.mkldnn.enabled}}))
"""


def _probe(imports: str) -> dict:
    code = PROBE.format(imports=imports, variables=VARIABLES, targets=NUMPY_AVX512_TARGETS)
    result = _python(code)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_importing_pipeline_first_pins_numpys_kernels_and_leaves_torch_its_own():
    """In a fresh process, `import stages` (what every DVC stage runs first) leaves numpy without
    AVX-512 targets, says so in the environment its children get, and leaves torch the CPU's own
    kernels (ATen's capability and oneDNN as without `pipeline`)."""
    seen, bare = _probe("import stages"), _probe("")
    assert seen["numpy_avx512"] == []
    assert seen["env"]["NPY_DISABLE_CPU_FEATURES"].split() == list(NUMPY_AVX512_TARGETS)
    assert seen["env"]["MKL_CBWR"] == "AUTO"
    if {"avx2", "fma"} <= cpu_flags():
        assert {k: seen["env"][k] for k in AVX2_KERNELS} == AVX2_KERNELS
    assert (seen["aten"], seen["onednn"]) == (bare["aten"], bare["onednn"])


@pytest.mark.slow  # three fresh interpreters, each importing torch: 6-9 s
def test_benchmarks_run_the_kernels_the_stages_and_users_run():
    """A benchmark measures what a user's process computes with: `import benchmarks`, `import
    stages` and a user's `import pipeline` give the same variables and torch kernels."""
    benchmarks, stages, user = (
        _probe("import benchmarks"),
        _probe("import stages"),
        _probe("import pipeline"),
    )
    assert benchmarks == stages == user


def test_numpy_imported_before_pipeline_is_named_when_data_is_written_on_an_avx512_cpu():
    """Reading a dataset after `import datasets` (which imports numpy) says nothing: the
    kernels only matter to data outputs, and a function that writes one warns, once."""
    first = "import numpy, warnings; warnings.simplefilter('always'); import pipeline"
    reader = _python(first)
    assert reader.returncode == 0 and "imported before" not in reader.stderr, reader.stderr
    writer = _python(f"{first}; from pipeline.core.kernels import warn_native_kernels as w; "
                     "w('data/x'); w('data/y')")  # fmt: skip
    assert writer.returncode == 0, writer.stderr
    if "avx512f" in cpu_flags():
        assert writer.stderr.count("numpy was imported before `pipeline`") == 1, writer.stderr
        assert "data/x may differ" in writer.stderr
    else:  # here numpy's kernels are AVX2's anyway: nothing to warn about
        assert "imported before" not in writer.stderr


def test_training_torch_fixes_the_threads_and_keeps_onednn():
    import torch

    from pipeline.core.kernels import training_torch

    threads, onednn = torch.get_num_threads(), torch.backends.mkldnn.enabled
    try:
        training_torch(1)
        assert (torch.get_num_threads(), torch.backends.mkldnn.enabled) == (1, onednn)
        training_torch(0)  # 0: the count stays
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(threads)


GEMM = """
import hashlib, os
{imports}
import numpy as np, torch
torch.set_num_threads(1)
rng = np.random.default_rng(0)
a, b = (torch.from_numpy(rng.standard_normal(s, dtype=np.float32)) for s in ((96, 300), (300, 80)))
print(os.environ.get("MKL_CBWR"), hashlib.sha256((a @ b).numpy().tobytes()).hexdigest())
"""


@pytest.mark.slow  # three fresh interpreters; the variable that picks the branch: the tests above
def test_importing_pipeline_runs_mkls_auto_branch():
    """A product through torch's BLAS after `import pipeline` has the bytes of MKL's AUTO branch
    (this CPU's path, the same from run to run), not of the cross-vendor COMPATIBLE one."""
    pinned = _python(GEMM.format(imports="import pipeline"))
    assert pinned.returncode == 0, pinned.stderr
    branch, digest = pinned.stdout.split()
    assert branch == "AUTO"

    def explicit(value: str) -> str:
        result = _python(GEMM.format(imports=""), MKL_CBWR=value)
        assert result.returncode == 0, result.stderr
        return result.stdout.split()[1]

    assert digest == explicit("AUTO")
    if explicit("COMPATIBLE") == digest:  # this CPU's path rounds alike: nothing to tell apart
        pytest.skip("MKL's AUTO and COMPATIBLE branches give the same bytes on this CPU")


@pytest.mark.slow  # the benchmark's two workers, each a fresh interpreter that trains
def test_the_kernels_benchmark_prints_both_rates_and_their_ratio(capsys):
    from benchmarks.portable_kernels import main

    main(["--updates", "3", "1", "1", "--repeats", "1", "--rows", "state sac"])
    row = capsys.readouterr().out.splitlines()[-1]
    name, pinned, native, ratio = (cell.strip() for cell in row.strip("|").split("|"))
    assert name == "state sac" and float(pinned) > 0 and float(native) > 0
    assert float(ratio.rstrip("x")) == pytest.approx(float(native) / float(pinned), abs=0.01)
