"""What a browser test can find on a widget without a browser: its CSS classes."""

from __future__ import annotations

from typing import Iterable


def classes_of(widgets: Iterable) -> set[str]:
    """Every CSS class on these widgets and their children."""
    found: set[str] = set()
    stack = list(widgets)
    while stack:
        x = stack.pop()
        found.update(getattr(x, "_dom_classes", ()))
        stack.extend(getattr(x, "children", ()))
    return found
