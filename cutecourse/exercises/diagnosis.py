"""Which known mistake explains a learner's answers: the diagnosis the checkers' messages name.

A checker keeps a list of *mistake models*, ``(predict, why)``: ``predict(*case)`` reimplements
the answer with one classic mistake (N before M, floor for ceil, row-major scale factors ...),
``why`` says in one sentence what is wrong. :func:`diagnose` picks the message of the mistake
that reproduces the learner's answers, so the red box says what to fix, not only that it is wrong.
"""

from __future__ import annotations


def predicts(predict, case, got) -> bool:
    """``predict(*case) == got``; False where the mistake model does not apply to ``case``."""
    try:
        return predict(*case) == got
    except Exception:  # noqa: BLE001  (a mistake model that does not apply to this case)
        return False


def diagnose(got, case, mistakes, default: str, answers: dict | None = None) -> str:
    """The message of the known mistake that explains the learner's answers.

    ``answers`` (case -> learner's answer, for a whole problem) is preferred: a mistake that
    reproduces every one of them; otherwise the first that gives ``got`` for ``case``; else
    ``default``.
    """
    if answers:
        for predict, why in mistakes:
            if all(predicts(predict, c, a) for c, a in answers.items()):
                return why
    for predict, why in mistakes:
        if predicts(predict, case, got):
            return why
    return default
