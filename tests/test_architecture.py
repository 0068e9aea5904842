"""The layering of docs/architecture.md holds: import-linter's contracts (pyproject.toml)
are kept, every subpackage is in a layer, and only `gansim` is installed at the top level."""

from __future__ import annotations

import importlib.metadata
import pkgutil
from pathlib import Path

import pytest
import tomllib

import gansim

ROOT = Path(__file__).resolve().parent.parent


def contracts() -> list[dict]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]


def test_import_linter_contracts_are_kept(monkeypatch):
    lint = pytest.importorskip("importlinter.cli", reason="the test extra installs import-linter")
    monkeypatch.chdir(ROOT)
    assert lint.lint_imports(config_filename=str(ROOT / "pyproject.toml"), no_cache=True) == 0


def layered(package: str) -> set[str]:
    """The modules a layers contract places, for the one whose container is `package`."""
    (contract,) = [c for c in contracts() if c["type"] == "layers" and c.get("containers", ["gansim"]) == [package]]
    prefix = "" if "containers" not in contract else package + "."
    return {prefix + name.strip() for layer in contract["layers"] for name in layer.split("|")}


def test_every_subpackage_sits_in_a_layer():
    subpackages = {f"gansim.{m.name}" for m in pkgutil.iter_modules(gansim.__path__) if m.ispkg}
    assert subpackages == layered("gansim")


def test_every_part_of_calibration_sits_in_a_layer():
    """calibration/ is split by where its code runs: every module of it is in its contract."""
    import gansim.calibration

    parts = {f"gansim.calibration.{m.name}" for m in pkgutil.iter_modules(gansim.calibration.__path__)}
    assert parts == layered("gansim.calibration")


def test_every_subpackage_is_installed():
    import gansim.calibration

    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {"gansim"} | {f"gansim.{m.name}" for m in pkgutil.iter_modules(gansim.__path__) if m.ispkg}
    found |= {f"gansim.calibration.{m.name}" for m in pkgutil.iter_modules(gansim.calibration.__path__) if m.ispkg}
    assert found <= listed


def test_only_gansim_is_installed_at_the_top_level():
    top_level = importlib.metadata.distribution("gansim").read_text("top_level.txt")
    assert top_level is not None and top_level.split() == ["gansim"]


def test_the_public_api_is_importable_by_name():
    for name in gansim.__all__:
        assert getattr(gansim, name) is not None
    with pytest.raises(AttributeError):
        gansim.no_such_thing  # noqa: B018
