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

FIRST=notebooks/01_layouts_and_elementwise_add.ipynb
SSH_RECIPE="On a remote server: on your laptop run  ssh -L 8888:localhost:8888 user@host
  then open there the http://localhost:8888/lab/tree/$FIRST?token=... address JupyterLab prints below."

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
  room setup|start|stop|status|rollup|teardown
                       a workshop room on this server (as root): JupyterHub, an account per
                       learner, one shared read-only environment

Set-up runs once: while .venv matches the pins (pyproject.toml, the torch version) it is skipped,
so every command works offline after the first. Linux only; on macOS or Windows read the course
site and run it on a remote Linux machine or in WSL2 (docs/workshop.md, "Before the day").
EOF
}

help_for() {
  case "$1" in
    lab) cat <<EOF
usage: ./course.sh lab [JUPYTER ARGS]
Sets up $VENV once, then starts JupyterLab on notebook 01. Arguments go to JupyterLab:
  ./course.sh lab --no-browser --port 9999      a server without a browser, on port 9999
  ./course.sh lab --ip 0.0.0.0                  reachable from other machines (mind the token)
As root (containers, most cloud GPU machines) it adds --allow-root and says so. A port already
in use (another learner's server) is refused, with a free one to use instead, so the tunnel below
always reaches this server.
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
Builds the course as a static site into OUT (default build/site; about a minute, nothing is
executed).
--learner: the edition to give learners: no solutions, no design notes, no link to an answer." ;;
    handout) echo "usage: ./course.sh handout [OUT]
Writes into OUT (default build/handout): cutecourse-learner.zip (notebooks, exercises, the
package, course.sh and HANDOUT.md: how to start; no solutions) and cutecourse-solutions.zip (to
release after each block)." ;;
    room) cat <<EOF
usage: ./course.sh room COMMAND   (as root; docs/workshop.md, "A room on JupyterHub")
A workshop room on this Linux server: JupyterHub, one account per learner, one read-only course
environment for all (the learner edition: no solutions), each learner's JupyterLab opening at
notebook 01 of their own copy.
  room setup --roster roster.txt --teacher NAME [--gpu compile|queue] [--port 8000]
             [--ip 127.0.0.1] [--prefix /opt/cutecourse-room] [--python /usr/bin/python3]
             [--ssl-cert FILE --ssl-key FILE]
                    accounts (a first-use password each), the environment (minutes, once),
                    JupyterHub's configuration; run again for a new roster or port
  room start|stop   the hub (stop: every learner's server too)
  room status       is it up, whose servers run
  room rollup [--jobs N]   every learner's seat check and exercises passed, run as that learner: one table
  room teardown --yes   delete the accounts the room made (and their homes) and its folder
--gpu compile (default): learners compile and inspect, the teacher runs the GPU cells;
--gpu queue: learners run kernels one at a time through a shared lock folder.
EOF
    ;;
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
    teacher gives out) shows every notebook with its outputs; so does any Jupyter viewer (the
    notebooks are stored with their outputs);
  - run it on a Linux machine (x86-64 or aarch64, a GPU is optional) or in WSL2 on Windows: clone
    the course there, run ./course.sh lab --no-browser, and from this machine
      ssh -L 8888:localhost:8888 user@host
    then open the http://localhost:8888/lab/tree/...?token=... URL it prints.
EOF
  exit 1
}

pins_block() { sed -n '/^# -- pins:/,/^# -- end of pins/p' "$(basename "$0")"; }
pins_hash() {  # what the stamp's first line holds: the pins block above and pyproject.toml
  { pins_block; cat pyproject.toml; } | sha256sum | cut -d' ' -f1
}
stamp_lines() {  # the stamp: that hash, then one per part, so a re-install can say what changed
  pins_hash
  echo "pins $(pins_block | sha256sum | cut -d' ' -f1)"
  echo "pyproject $(sha256sum < pyproject.toml | cut -d' ' -f1)"
}

set_up_already() { [ -x "$VENV/bin/python" ] && [ -f "$STAMP" ] && [ "$(head -n1 "$STAMP")" = "$(pins_hash)" ]; }

why_install() {  # one phrase: why set-up installs now
  if [ "${1:-}" = "--force" ]; then echo "setup --force"; return; fi
  if [ ! -x "$VENV/bin/python" ]; then echo "first set-up"; return; fi
  if [ ! -f "$STAMP" ]; then echo "$VENV has no set-up stamp (a set-up that did not finish)"; return; fi
  local now old changed=()
  now=$(stamp_lines)
  for part in pins pyproject; do
    old=$(grep "^$part " "$STAMP" || true)
    if [ -n "$old" ] && [ "$old" != "$(grep "^$part " <<<"$now")" ]; then changed+=("$part"); fi
  done
  case "${changed[*]}" in
    "pins pyproject") echo "course.sh's pins and pyproject.toml changed since set-up" ;;
    pins) echo "course.sh's pins changed since set-up" ;;
    pyproject) echo "pyproject.toml changed since set-up" ;;
    *) echo "the pins (pyproject.toml or course.sh's) changed since set-up" ;;
  esac
}

pip_() { "$VENV/bin/python" -m pip --disable-pip-version-check "$@"; }

