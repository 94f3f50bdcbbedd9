#!/usr/bin/env bash
# Fresh machine to finished pipeline: create .venv, install the pinned dependencies, run `dvc repro`
# (arguments go to it). VLMRL_SETUP_REPRO=0 installs only (CI runs the same `dvc repro` itself).
set -euo pipefail
cd "$(dirname "$0")"
python3 -m venv .venv
. .venv/bin/activate
pip install --upgrade pip
pip install -e '.[dev,ray]'
if [ "${VLMRL_SETUP_REPRO:-1}" != 0 ]; then
  dvc repro "$@"
fi
