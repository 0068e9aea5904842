"""Rewrite tests/golden/*.summary.json from the shipped scenarios, for a change that is
meant to alter simulated results (say which and why in the README and the commit):

    python tests/golden/regenerate.py
"""

from __future__ import annotations

from pathlib import Path

from gansim.core.files import atomic_write, shipped_names
from gansim.outputs.results import to_json
from gansim.whatif.study import load_scenario, simulate_scenario

GOLDEN = Path(__file__).resolve().parent

if __name__ == "__main__":
    for name in shipped_names("scenarios"):
        atomic_write(GOLDEN / f"{name}.summary.json", to_json(simulate_scenario(load_scenario(name))))
        print(f"wrote {GOLDEN / f'{name}.summary.json'}")
