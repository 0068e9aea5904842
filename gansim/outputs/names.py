"""What gansim's commands write into an --out folder, by name only: the CLI reads these at
start-up to check a folder before any work, so this module imports nothing (the writers in
results.py and validation_files.py pull in the report and plotting code)."""

from __future__ import annotations

TRACE_DIR = "traces"
# everything write_run_outputs (simulate) writes into its folder
SIMULATE_OUTPUTS = ("summary.json", "summary.csv", "report.html", "details.json", TRACE_DIR)
# the finished points of an unfinished simulate (gansim.runner.partial.PointStore): the same
# command resumes from them; a finished simulate leaves none behind
SIMULATE_PARTIAL = ".gansim-partial"
# everything write_validation and write_published_validation write into theirs
VALIDATION_OUTPUTS = ("validation.json", "report.html")
# the single files `plan --out` and `topology show --out` write
PLAN_OUTPUT, TOPOLOGY_OUTPUT = "plan.json", "topology.html"
# simulate and validate replace their outputs as a whole and keep the other commands'
# (gansim.core.files.replaced_dir); anything else in the folder is not theirs to replace
KNOWN_OUTPUTS = frozenset(SIMULATE_OUTPUTS + VALIDATION_OUTPUTS + (SIMULATE_PARTIAL, PLAN_OUTPUT, TOPOLOGY_OUTPUT))
