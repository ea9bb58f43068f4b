"""The GPU checks' case runner: one child process for a list of cases, each case on its own clock.

A pipelined kernel whose waits and arrives do not pair up hangs instead of failing. The tests
that run many kernel configurations on the GPU (``test_dense_gemms``, ``test_mixed_input``) run
them in one child, so that the DSL and CUDA start once, and time each case: the child prints
``FINISHED`` + the case's JSON row as each one ends, and the parent waits for each line in turn.
A case that does not finish within its budget fails the test with that case's name (the ones
before it finished); the child is killed, so a hang never takes the GPU session with it.
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading

import pytest


def run_cases(script: str, cases, labels, first_s: float = 180, each_s: float = 60) -> list:
    """Run the check ``script`` (Python text; ``sys.argv[1]``: the JSON ``cases``) in a child and
    return its rows, one per ``labels`` entry (a case's name in a failure; a script may print rows
    beyond its cases, e.g. a last call, with labels of their own). ``first_s``: the first row's
    budget (it imports torch and the DSL and starts CUDA); ``each_s``: each later row's."""
    proc = subprocess.Popen([sys.executable, "-c", script, json.dumps(cases)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=dict(os.environ))
    lines, err = queue.Queue(), []

    def read_stdout():
        for line in proc.stdout:
            lines.put(line)
        lines.put(None)  # the child has exited

    threading.Thread(target=read_stdout, daemon=True).start()
    threading.Thread(target=lambda: err.extend(proc.stderr), daemon=True).start()
    rows, out = [], []
    try:
        for i, label in enumerate(labels):
            budget = first_s if i == 0 else each_s
            while True:
                try:
                    line = lines.get(timeout=budget)  # budget per line: cases print one each
                except queue.Empty:
                    pytest.fail(f"{label} did not finish in {budget} s: a hang (the {i} case(s) before "
                                "it finished)")
                if line is None:
                    proc.wait()
                    pytest.fail(f"{label}: the check exited (status {proc.returncode}) before it "
                                "finished:\n" + "".join(out)[-2000:] + "".join(err)[-3000:])
                out.append(line)
                if line.startswith("FINISHED"):
                    rows.append(json.loads(line[len("FINISHED"):]))
                    break
        proc.wait(timeout=each_s)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return rows
