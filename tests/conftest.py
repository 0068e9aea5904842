from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml


@pytest.fixture
def write_yaml(tmp_path: Path):
    """Write a mapping (or raw text) to a YAML file under tmp_path and return its path."""

    def write(name: str, content: Any) -> Path:
        path = tmp_path / name
        path.write_text(content if isinstance(content, str) else yaml.safe_dump(content, sort_keys=False))
        return path

    return write


def pytest_terminal_summary(terminalreporter, config) -> None:
    """The random order's seed, also under -q (which hides pytest-randomly's header line), so
    that an order-dependent failure can be replayed with --randomly-seed."""
    seed = getattr(config.option, "randomly_seed", None)
    if config.pluginmanager.hasplugin("randomly") and isinstance(seed, int):
        terminalreporter.write_line(f"tests ran in random order: replay it with --randomly-seed={seed}")
