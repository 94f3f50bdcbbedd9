"""Benchmarks: scripts that print figures against a baseline measured in the same run.

`pipeline` comes first, so the agents here compute with the same float kernels as the stages
(pipeline/kernels.py)."""

import pipeline  # noqa: F401
