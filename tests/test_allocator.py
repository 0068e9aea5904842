"""The command's allocator settings (gansim/runner/allocator.py)."""

from __future__ import annotations

import pytest

from gansim.runner.allocator import thp_compacts_on_fault


@pytest.mark.parametrize("setting, compacts", [
    ("always defer defer+madvise [madvise] never\n", True),
    ("[always] defer defer+madvise madvise never\n", True),
    ("always defer [defer+madvise] madvise never\n", True),
    ("always [defer] defer+madvise madvise never\n", False),
    ("always defer defer+madvise madvise [never]\n", False),
    ("", False),
])
def test_numpy_keeps_asking_for_huge_pages_only_where_a_fault_does_not_compact_memory(setting, compacts):
    assert thp_compacts_on_fault(setting) is compacts
