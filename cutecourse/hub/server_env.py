"""The environment of a learner's JupyterLab, and of everything the teacher runs as that learner.

One definition, used by ``jupyterhub_config.py`` (each server the hub starts) and by ``room
rollup`` (each learner's seat check), so the check proves what the learner's notebooks meet. The
hub passes a server nothing of root's environment but ``LANG``/``LC_ALL``: what is not here is not
set.
"""

from __future__ import annotations

from .accounts import home


def learner_env(room: dict, name: str) -> dict[str, str]:
    """``room.json``'s choices turned into one account's environment."""
    h = str(home(name))
    env = {"HOME": h, "USER": name, "LOGNAME": name, "LANG": "C.UTF-8",
           "PATH": f"{room['env']}/bin:/usr/local/bin:/usr/bin:/bin", "VIRTUAL_ENV": room["env"],
           "CUTECOURSE_VENV": room["env"],  # a learner's ./course.sh check uses the room's environment
           # The DSL's compile cache defaults to /tmp/$USER/...: under a shared /tmp another account
           # can create that folder first. In the home it is the learner's own.
           "CUTE_DSL_CACHE_DIR": f"{h}/.cache/cutlass_python_cache"}
    # compile: learners compile and inspect, the teacher runs the GPU cells at announced moments;
    # queue: everyone may run kernels, one at a time, through the queue's lock folder. Both are
    # conventions a learner can undo in their own kernel; docs/workshop.md says what enforces.
    if room["gpu"] == "compile" and name != room["teacher"]:
        env["CUTECOURSE_MODE"] = "compile"
    if room["gpu"] == "queue":
        env["CUTECOURSE_GPU_QUEUE"] = room["gpu_queue"]
    return env
