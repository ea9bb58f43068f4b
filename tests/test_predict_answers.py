"""Every "predict" prompt of a notebook has its answer in the instructor notes.

A prompt is a markdown cell of ``notebooks/NN_*.ipynb`` that asks the reader to predict
(``### Predict, then run``, ``**Predict.**``, ``**Predict, then compile.**``, ``*Predict first:*``).
Its answer in ``docs/instructor/NN.md`` is tied to it by the cell's id, in a comment on the line
above the answer's heading: ``<!-- predict: <cell id> -->`` (invisible on the site). A new prompt
without an answer, or an answer whose prompt is gone, fails here with the cell to look at.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NOTES = ROOT / "docs" / "instructor"

#: The prompt's opening words, in bold, italics or a heading: "Predict" as a word (not "predicts",
#: not "Prediction and measurement", and not "predict" inside a sentence of the objectives).
PROMPT = re.compile(r"(?:\*\*|\*|^#+[ \t]*)Predict\b", re.M)
TAG = re.compile(r"^<!-- predict: (\S+) -->$", re.M)


def prompts(notebook: Path) -> dict[str, str]:
    """cell id -> the prompt's first line, for every markdown cell of ``notebook`` that asks."""
    cells = json.loads(notebook.read_text(encoding="utf-8"))["cells"]
    found = {}
    for cell in cells:
        text = "".join(cell["source"])
        if cell["cell_type"] == "markdown" and (m := PROMPT.search(text)):
            found[cell["id"]] = text[m.start():].splitlines()[0][:100]
    return found


def answers(note: Path) -> dict[str, str]:
    """cell id -> the heading under its tag, for every ``<!-- predict: id -->`` in ``note``."""
    lines = note.read_text(encoding="utf-8").splitlines()
    found = {}
    for i, line in enumerate(lines):
        if m := TAG.match(line):
            found[m.group(1)] = lines[i + 1] if i + 1 < len(lines) else ""
    return found


def notebooks() -> list[Path]:
    return sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))


def test_every_prompt_has_an_answer_and_every_answer_a_prompt():
    problems = []
    for nb in notebooks():
        note = NOTES / f"{nb.name[:2]}.md"
        asked = prompts(nb)
        if not note.exists():
            if asked:
                problems.append(f"{note.relative_to(ROOT)} is missing; {nb.name} asks {len(asked)} predictions")
            continue
        answered = answers(note)
        for cid, first in asked.items():
            if cid not in answered:
                problems.append(f"{nb.name}, cell {cid}: {first!r} has no answer in "
                                f"{note.relative_to(ROOT)}: write one under `<!-- predict: {cid} -->`")
        for cid, heading in answered.items():
            if cid not in asked:
                problems.append(f"{note.relative_to(ROOT)}: `<!-- predict: {cid} -->` ({heading[:60]!r}) "
                                f"names no prompt cell of {nb.name}: the prompt moved or was removed")
            elif not heading.startswith("**Section"):
                problems.append(f"{note.relative_to(ROOT)}: `<!-- predict: {cid} -->` must sit on the "
                                f"line above its answer's **Section ...** heading")
    assert not problems, "\n".join(problems)


def test_the_prompt_pattern_finds_the_forms_the_notebooks_use():
    # each form once, and the look-alikes that are not prompts
    for text in ("### Predict, then run\nHow big?", "**Predict.** Read it.", "*Predict first:* at K",
                 "**Predict, then look:** which"):
        assert PROMPT.search(text), text
    for text in ("## 6. How fast? Prediction and measurement", "- predict the speed-up of a loop",
                 "the model predicts 1.2x"):
        assert not PROMPT.search(text), text


def test_every_notebook_asks_at_least_one_prediction():
    # the course promises a "predict, then run" moment per notebook (README)
    quiet = [nb.name for nb in notebooks() if not prompts(nb)]
    assert not quiet, f"no prediction prompt found in {quiet}"
