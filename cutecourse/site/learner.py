"""What the learner edition says: its own README, ``HANDOUT.md``, and the sentences it words
differently from the repository.

A learner gets the handout zip (``cutecourse.site.handout``) and the learner site
(``./course.sh site --learner``). Neither holds the answers, the teacher's notes, the tests or the
developer tools, so neither may send a learner to them: the repository's README does (``./course.sh
test``, ``solutions/``, ``docs/instructor/``, ``tools/``), so the handout carries this README
instead, and the learner site opens on it. Every command it names exists in the handout
(``tests/test_site_learner.py`` unzips the handout and runs each one's ``--help``).
"""

from __future__ import annotations

import re

from .. import generate

#: The one page a teacher mails a week before and puts in the zip as HANDOUT.md.
HOW_TO_BODY = """\
**You need** a Linux machine (x86-64 or aarch64) with Python 3.10 or newer, or WSL2 on Windows.
A GPU is optional: without one every kernel is compiled for its real target on your CPU and
the course shows what the compiler made. On a Mac the course cannot be installed (NVIDIA's CuTe
DSL has no macOS package): read the course site your teacher gives out, and run the notebooks on
a remote Linux machine (below).

**Before the day** (the set-up downloads the packages once; afterwards everything works offline):

```bash
unzip cutecourse-learner.zip -d cutecourse && cd cutecourse
./course.sh setup    # once: sets up .venv (about 1.8 GB without a GPU)
./course.sh check    # under a minute: must end with READY
./course.sh check --json > YOUR-NAME.json    # send this file to your teacher
```

Put your own name in the file's name: on a shared server every seat has the same host name, and
a teacher collects the files in one folder. Send it as your teacher asks (mail, chat, a shared
folder); it holds the machine's name, its versions and GPU, and what `check` found.

**On the day:**

```bash
./course.sh lab      # opens notebook 01 in JupyterLab
```

**On a remote Linux machine** (a GPU server, a cloud machine):
run `./course.sh lab --no-browser` there (as root it adds `--allow-root` itself), then on your
laptop `ssh -L 8888:localhost:8888 user@host` and open the `http://localhost:8888/lab?token=...`
address it printed. Another port: `./course.sh lab --no-browser --port 9999` and
`ssh -L 9999:localhost:9999 user@host`.

**Working through it:** read a notebook top to bottom, running each cell; each notebook ends with
exercises in `exercises/`: fill in the cells marked for you, run them, and run the check cell
under each, which says what is wrong and gives a hint. `./course.sh COMMAND --help` explains
each command.

**The answers** come from your teacher, one notebook at a time, after the room has tried its
exercises: `cutecourse-solutions-03.zip` holds notebook 03's. Unzip it in this folder
(`unzip cutecourse-solutions-03.zip`): each exercise with its answer, and its check to run.
"""

HOW_TO = "# cutecourse: how to start\n\nThis folder is the course without its answers.\n\n" + HOW_TO_BODY

_INTRO = """\
# cutecourse: NVIDIA's CuTe Python DSL, from layouts to Hopper and Blackwell GEMMs

A hands-on Jupyter course on the **CuTe DSL** (`import cutlass.cute`), the Python way to write
CUTLASS-class GPU kernels: eight notebooks from "a layout is a function" to a pipelined,
TMA-multicast Hopper GEMM, the schedules CUTLASS uses, grouped, block-scaled GEMMs for
mixture-of-experts layers, and the mixed-input GEMM of LLM decoding. **No GPU is needed to follow it**: every kernel is compiled for its
real target (sm_90a for Hopper, sm_100a for Blackwell) on your CPU, and the course shows what the
compiler made; on a matching GPU the notebooks also run the kernels, check them against PyTorch
and time them.

This is the learner edition: the notebooks, the exercises with their checkers, and the package
they import. Your teacher gives out the answers after each block.
"""
#: The learner site opens on the same README, with this paragraph for the zip's.
_SITE_EDITION = """This site is the learner edition: every notebook and exercise with its stored outputs, to read.
To run them, your teacher gives out the same course as a folder, `cutecourse-learner.zip`; the
steps below start it. Your teacher gives out the answers after each block.
"""

_OUTRO = """\
## The commands

- `./course.sh setup`: set up `.venv` once (`./course.sh setup --force` redoes it).
- `./course.sh check`: check this seat in under a minute (versions, GPU, driver, a compile for
  sm_90a and sm_100a, which notebooks run kernels here); `./course.sh check --json` for your
  teacher; `./course.sh check --notebooks` also runs every notebook top to bottom (minutes).
- `./course.sh lab`: open the course in JupyterLab; arguments go to JupyterLab
  (`./course.sh lab --no-browser --port 9999`).
- `./course.sh --help` lists them, `./course.sh lab --help` explains one.

## What is in this folder

`notebooks/` the lessons · `exercises/` the exercises, each with its checker · `cutecourse/` the
kernels, pictures, compile and inspect tools and checkers the notebooks import · `benchmarks/`
the scripts that measured the H100 figures the notebooks quote, and their results
(`benchmarks/results/`) · `docs/` background pages · `course.sh` the commands.

The course teaches **nvidia-cutlass-dsl 4.8.1** (pinned; newer releases change APIs). Code: MIT
(`LICENSE`); lesson text: CC BY 4.0 (`LICENSE-lessons.md`).
"""

#: Sentences of the course's pages that the learner edition words differently (pattern, words):
#: it has no ``solutions/`` folder until the teacher releases one. The test reads every learner
#: page for a sentence that still sends a learner there.
REWORDED = (
    (r"Answers are in `solutions/`\.", "Your teacher gives out the answers after the block."),
    (r"Answers: `solutions/[\w.-]+`\.", "Your teacher gives out the answers after the block."),
)


def readme(site: bool = False) -> str:
    """The learner edition's README: what the course is, how to start, the notebooks and their
    times (the repository README's table, from the same estimates), the commands. ``site``: the
    learner site's root page, which says where the folder to run comes from."""
    body = re.sub(r"^\*\*Before the day\*\*", "**Start**", HOW_TO_BODY, flags=re.MULTILINE)
    intro = _INTRO.replace(_INTRO.split("\n\n")[-1], _SITE_EDITION) if site else _INTRO
    return (intro + "\n## Before you start\n\n" + body + "\n## The notebooks\n\n"
            + generate.readme_table().rstrip() + "\n\n" + _OUTRO)


def reword(text: str) -> str:
    """``text`` (markdown, or a notebook's JSON) with :data:`REWORDED`'s sentences replaced."""
    for pattern, words in REWORDED:
        text = re.sub(pattern, words, text)
    return text
