"""Simulated results do not move by accident: every shipped scenario's summary.json equals,
to the last digit, the one in tests/golden/ (regenerated only by a change meant to alter
results: tests/golden/regenerate.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gansim.core.files import shipped_names
from gansim.outputs.results import to_json
from gansim.whatif.study import load_scenario, simulate_scenario

GOLDEN = Path(__file__).resolve().parent / "golden"


def test_every_shipped_scenario_has_a_golden_summary():
    assert sorted(p.name.removesuffix(".summary.json") for p in GOLDEN.glob("*.summary.json")) == \
        shipped_names("scenarios")


@pytest.mark.parametrize("name", shipped_names("scenarios"))
def test_summary_equals_the_golden_one(name):
    expected = (GOLDEN / f"{name}.summary.json").read_text()
    assert to_json(simulate_scenario(load_scenario(name))) == expected
