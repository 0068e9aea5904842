#!/usr/bin/env python
"""The calibrator's accuracy on this machine, the way docs/calibration.md describes it.

Each round: ``gansim calibrate`` (world sizes 1 and 2 by default), ``gansim validate``, then
the independent user script ``bench/user_ddp_gan.py`` twice in a row (A, then B), with the
CPU steal of each stage. Per round and world size it prints the predicted step time, and
against it the calibrator's own measurement and the user script's A and B (the mean of its
runs), each with the prediction's error; and how far A and B, the same script run twice,
are apart: no prediction can be held closer to a measurement than the machine repeats it.

Usage::

    python bench/accuracy.py [--rounds 3] [--world-sizes 1,2] [--user-repeats 3]
                             [--out accuracy-out] [-- extra gansim calibrate flags]

Everything each stage wrote stays in ``--out`` (profiles, validation, the user script's
JSON, and ``rounds.json`` with every figure printed, rewritten atomically after each round).
"""

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from gansim.calibration.ranks.machine import cpu_steal_ticks, steal_between
from gansim.core.files import atomic_write as write_text_atomic

HERE = Path(__file__).resolve().parent


def run(cmd: list[str], out_path: Path) -> tuple[float, float | None]:
    """Run `cmd` with stdout into `out_path`; return (wall seconds, CPU steal share)."""
    before, start = cpu_steal_ticks(), time.perf_counter()
    with open(out_path, "w", encoding="utf-8") as out, open(out_path.with_suffix(".log"), "w") as log:
        done = subprocess.run(cmd, stdout=out, stderr=log)
    if done.returncode != 0:
        sys.exit(f"accuracy: {' '.join(cmd)} failed with exit code {done.returncode}; "
                 f"see {out_path.with_suffix('.log')}")
    return time.perf_counter() - start, steal_between(before, cpu_steal_ticks())


def error(predicted: float, measured: float) -> float:
    return (predicted - measured) / measured


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--world-sizes", default="1,2")
    parser.add_argument("--user-repeats", type=int, default=3, help="the user script's --repeats")
    parser.add_argument("--user-steps", type=int, default=60)
    parser.add_argument("--batch-size", type=int, default=64, help="per rank, for both")
    parser.add_argument("--out", default="accuracy-out")
    parser.add_argument("calibrate_args", nargs="*", help="after --: more gansim calibrate flags")
    args = parser.parse_args()
    if args.rounds < 1 or args.user_repeats < 1 or args.user_steps < 1 or args.batch_size < 1:
        parser.error("need --rounds, --user-repeats, --user-steps and --batch-size >= 1")
    # the user script trains the paper's MLP GAN with DDP: the calibration must too
    fixed = [a for a in args.calibrate_args if a.split("=")[0] in ("--model", "--mode", "--batch-size",
                                                                    "--world-sizes", "--out")]
    if fixed:
        parser.error(f"{fixed[0]} is set by this script (the user script trains paper-mlp-gan with DDP)")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    gansim = [sys.executable, "-m", "gansim"]
    user = [sys.executable, str(HERE / "user_ddp_gan.py"), "--world-sizes", args.world_sizes,
            "--steps", str(args.user_steps), "--warmup", "10", "--batch-size", str(args.batch_size),
            "--repeats", str(args.user_repeats), "--json"]
    rounds = []
    for i in range(1, args.rounds + 1):
        profile = out / f"profile-{i}.json"
        began = time.strftime("%H:%M:%S", time.gmtime())
        cal_s, cal_steal = run(gansim + ["calibrate", "--world-sizes", args.world_sizes, "--out", str(profile),
                                         "--model", "paper-mlp-gan", "--mode", "ddp",
                                         "--batch-size", str(args.batch_size), *args.calibrate_args],
                               out / f"calibrate-{i}.txt")
        run(gansim + ["validate", "--profile", str(profile), "--out", str(out / f"validate-{i}"), "--json"],
            out / f"validate-{i}.json")
        _, steal_a = run(user, out / f"user-a-{i}.json")
        _, steal_b = run(user, out / f"user-b-{i}.json")
        validation = json.loads((out / f"validate-{i}.json").read_text())
        a = json.loads((out / f"user-a-{i}.json").read_text())
        b = json.loads((out / f"user-b-{i}.json").read_text())
        row = {"round": i, "began_utc": began, "calibrate_s": cal_s,
               "steal": {"calibrate": cal_steal, "user_a": steal_a, "user_b": steal_b}, "world_sizes": {}}
        print(f"round {i} (from {began} UTC): calibrate {cal_s:.0f} s; CPU steal: calibrate "
              f"{cal_steal or 0:.1%}, user A {steal_a or 0:.1%}, user B {steal_b or 0:.1%}")
        for r in validation["rows"]:
            ws = str(r["world_size"])
            pred, cal = r["predicted_step_time_s"], r["measured_step_time_s"]
            ua, ub = a["mean_step_s"][ws], b["mean_step_s"][ws]
            row["world_sizes"][ws] = {"predicted_s": pred, "calibrator_s": cal, "user_a_s": ua, "user_b_s": ub,
                                      "error_vs_calibrator": error(pred, cal), "error_vs_user_a": error(pred, ua),
                                      "error_vs_user_b": error(pred, ub), "user_a_vs_b": error(ua, ub)}
            print(f"  world size {ws}: predicted {pred * 1e3:6.1f} ms | calibrator {cal * 1e3:6.1f} ms "
                  f"({error(pred, cal):+6.1%}) | user A {ua * 1e3:6.1f} ms ({error(pred, ua):+6.1%}) | "
                  f"user B {ub * 1e3:6.1f} ms ({error(pred, ub):+6.1%}) | A vs B {error(ua, ub):+6.1%}", flush=True)
        rounds.append(row)
        write_text_atomic(json.dumps(rounds, indent=1) + "\n", out / "rounds.json")
    errors = [abs(v[k]) for r in rounds for v in r["world_sizes"].values()
              for k in ("error_vs_calibrator", "error_vs_user_a", "error_vs_user_b")]
    apart = [abs(v["user_a_vs_b"]) for r in rounds for v in r["world_sizes"].values()]
    print(f"{sum(e <= 0.10 for e in errors)} of {len(errors)} errors within 10 %; the user script's A and B "
          f"up to {max(apart):.1%} apart")
    return 0


if __name__ == "__main__":
    sys.exit(main())
