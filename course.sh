#!/usr/bin/env bash
# The course's commands, for a Linux machine (x86-64 or aarch64) with Python >= 3.10; a GPU is
# optional. ./course.sh --help lists them; ./course.sh COMMAND --help explains one.
set -euo pipefail
cd "$(dirname "$0")"
VENV=${CUTECOURSE_VENV:-.venv}
PY=${PYTHON:-python3}
STAMP="$VENV/.cutecourse-setup"

# -- pins: what a set-up installs (the stamp hashes these lines and pyproject.toml) --------------
TORCH_VERSION=2.13.0
EXTRAS="lab,test,browser,site"
# -- end of pins ------------------------------------------------------------------------------------

SSH_RECIPE="On a remote server: on your laptop run  ssh -L 8888:localhost:8888 user@host
  then open there the http://localhost:8888/lab?token=... address JupyterLab prints below."

usage() {
  cat <<'EOF'
usage: ./course.sh COMMAND [ARGS]   (./course.sh COMMAND --help for one)

  lab [JUPYTER ARGS]   set up .venv (once) and open the course in JupyterLab; arguments go to
                       JupyterLab (--port 9999, --no-browser, --ip 0.0.0.0)
  test [PYTEST ARGS]   set up .venv (once) and run all tests, or the pytest arguments given
  check [--notebooks] [--json]
                       check this seat: versions, GPU, driver, a compile for sm_90a and sm_100a
  site [--learner] [OUT]
                       build the course as a static site (default build/site)
  handout [OUT]        write the learner handout (notebooks, exercises, package; no solutions)
                       and the solutions to release later (default build/handout)
  setup [--force]      only set up .venv (lab, test, site and handout do it when needed)

Set-up runs once: while .venv matches the pins (pyproject.toml, the torch version) it is skipped,
so every command works offline after the first. Linux only; on macOS or Windows read the course
site and run it on a remote Linux machine or in WSL2 (README, "Before you start").
EOF
}

help_for() {
  case "$1" in
    lab) cat <<EOF
usage: ./course.sh lab [JUPYTER ARGS]
Sets up $VENV once, then starts JupyterLab on notebook 01. Arguments go to JupyterLab:
  ./course.sh lab --no-browser --port 9999      a server without a browser, on port 9999
  ./course.sh lab --ip 0.0.0.0                  reachable from other machines (mind the token)
As root (containers, most cloud GPU machines) it adds --allow-root and says so.
$SSH_RECIPE
EOF
    ;;
    test) echo "usage: ./course.sh test [PYTEST ARGS]
Sets up $VENV once, then runs every test, notebook and solution (what CI runs; about 13 minutes on
2 cores without a GPU), or with arguments only what they name: ./course.sh test tests/test_course.py" ;;
    check) echo "usage: ./course.sh check [--notebooks] [--json]
