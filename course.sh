#!/usr/bin/env bash
# The course's commands, for a fresh machine (Linux, Python >= 3.10; a GPU is optional):
#   ./course.sh lab     set everything up in .venv and open the course in JupyterLab
#   ./course.sh test    set everything up in .venv and run all tests (what CI runs)
#   ./course.sh site    set everything up in .venv and build the course site into build/site
#                       (or the folder given: ./course.sh site /tmp/site)
#   ./course.sh check   check this seat: versions, GPU, driver, a compile for sm_90a and sm_100a,
#                       which notebooks run kernels here (--notebooks: also run every notebook).
#                       It installs nothing: before .venv exists it checks the system Python and
#                       says to run ./course.sh lab.
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
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check -e ".[lab,test,browser,site]"
}

case "${1:-}" in
  lab)
    setup
    exec "$VENV/bin/jupyter" lab --notebook-dir=. notebooks/01_layouts_and_elementwise_add.ipynb ;;
  test)
    setup
    exec "$VENV/bin/python" -m pytest -q -p no:cacheprovider tests notebooks solutions \
      --nbval --nbval-current-env --nbval-cell-timeout=900 ;;
  site)
    setup
    exec "$VENV/bin/python" -m cutecourse.site "${@:2}" ;;
  check)
    export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
    if [ -x "$VENV/bin/python" ]; then
      exec "$VENV/bin/python" -m cutecourse.check "${@:2}"
    fi
    if ! command -v "$PY" >/dev/null 2>&1; then
      echo "FAIL: no $VENV and no $PY: install Python 3.10 or newer, then run ./course.sh lab" >&2; exit 1
    fi
    echo "No $VENV yet: checking $(command -v "$PY"). ./course.sh lab sets the course up in $VENV."
    exec "$PY" -m cutecourse.check "${@:2}" ;;
  *)
    echo "usage: ./course.sh lab | test | site [OUT] | check [--notebooks]" >&2; exit 2 ;;
esac
