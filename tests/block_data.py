"""Test data for the block-scaling references: rows of very different magnitudes, so that
neighbouring blocks get different scales."""

import torch


def randn(rows, cols, seed=0, spread=0.0):
    """Gaussian rows, each row scaled by 10**u with u uniform in [-spread, spread]."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, cols, generator=g)
    return x * 10 ** ((torch.rand(rows, 1, generator=g) * 2 - 1) * spread)
