#!/usr/bin/env bash
# TF Serving's runtime (TensorFlow 2.20 with tensorflow-text 2.20's ops; our exports are written
# by TensorFlow 2.21): a tiny export, made with this project's venv, loads and serves alike in a
# venv holding only those two packages. Run from the checkout, the project's venv active:
#     bash scripts/tf_serving_runtime/run.sh          # KT_SERVING_VENV: where that venv goes
#     bash scripts/tf_serving_runtime/run.sh install  # only make that venv (CI: while tests run)
set -euo pipefail
cd "$(dirname "$0")/../.."
RUNTIME_VENV="${KT_SERVING_VENV:-.venv-tf-serving}"
if [ ! -f "$RUNTIME_VENV/.installed" ]; then  # absent, or left half-made by a killed run
  rm -rf "$RUNTIME_VENV"
  python3 -m venv "$RUNTIME_VENV"
  "$RUNTIME_VENV/bin/pip" install -q "tensorflow==2.20.*" "tensorflow-text==2.20.*"
  touch "$RUNTIME_VENV/.installed"
fi
[ "${1:-}" = install ] && exit 0
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
python scripts/tf_serving_runtime/export_tiny.py "$WORK"
TF_CPP_MIN_LOG_LEVEL=2 "$RUNTIME_VENV/bin/python" -I scripts/tf_serving_runtime/check.py "$WORK"
