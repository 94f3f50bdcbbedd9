"""Benchmarks: scripts that print figures against a baseline measured in the same run.

`pipeline` comes first, so the code here computes with exactly the kernels the stages and a
user's own `import pipeline` get (pipeline/kernels.py; tests/test_kernels.py checks they match):
a benchmark measures what users run."""

import pipeline  # noqa: F401
