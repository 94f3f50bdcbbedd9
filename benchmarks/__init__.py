"""Benchmarks: scripts that print figures against a baseline measured in the same run.

`pipeline` comes first, so the agents here compute with the same numpy, OpenBLAS and ATen kernels
as the stages (pipeline/kernels.py). MKL keeps its fast AUTO branch here unless MKL_CBWR says
otherwise: a benchmark measures speed, and no output of one is hashed by dvc.lock
(`benchmarks.portable_kernels` measures what the stages' COMPATIBLE branch costs)."""

import os

os.environ.setdefault("MKL_CBWR", "AUTO")  # before `pipeline` sets the stages' COMPATIBLE

import pipeline  # noqa: F401
