"""DVC stage entry points: thin wrappers around the `pipeline` package.

Imported before any stage module, so `pipeline` (which pins numpy's portable float kernels) comes
before numpy, and no stage writes data outputs with machine-specific kernels
(pipeline/core/kernels.py). A `python` without the project's dependencies (DVC run outside the
project's environment) is told so in one line, before any import fails with a traceback."""

import importlib.util
import sys

import pipeline  # noqa: F401  (first: pipeline/core/kernels.py)
from pipeline.core.errors import PipelineError, print_error
from pipeline.core.kernels import check_portable_kernels

# what every stage imports; found without importing them (find_spec is cheap)
REQUIRED = ("numpy", "pydantic", "polars", "yaml", "gymnasium")
missing = [name for name in REQUIRED if importlib.util.find_spec(name) is None]
if missing:
    print_error(
        f"{sys.executable} lacks the project's dependencies ({', '.join(missing)}): run DVC from "
        "the project's environment (`. .venv/bin/activate`, then `dvc repro`), or set it up "
        "first with ./setup.sh"
    )
    sys.exit(2)

try:
    check_portable_kernels()
except PipelineError as error:
    print_error(error)
    sys.exit(2)
