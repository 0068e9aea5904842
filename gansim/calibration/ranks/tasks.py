"""The tasks a rank runs (``train``, ``compute``, ``sweep``, ``reduce``) and how the ranks'
payloads of one task are merged."""

from __future__ import annotations

from typing import Any, Sequence

from gansim.calibration.ranks.microbench import allreduce_sweep, reduce_bench
from gansim.calibration.ranks.run_config import RunConfig
from gansim.calibration.ranks.timing import RankEnv
from gansim.calibration.ranks.training_loop import train_loop


def execute_task(env: RankEnv, cfg: RunConfig, task: str) -> Any:
    """Run one task on this rank and return its per-rank payload."""
    if task == "train":
        samples, _, costs = train_loop(env, cfg, communicate=True)
        return {"samples": samples, "costs": costs}
    if task == "compute":
        # at world size > 1, each step together follows one of rank 0 alone, so that the
        # core-sharing factor compares like with like (this machine's speed drifts)
        samples, solo, costs = train_loop(env, cfg, communicate=False, solo_steps=True)
        return {"samples": samples, "solo": solo, "costs": costs}
    if task == "sweep":
        return {"rows": allreduce_sweep(env, cfg) if env.world_size > 1 else []}
    if task == "reduce":
        return {"rows": reduce_bench(env, cfg) if env.rank == 0 else []}
    raise ValueError(f"unknown task {task!r}")


def combine_task(task: str, payloads: Sequence[Any]) -> Any:
    """Merge the per-rank payloads of one task (index = rank in the group)."""
    if task == "script":
        # the ranks' phases; what rank 0 saw of the collectives (all ranks issue the same)
        return {"ranks": [{"rank": r, "phases": p["samples"]} for r, p in enumerate(payloads)],
                **{k: payloads[0][k] for k in ("collectives", "costs", "batch_size", "d_steps", "ddp_buckets")},
                "torch_threads": max(p.get("torch_threads", 0) for p in payloads)}
    if task in ("train", "compute"):
        merged: dict[str, Any] = {"ranks": [{"rank": r, "phases": p["samples"]} for r, p in enumerate(payloads)],
                                  "costs": payloads[0].get("costs") if payloads else None}
        if payloads and payloads[0].get("solo"):
            merged["solo"] = [{"rank": 0, "phases": payloads[0]["solo"]}]
        return merged
    # sweep rows are identical on every rank (MAX-reduced); reduce rows come from rank 0
    return {"rows": payloads[0]["rows"]}
