"""Array shapes that several stages build: ragged ranges, one per row, laid end to end; the
distinct numbers of an array and where each element is among them."""

from __future__ import annotations

import hashlib

import numpy as np


def ragged(starts: np.ndarray, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Every position from starts[i] to starts[i] + counts[i] (exclusive), end to end, and
    which i each is for: the elements of rows i of a flat array whose rows start at `starts`."""
    starts, counts = np.asarray(starts, dtype=np.int64), np.asarray(counts, dtype=np.int64)
    owner = np.repeat(np.arange(counts.size), counts)
    return np.arange(int(counts.sum())) + np.repeat(starts - (np.cumsum(counts) - counts), counts), owner


def unique_inverse(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """np.unique(values, return_inverse=True) for non-negative integers (resource, route or
    vertex numbers): where their range is not much wider than their count, counted rather than
    sorted, which is O(n) instead of O(n log n); the same two arrays either way."""
    values = np.asarray(values)
    if values.size and values.dtype.kind in "iu":
        low, top = int(values.min()), int(values.max()) + 1
        if low >= 0 and top <= 8 * values.size + 4096:
            used = np.flatnonzero(np.bincount(values.ravel(), minlength=top))
            place = np.empty(top, dtype=np.int64)
            place[used] = np.arange(used.size)
            return used.astype(values.dtype, copy=False), place[values.ravel()]
    used, inverse = np.unique(values, return_inverse=True)
    return used, inverse.ravel()


def unique_pairs(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """np.unique(np.stack([a, b], axis=1), axis=0, return_inverse=True) for non-negative
    integers (node pairs), with the inverse flat: each pair one number, a * (b's top + 1) + b,
    which sorts as the rows do; numpy's unique of rows sorts them as records, ten times slower."""
    a, b = np.asarray(a, dtype=np.int64), np.asarray(b, dtype=np.int64)
    if a.size == 0:
        return np.zeros((0, 2), dtype=np.int64), np.zeros(0, dtype=np.int64)
    if min(int(a.min()), int(b.min())) < 0:
        raise ValueError("unique_pairs takes non-negative integers")
    width = int(b.max()) + 1
    used, inverse = unique_inverse(a * width + b)
    return np.stack(np.divmod(used, width), axis=1), inverse


def rounded(values: np.ndarray, digits: int) -> list[float]:
    """[round(float(v), digits) for v in values], to the bit, with numpy doing the work: a
    link figure per directed link is hundreds of thousands of values at 16,384 GPUs.

    Python rounds the exact binary value to `digits` decimals (half to even) and returns the
    double nearest that decimal. Here the value is scaled by 10^digits (one rounding, within
    half an ulp) and rounded to a whole number k: that is Python's k wherever the scaled value
    is further than two ulps from a half, and k / 10^digits, one correctly rounded division of
    two exact doubles, is then the double nearest Python's decimal. The values near a half,
    and those too large or not finite, are rounded by Python itself."""
    values = np.asarray(values, dtype=float).ravel()
    scale = 10.0 ** digits
    with np.errstate(invalid="ignore", over="ignore"):
        scaled = values * scale
        out = np.rint(scaled) / scale
        unsure = ~(np.abs(scaled) < 2.0 ** 52)  # (also every value that is not finite)
        unsure |= np.abs(np.abs(scaled - np.trunc(scaled)) - 0.5) <= 2 * np.spacing(np.abs(scaled))
    found = out.tolist()
    for i in np.flatnonzero(unsure).tolist():
        found[i] = round(float(values[i]), digits)
    return found


def content_key(*arrays: np.ndarray) -> bytes:
    """A dictionary key for the contents of these arrays (their dtypes, shapes and bytes), of
    16 bytes however long they are: a collective's flow may cross a hundred thousand
    resources, and keys of its bytes themselves would hold tens of MB."""
    digest = hashlib.blake2b(digest_size=16)
    for a in arrays:
        a = np.ascontiguousarray(a)
        digest.update(f"{a.dtype.str}{a.shape}".encode())
        digest.update(a.tobytes())
    return digest.digest()
