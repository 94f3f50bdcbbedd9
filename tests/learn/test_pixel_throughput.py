"""benchmarks/pixel_throughput.py's parts that a GPU session relies on and CI can check: FLOPs per
update, rows that fail their warm-up reported by name, compiled rows, and a clear stop where the
named device is missing."""

from __future__ import annotations

import pytest
import torch

from benchmarks import pixel_throughput as pt


def test_flops_per_update_is_the_mean_of_two_updates():
    a, b = torch.randn(8, 16), torch.randn(16, 4)
    calls = []

    def run():  # one matmul on the first call, two on the second: 1.5 on average
        calls.append(1)
        for _ in range(len(calls)):
            a @ b

    assert pt.flops_per_update(run) == 1.5 * 2 * 8 * 16 * 4


def test_a_row_that_fails_its_warm_up_is_named_and_the_others_kept():
    def broken():
        raise RuntimeError("accessing tensor output of CUDAGraphs\nsecond line")

    ran = []
    rows = {"good": lambda: ran.append(1), "bad": broken}
    failed = pt.warm_up(rows, calls=3)
    assert list(rows) == ["good"] and len(ran) == 3
    assert failed == {"bad": "RuntimeError: accessing tensor output of CUDAGraphs"}


def _rows(capsys, *extra: str) -> dict[str, str]:
    pt.main(["--configs", "48:2:16", "--frames", "300", "--updates", "1", "--repeats", "1",
             "--warmup", "2", "--threads", "1", "--flops", *extra])  # fmt: skip
    return {
        line.split("  ")[1].strip(): line
        for line in capsys.readouterr().out.splitlines()
        if line.startswith("  ")
    }


EAGER = {"reference DrQ (K=M=1)", "reference DrQ-v2", "ours: drq", "ours: drq, actor on the critic's features",
         "ours: sac + DeepMDP", "ours: erpv (VPG + VER)",
         "ours: erpv, the actor's loss into the encoder", "ours: semore m4"}  # fmt: skip


@pytest.mark.slow  # every row of the update benchmark, upstream networks included: 6-8 s
def test_every_row_runs_and_reports_its_flops(capsys):
    rows = _rows(capsys)
    assert set(rows) == EAGER
    assert all("updates/s" in r and "GFLOP/update" in r for r in rows.values())


@pytest.mark.slow  # Inductor compiles C++ for the CPU: about a minute
def test_a_compiled_row_runs_beside_the_eager_ones(capsys):
    rows = _rows(capsys, "--compile", "default")
    assert set(rows) == EAGER | {"ours: drq, compiled (default)"}
    assert "failed" not in rows["ours: drq, compiled (default)"]


@pytest.mark.slow  # every eager row again, beside two stubbed compiled ones; fast: the rows, above
def test_compiled_rows_follow_their_agent_with_its_flops(capsys, monkeypatch):
    """`--compiled erpv semore` gives those agents' compiled rows, built with the agents'
    `compile` setting and counted with their eager row's FLOPs (compilation stubbed: fast)."""
    modes = []
    monkeypatch.setattr(torch.nn.Module, "compile", lambda self, mode=None: modes.append(mode))
    rows = _rows(capsys, "--compile", "default", "--compiled", "erpv", "semore")
    compiled = {"ours: erpv (VPG + VER), compiled (default)", "ours: semore m4, compiled (default)"}
    assert set(rows) == EAGER | compiled and set(modes) == {"default"}
    names = list(rows)
    for row in compiled:
        eager = row.split(", compiled")[0]
        assert names.index(row) == names.index(eager) + 1  # beside its eager row
        gflop = [r.split("GFLOP")[0].split()[-1] for r in (rows[row], rows[eager])]
        assert gflop[0] == gflop[1] and float(gflop[0]) > 0


def test_a_missing_device_is_named():
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    with pytest.raises(SystemExit, match="--device cuda: torch sees no CUDA device here"):
        pt.main(["--device", "cuda", "--configs", "24:2:16"])