Checks this seat in under a minute and installs nothing: Python, the DSL (4.8.1), torch, the GPU
and driver, a compile for sm_90a and sm_100a, which notebooks run kernels here. Exit 1 if the seat
cannot follow the course. --notebooks also runs every notebook (minutes). --json prints the result
as JSON, for a teacher to collect: python -m cutecourse.check --tabulate seats/*.json" ;;
    site) echo "usage: ./course.sh site [--learner] [OUT]
Builds the course as a static site into OUT (default build/site; seconds, nothing is executed).
--learner: the edition to give learners: no solutions, no design notes, no link to an answer." ;;
    handout) echo "usage: ./course.sh handout [OUT]
Writes into OUT (default build/handout): cutecourse-learner.zip (notebooks, exercises, the
package, course.sh and HANDOUT.md: how to start; no solutions) and cutecourse-solutions.zip (to
release after each block)." ;;
    setup) echo "usage: ./course.sh setup [--force]
Sets up $VENV: torch $TORCH_VERSION (the CPU build where there is no NVIDIA driver, the CUDA build
the driver runs where there is one; CUTECOURSE_TORCH_INDEX=<index URL> or =pypi chooses), then the
course with its extras ($EXTRAS). Skipped while $STAMP matches the pins; --force redoes it." ;;
  esac
}

wants_help() { for a in "$@"; do case "$a" in -h|--help) return 0 ;; esac; done; return 1; }

not_here() {  # macOS (no DSL wheel) and other systems: say what works instead of a pip error
  case "$(uname -s)" in
    Linux) return 0 ;;
    Darwin) what="macOS: NVIDIA's CuTe DSL publishes no macOS package, so the course cannot be set up on this Mac." ;;
    *) what="$(uname -s): the course runs on Linux only (on Windows: inside WSL2)." ;;
  esac
  cat >&2 <<EOF
$what
What works instead:
  - read the course: the course site (./course.sh site on any Linux machine, or the site your
    teacher gives out) shows every notebook with its outputs;
  - run it on a Linux machine (x86-64 or aarch64, a GPU is optional) or in WSL2 on Windows: clone
    the course there, run ./course.sh lab --no-browser, and from this machine
      ssh -L 8888:localhost:8888 user@host
    then open the http://localhost:8888/lab?token=... URL it prints.
EOF
  exit 1
}

pins_hash() {  # what the stamp holds: the pins block above and pyproject.toml
  { sed -n '/^# -- pins:/,/^# -- end of pins/p' "$(basename "$0")"; cat pyproject.toml; } | sha256sum | cut -d' ' -f1
}

set_up_already() { [ -x "$VENV/bin/python" ] && [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$(pins_hash)" ]; }

pip_() { "$VENV/bin/python" -m pip --disable-pip-version-check "$@"; }

setup() {
  if [ "${1:-}" != "--force" ] && set_up_already; then
    echo "set-up: $VENV matches the pins (nothing to install; ./course.sh setup --force redoes it)"
    return 0
  fi
  if [ ! -x "$VENV/bin/python" ]; then
    if ! "$PY" -m venv "$VENV"; then
      echo "FAIL: $PY cannot make a virtual environment. On Debian/Ubuntu: sudo apt install python3-venv; or PYTHON=python3.11 ./course.sh lab" >&2
      exit 1
    fi
  fi
  rm -f "$STAMP"
  echo "set-up: installing into $VENV (once; later commands skip this while the pins are the same)"
  pip_ install -q --upgrade pip
  # torch first, the build this machine's driver runs (cutecourse/torch_build.py decides); kept
  # when the pinned version is there, unless --force (a new driver, or CUTECOURSE_TORCH_INDEX).
  local again=()
  [ "${1:-}" = "--force" ] && again=(--force-reinstall)
  if [ ${#again[@]} -gt 0 ] || ! "$VENV/bin/python" -c "import torch, sys; sys.exit(not torch.__version__.startswith('$TORCH_VERSION'))" 2>/dev/null; then
    { read -r index; read -r note; } < <("$VENV/bin/python" - < cutecourse/torch_build.py) || true
    echo "set-up: torch: $note"
    if [ -n "$index" ]; then
      pip_ install -q "${again[@]}" --timeout 15 --retries 1 --index-url "$index" "torch==$TORCH_VERSION" \
        || { echo "set-up: $index failed; torch from the default index instead"; pip_ install -q "${again[@]}" "torch==$TORCH_VERSION"; }
    else
      pip_ install -q "${again[@]}" "torch==$TORCH_VERSION"
    fi
  fi
  pip_ install -q -e ".[$EXTRAS]"
  pins_hash > "$STAMP"
  echo "set-up: done ($("$VENV/bin/python" -c 'import torch; print("torch", torch.__version__)'))"
}

lab() {
  setup
  local args=() port=8888 prev=""
  for a in "$@"; do
    case "$a" in --port=*) port=${a#--port=} ;; esac
    [ "$prev" = "--port" ] && port=$a
    prev=$a
  done
  if [ "$(id -u)" = 0 ] && [[ " $* " != *" --allow-root "* ]]; then
    echo "lab: running as root (usual in containers): starting JupyterLab with --allow-root"
    args+=(--allow-root)
  fi
  echo "lab: JupyterLab on port $port; it prints its URL with a token below."
  echo "${SSH_RECIPE//8888/$port}"
  exec "$VENV/bin/jupyter" lab --notebook-dir=. "${args[@]}" "$@" notebooks/01_layouts_and_elementwise_add.ipynb
}

cmd=${1:-}
[ $# -gt 0 ] && shift
case "$cmd" in
  -h|--help|help) usage; exit 0 ;;
  lab|test|check|site|handout|setup) if wants_help "$@"; then help_for "$cmd"; exit 0; fi ;;
  *) usage >&2; exit 2 ;;
esac
not_here

case "$cmd" in
  lab) lab "$@" ;;
  setup) setup "$@" ;;
  test)
    setup
    if [ $# -gt 0 ]; then exec "$VENV/bin/python" -m pytest -q -p no:cacheprovider "$@"; fi
    exec "$VENV/bin/python" -m pytest -q -p no:cacheprovider tests notebooks solutions \
      --nbval --nbval-current-env --nbval-cell-timeout=900 ;;
  site)
    setup
    exec "$VENV/bin/python" -m cutecourse.site "$@" ;;
  handout)
    setup
    exec "$VENV/bin/python" -m cutecourse.site.handout "$@" ;;
  check)
    export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
    if [ -x "$VENV/bin/python" ]; then
      exec "$VENV/bin/python" -m cutecourse.check "$@"
    fi
    if ! command -v "$PY" >/dev/null 2>&1; then
      echo "FAIL: no $VENV and no $PY: install Python 3.10 or newer, then run ./course.sh lab" >&2; exit 1
    fi
    [[ " $* " == *" --json "* ]] || echo "No $VENV yet: checking $(command -v "$PY"). ./course.sh lab sets the course up in $VENV."
    exec "$PY" -m cutecourse.check "$@" ;;
esac
