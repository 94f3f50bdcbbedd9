#!/usr/bin/env bash
# Fresh machine to finished pipeline: create .venv, install the dependencies at the versions
# constraints.txt records, run `dvc repro` (arguments go to it). VLMRL_SETUP_REPRO=0 installs only
# (CI runs the same `dvc repro` itself).
set -euo pipefail
cd "$(dirname "$0")"
python3 -m venv .venv
. .venv/bin/activate
pip install --upgrade pip
pip install -c constraints.txt -e '.[dev,ray]'
if [ "${VLMRL_SETUP_REPRO:-1}" != 0 ]; then
  dvc repro "$@"
fi
