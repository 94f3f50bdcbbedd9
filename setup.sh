#!/usr/bin/env bash
# Fresh machine to finished pipeline: create .venv, install the pinned dependencies, run `dvc repro`.
set -euo pipefail
cd "$(dirname "$0")"
python3 -m venv .venv
. .venv/bin/activate
pip install --upgrade pip
pip install -e '.[dev,ray]'
dvc repro "$@"