install_all() {  # every step checked by hand: errexit does not reach into a function run by `if`
  pip_ install -q --upgrade pip || return 1
  # torch first, the build this machine's driver runs (cutecourse/torch_build.py decides); kept
  # when the pinned version is there, unless --force (a new driver, or CUTECOURSE_TORCH_INDEX).
  local again=() index note
  [ "${1:-}" = "--force" ] && again=(--force-reinstall)
  if [ ${#again[@]} -gt 0 ] || ! "$VENV/bin/python" -c "import torch, sys; sys.exit(not torch.__version__.startswith('$TORCH_VERSION'))" 2>/dev/null; then
    { read -r index; read -r note; } < <("$VENV/bin/python" - < cutecourse/torch_build.py) || true
    echo "set-up: torch: $note"
    if [ -n "$index" ]; then
      pip_ install -q "${again[@]}" --timeout 15 --retries 1 --index-url "$index" "torch==$TORCH_VERSION" \
        || { echo "set-up: $index failed; torch from the default index instead"; pip_ install -q "${again[@]}" "torch==$TORCH_VERSION"; } \
        || return 1
    else
      pip_ install -q "${again[@]}" "torch==$TORCH_VERSION" || return 1
    fi
  fi
  pip_ install -q -e ".[$EXTRAS]"
}

setup() {  # returns 1 when the install fails; the stamp of the set-up before stays, and so does its .venv
  if [ "${1:-}" != "--force" ] && set_up_already; then
    echo "set-up: $VENV matches the pins (nothing to install; ./course.sh setup --force redoes it)"
    return 0
  fi
  local why
  why=$(why_install "${1:-}")
  if [ ! -x "$VENV/bin/python" ]; then
    if ! "$PY" -m venv "$VENV"; then
      echo "FAIL: $PY cannot make a virtual environment. On Debian/Ubuntu: sudo apt install python3-venv; or PYTHON=python3.11 ./course.sh lab" >&2
      exit 1
    fi
  fi
  echo "set-up: installing into $VENV ($why; once: later commands skip this while the pins are the same)"
  if install_all "$@"; then
    stamp_lines > "$STAMP"
    echo "set-up: done ($("$VENV/bin/python" -c 'import torch; print("torch", torch.__version__)'))"
    return 0
  fi
  if [ -f "$STAMP" ]; then
    echo "set-up: the re-install FAILED (see pip above; no network?). It was needed because $why.
set-up: the environment set up before is still there and still works (pip changes nothing when
  it cannot download): ./course.sh lab, check and test use it. Run ./course.sh setup again online." >&2
  else
    echo "set-up: FAILED (see pip above): run ./course.sh setup again where PyPI can be reached" >&2
  fi
  return 1
}

ensure_setup() {  # lab, test, site, handout: a failed re-install carries on with the old set-up
  setup && return 0
  [ -f "$STAMP" ] && [ -x "$VENV/bin/python" ] && { echo "set-up: carrying on with it" >&2; return 0; }
  exit 1
}

port_taken() { "$VENV/bin/python" -c "import socket,sys; s=socket.socket(); sys.exit(s.connect_ex(('127.0.0.1', int(sys.argv[1]))) != 0)" "$1"; }

lab() {
  ensure_setup
  local args=() port=8888 prev="" free
  for a in "$@"; do
    case "$a" in --port=*) port=${a#--port=} ;; esac
    [ "$prev" = "--port" ] && port=$a
    prev=$a
  done
  if port_taken "$port"; then  # another learner's server: never tunnel into it
    free=$port
    while port_taken "$free"; do free=$((free + 1)); done
    echo "lab: port $port is taken (another JupyterLab?): ./course.sh lab --port $free" >&2
    exit 1
  fi
  if [ "$(id -u)" = 0 ] && [[ " $* " != *" --allow-root "* ]]; then
    echo "lab: running as root (usual in containers): starting JupyterLab with --allow-root"
    args+=(--allow-root)
  fi
  echo "lab: JupyterLab on port $port (and no other: a taken port stops it); it prints its URL with a token below."
  echo "${SSH_RECIPE//8888/$port}"
  # port_retries=0: Jupyter would otherwise move to the next free port, and the recipe above
  # would tunnel into someone else's server. default_url: the printed URL opens notebook 01.
  exec "$VENV/bin/jupyter" lab --notebook-dir=. --ServerApp.port_retries=0 \
    "--LabApp.default_url=/lab/tree/$FIRST" "${args[@]}" "$@" "$FIRST"
}

cmd=${1:-}
[ $# -gt 0 ] && shift
case "$cmd" in
  -h|--help|help) usage; exit 0 ;;
  lab|test|check|site|handout|setup|room) if wants_help "$@"; then help_for "$cmd"; exit 0; fi ;;
  *) usage >&2; exit 2 ;;
esac
not_here

case "$cmd" in
  lab) lab "$@" ;;
  setup) setup "$@" ;;
  room)  # standard library only, as root, from any Python: the room builds its own environment
    export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
    exec "$PY" -m cutecourse.hub "$@" ;;
  test)
    ensure_setup
    if [ $# -gt 0 ]; then exec "$VENV/bin/python" -m pytest -q -p no:cacheprovider "$@"; fi
    exec "$VENV/bin/python" -m pytest -q -p no:cacheprovider tests notebooks solutions \
      --nbval --nbval-current-env --nbval-cell-timeout=900 ;;
  site)
    ensure_setup
    exec "$VENV/bin/python" -m cutecourse.site "$@" ;;
  handout)
    ensure_setup
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
