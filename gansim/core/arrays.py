"""Array shapes that several stages build: ragged ranges, one per row, laid end to end."""

from __future__ import annotations

import numpy as np


def ragged(starts: np.ndarray, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Every position from starts[i] to starts[i] + counts[i] (exclusive), end to end, and
    which i each is for: the elements of rows i of a flat array whose rows start at `starts`."""
    starts, counts = np.asarray(starts, dtype=np.int64), np.asarray(counts, dtype=np.int64)
    owner = np.repeat(np.arange(counts.size), counts)
    return np.arange(int(counts.sum())) + np.repeat(starts - (np.cumsum(counts) - counts), counts), owner
