#!/usr/bin/env bash
# The course's two commands, for a fresh machine (Linux, Python >= 3.10; a GPU is optional):
#   ./course.sh lab    set everything up in .venv and open the course in JupyterLab
#   ./course.sh test   set everything up in .venv and run all tests (what CI runs)
set -euo pipefail
cd "$(dirname "$0")"
VENV=${CUTECOURSE_VENV:-.venv}
PY=${PYTHON:-python3}

setup() {
  if [ ! -x "$VENV/bin/python" ]; then "$PY" -m venv "$VENV"; fi
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check --upgrade pip
  # torch first: 2.13.0 is the build the course is tested with (a CPU build where no CUDA is).
  "$VENV/bin/python" -c "import torch" 2>/dev/null \
    || "$VENV/bin/python" -m pip install -q --disable-pip-version-check torch==2.13.0 \
    || "$VENV/bin/python" -m pip install -q --disable-pip-version-check torch
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check -e ".[lab,test,browser]"
}

case "${1:-}" in
  lab)
    setup
    exec "$VENV/bin/jupyter" lab --notebook-dir=. notebooks/01_layouts_and_elementwise_add.ipynb ;;
  test)
    setup
    exec "$VENV/bin/python" -m pytest -q -p no:cacheprovider tests notebooks solutions \
      --nbval --nbval-current-env --nbval-cell-timeout=900 ;;
  *)
    echo "usage: ./course.sh lab | ./course.sh test" >&2; exit 2 ;;
esac
