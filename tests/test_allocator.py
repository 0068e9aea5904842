"""The command's allocator settings (gansim/runner/allocator.py)."""

from __future__ import annotations

import os
import subprocess
import sys

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


@pytest.mark.parametrize("setting, user, asks", [
    ("always defer defer+madvise [madvise] never\n", None, False),
    ("always [defer] defer+madvise madvise never\n", None, True),
    ("always defer defer+madvise [madvise] never\n", "1", True),  # the user's own choice stands
])
def test_numpy_imported_after_the_command_starts_asks_for_huge_pages_as_the_kernel_allows(tmp_path, setting, user,
                                                                                         asks):
    defrag = tmp_path / "defrag"
    defrag.write_text(setting)
    code = (f"import gansim.runner.allocator as a; a.THP_DEFRAG = {str(defrag)!r}; a.tune_allocator(); "
            "import numpy\ntry:\n from numpy._core import multiarray\nexcept ImportError:\n from numpy.core import multiarray\n"
            "print(multiarray._get_madvise_hugepage())")
    env = {k: v for k, v in os.environ.items() if k != "NUMPY_MADVISE_HUGEPAGE"}
    if user is not None:
        env["NUMPY_MADVISE_HUGEPAGE"] = user
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert done.stdout.strip() == str(asks)


@pytest.mark.parametrize("start, after", [((700, 10, 10), (10_000, 10, 10)), ((50_000, 5, 5), (50_000, 5, 5)),
                                          ((0, 10, 10), (0, 10, 10))])
def test_the_command_collects_its_youngest_objects_less_often_and_never_turns_collection_on_or_lower(start, after):
    """A fresh interpreter with the threshold `start` (0: collection off), then the command's
    main, which runs a command that does no simulation: the threshold it leaves."""
    code = (f"import gc; gc.set_threshold(*{start!r}); from gansim.cli.main import main; "
            "import contextlib, io\ntry:\n with contextlib.redirect_stdout(io.StringIO()): main(['--version'])\n"
            "except SystemExit:\n pass\nprint(gc.get_threshold())")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.stdout.strip().splitlines()[-1] == str(after), done.stderr
