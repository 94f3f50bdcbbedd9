"""DVC stage entry points: thin wrappers around the `pipeline` package.

Imported before any stage module, so `pipeline` (which pins numpy's portable float kernels) comes
before numpy, and no stage writes data outputs with machine-specific kernels
(pipeline/kernels.py)."""

import sys

import pipeline  # noqa: F401  (first: pipeline/kernels.py)
from pipeline.errors import PipelineError, print_error
from pipeline.kernels import check_portable_kernels

try:
    check_portable_kernels()
except PipelineError as error:
    print_error(error)
    sys.exit(2)
