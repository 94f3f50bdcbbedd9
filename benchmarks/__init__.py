"""Benchmarks: scripts that print figures against a baseline measured in the same run.

`pipeline` comes first, so the code here computes with exactly the kernels the stages and a
user's own `import pipeline` get (pipeline/core/kernels.py; tests/core/test_kernels.py checks they match):
a benchmark measures what users run."""

from collections.abc import Callable

import pipeline  # noqa: F401


def run_main(main: Callable[[], int | None]) -> int:
    """A benchmark's entry point: Ctrl-C ends it with one line instead of a traceback. Its
    worker processes (a sweep's, which ignore SIGINT: benchmarks.sweep) are ended first, so
    nothing goes on training unseen. What was finished stays: each cell's result, prepared data
    and a killed cell's last resume state, so the same command goes on from there."""
    import multiprocessing
    import sys

    try:
        return main() or 0
    except KeyboardInterrupt:
        for child in multiprocessing.active_children():
            child.terminate()
            child.join()
        print(
            "interrupted: finished cells, prepared data and resume states are kept; rerun the "
            "same command to go on from them",
            file=sys.stderr,
        )
        return 130
