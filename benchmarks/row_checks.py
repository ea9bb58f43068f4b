"""Checking a benchmark row before it is timed: the relative error every benchmark reports, and a
torch row that is checked once and then added to the cases.

A row that computes something else must never be timed, so each benchmark checks every row first
and stores its error beside the times (``bench.checked_case`` for a row that writes into a tensor;
``torch_case`` below for a torch function that returns a new one).
"""

from __future__ import annotations

from cutecourse import bench


def rel_err(out, ref) -> float:
    """max |out - ref| / max |ref|, in fp32: one number per row, comparable across dtypes."""
    return ((out.float() - ref.float()).abs().max() / ref.float().abs().max()).item()


def torch_case(cases, errors, label, exact, fn, max_rel_err=5e-2):
    """A torch function that returns a new tensor: checked once against the exact product, its
    error stored in ``errors[label]``, then appended to ``cases``. The default bound is loose
    because FP8 with one scale per row or per tensor is coarser than 1x128 blocks."""
    errors[label] = rel_err(fn(), exact)
    if not errors[label] <= max_rel_err:
        raise AssertionError(f"{label}: relative error {errors[label]:.3g} (allowed {max_rel_err})")
    cases.append(bench.Case(label, fn))
