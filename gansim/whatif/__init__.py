"""The seed papers' what-ifs, above the simulation of one point: whole runs (input,
checkpoints, failures, preemptions), memory and cost/energy per run, the cheapest platform
under a deadline, and dynamic vs fixed allocation. `study.run_scenario` is a scenario with
all of them."""
