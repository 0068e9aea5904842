"""Hostile input, generated here rather than stored: every command and every file format fed
what a careless or malicious user could give (non-finite and absurd numbers, booleans for
numbers, broken and oversized YAML and JSON, limits exceeded, bad output folders, addresses
where no Dask scheduler answers). Each case must end with exit code 2 and one line on stderr
naming the problem, no traceback, within a time bound, and leave an earlier good output
exactly as it was. Cases run in-process through gansim.cli.main.main; a subprocess only
where a hang, runaway memory or a signal must be observed."""

from __future__ import annotations

import copy
import gzip
import json
import os
import random
import signal
import socket
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from gansim.cli.main import main
from gansim.outputs.names import SIMULATE_PARTIAL
from gansim.core import limits
from gansim.core.errors import UserInputError
from gansim.prediction.published import compare, load_published
from gansim.topology.generators import GENERATORS
from gansim.whatif.catalog import load_catalog_from
from tests.hostile import BOX, GOOD, PHASE_NAMES, PROFILE, TRACE, leaves, replaced, without, write_files

# What no number in any file may be: non-finite, beyond every range, or not a number at all
HOSTILE_NUMBERS: tuple[tuple[str, Any], ...] = (
    ("nan", float("nan")), ("inf", float("inf")), ("-inf", float("-inf")), ("1e308", 1e308),
    ("-1e308", -1e308), ("true", True), ("string", "12"), ("list", [1]), ("mapping", {"a": 1}),
)
# JSON has no NaN or infinity: as a profile writes them, they are words the reader refuses
HOSTILE_JSON_NUMBERS = tuple((name, value) for name, value in HOSTILE_NUMBERS if name not in ("nan", "inf", "-inf"))


# ----------------------------------------------------------------------------- cases
@dataclass
class Case:
    name: str
    argv: list[str]  # {dir}: the case's folder, {out}: the earlier good output, {box}, {good}, {profile}
    files: dict[str, Any] = field(default_factory=dict)  # name -> mapping (YAML/JSON by suffix) or bytes
    env: dict[str, str] = field(default_factory=dict)
    expect: str = ""  # a piece of the one line (the field it names)
    cwd: bool = False  # run inside the case's folder


def field_name(path: tuple) -> str:
    return str(next(key for key in reversed(path) if isinstance(key, str)))


def scenario_number_cases() -> Iterator[Case]:
    for path, _ in leaves(GOOD):
        for label, value in HOSTILE_NUMBERS:
            yield Case(f"scenario-{'.'.join(map(str, path))}={label}", ["simulate", "{dir}/s.yaml", "--out", "{out}"],
                       {"s.yaml": replaced(GOOD, path, value), "box.yaml": BOX}, expect=field_name(path))


def topology_number_cases() -> Iterator[Case]:
    for path, _ in leaves(BOX):
        for label, value in HOSTILE_NUMBERS:
            yield Case(f"topology-{'.'.join(map(str, path))}={label}",
                       ["topology", "show", "{dir}/t.yaml", "--out", "{out}"],
                       {"t.yaml": replaced(BOX, path, value)}, expect=field_name(path))


def generator_number_cases() -> Iterator[Case]:
    for name in GENERATORS:
        for param, info in GENERATORS.get(name).params_model.model_fields.items():
            if not any(t in str(info.annotation) for t in ("int", "float")):
                continue
            for label, value in (("nan", float("nan")), ("1e308", 1e308), ("true", True), ("string", "3"),
                                 ("negative", -1)):
                doc = {"name": "g", "generator": name, "params": {param: value}}
                yield Case(f"generator-{name}.{param}={label}", ["topology", "show", "{dir}/g.yaml"],
                           {"g.yaml": doc}, expect=f"params.{param}")
    for label, value in (("nan", float("nan")), ("1e308", 1e308), ("true", True)):
        doc = {"name": "g", "generator": "multi_node",
               "params": {"nodes": 2, "intra": "pcie_tree", "intra_params": {"pcie_bandwidth_GBps": value}}}
        yield Case(f"generator-multi_node.intra_params={label}", ["topology", "show", "{dir}/g.yaml"],
                   {"g.yaml": doc}, expect="params.intra_params")


def profile_number_cases() -> Iterator[Case]:
    for path, _ in leaves(PROFILE):
        if path == ("schema",):
            continue
        for label, value in HOSTILE_JSON_NUMBERS:
            yield Case(f"profile-{'.'.join(map(str, path))}={label}", ["predict", "--profile", "{dir}/p.json"],
                       {"p.json": replaced(PROFILE, path, value)}, expect=field_name(path))
    for literal in ("NaN", "Infinity", "-Infinity", "1e400"):  # what json.dumps writes for nan and inf
        text = json.dumps(PROFILE).replace('"alpha_s": 0.0002', f'"alpha_s": {literal}')
        yield Case(f"profile-fit.alpha_s={literal}", ["validate", "--profile", "{dir}/p.json", "--out", "{out}"],
                   {"p.json": text.encode()})


def profile_model_cases() -> Iterator[Case]:
    """Profiles the schema reads but no model can use, as the issue found them."""
    for phase in PHASE_NAMES[1:]:
        doc = without(without(PROFILE, "fit", "compute", phase), "measured", "phases")
        yield Case(f"profile-missing-{phase}", ["predict", "--profile", "{dir}/p.json"], {"p.json": doc},
                   expect="fit.compute")
    zero = replaced(without(PROFILE, "measured", "phases"), ("fit", "compute"), {p: 0.0 for p in PHASE_NAMES})
    bad = {
        "zero-phases": (zero, "fit.compute"),
        "negative-phase": (replaced(PROFILE, ("fit", "compute", "d_forward_s"), -0.01), "d_forward_s"),
        "negative-measured-step": (replaced(PROFILE, ("measured", "step_time_s", "2"), -0.09), "step_time_s"),
        "zero-measured-step": (replaced(PROFILE, ("measured", "step_time_s", "1"), 0.0), "step_time_s"),
        "huge-beta": (replaced(PROFILE, ("fit", "beta_s_per_byte"), 1.0), "beta_s_per_byte"),
        "huge-alpha": (replaced(PROFILE, ("fit", "alpha_s"), 1e6), "alpha_s"),
        "huge-sharing": (replaced(PROFILE, ("fit", "core_sharing", "2"), 1e300), "core_sharing"),
        "cv-the-simulator-rejects": (replaced(PROFILE, ("fit", "compute_cv"), 5.0), "compute_cv"),
        "zero-gradient-bytes": (replaced(PROFILE, ("fit", "gradient_bytes", "generator"), 0), "generator"),
        "d-steps-over-limit": (replaced(PROFILE, ("provenance", "d_steps"), 10**9), "d_steps"),
        "zero-batch": (replaced(PROFILE, ("provenance", "batch_size"), 0), "batch_size"),
        "zero-cores": (replaced(PROFILE, ("provenance", "cores"), 0), "cores"),
        "world-size-key-0": (replaced(PROFILE, ("measured", "step_time_s"), {"0": 0.1}), "step_time_s"),
        "world-size-key-x": (replaced(PROFILE, ("fit", "core_sharing"), {"x": 1.0}), "core_sharing"),
        "world-size-key-huge": (replaced(PROFILE, ("measured", "step_time_s"), {"99999999999": 0.1}),
                                "step_time_s"),
        "schema-2": (replaced(PROFILE, ("schema",), 2), "schema"),
        "no-fit": (without(PROFILE, "fit"), "fit"),
        "partial": ({**without(PROFILE, "fit"), "complete": False}, "fit"),
        "top-level-list": ([PROFILE], "top level"),
    }
    for name, (doc, expect) in bad.items():
        yield Case(f"profile-{name}", ["predict", "--profile", "{dir}/p.json", "--world-sizes", "1,2"],
                   {"p.json": doc}, expect=expect)
        if name in ("zero-phases", "huge-beta", "negative-measured-step"):
            yield Case(f"validate-profile-{name}", ["validate", "--profile", "{dir}/p.json", "--out", "{out}"],
                       {"p.json": doc}, expect=expect)


def broken_files() -> Iterator[tuple[str, bytes, str]]:
    """(name, bytes, a piece of the message) of files that are not a readable mapping."""
    rng = random.Random(15)
    bomb = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join([f'*{chr(97 + i)}'] * 9)}]\n" for i in range(8))
    yield "alias-bomb", (bomb + "sweep: {per_gpu_batch: *i}\n").encode(), "aliases"
    yield "deep-flow", b"name: x\nworkload: " + b"[" * 5000 + b"]" * 5000 + b"\n", "nesting"
    yield "deep-block", b"name: x\nworkload:\n" + b"".join(b" " * (i + 1) + b"a:\n" for i in range(500)), "nesting"
    yield "recursive-alias", b"name: &n [1, *n]\n", "alias"
    yield "alias-chain", b"".join(b"k%d: &a%d [*a%d]\n" % (i, i, i - 1) if i else b"k0: &a0 [1]\n"
                                  for i in range(80)), "nesting"
    yield "duplicate-key", b"name: a\ntopology: box.yaml\nname: b\n", "duplicate key 'name'"
    yield "duplicate-nested-key", b"name: a\noptions: {chunks: 1, chunks: 2}\n", "duplicate key 'chunks'"
    yield "utf16", "name: x\n".encode("utf-16"), "UTF-16"
    yield "utf16-no-bom", "name: x\n".encode("utf-16-le"), "UTF-16"
    yield "latin1", "name: caf\xe9\n".encode("latin-1"), "UTF-8"
    yield "binary", bytes(rng.randrange(256) for _ in range(4096)), ""
    yield "nul-byte", b"name: x\x00\n", "not allowed"
    yield "control-char", b"name: x\x07\n", "not allowed"
    yield "empty", b"", "empty"
    yield "only-comment", b"# nothing\n", "empty"
    yield "top-level-list", b"- name: x\n", "mapping"
    yield "top-level-scalar", b"just words\n", "mapping"
    yield "two-documents", b"name: x\n---\nname: y\n", "another document"
    yield "unclosed-bracket", b"name: x\ngpus: [1, 2\n", "malformed YAML"
    yield "unclosed-quote", b"name: 'x\n", "malformed YAML"
    yield "tab-indent", b"name: x\nnodes:\n\t- 1\n", "malformed YAML"
    yield "bad-indent", b"name: x\n  links: 1\n bad: 2\n", "malformed YAML"
    yield "undefined-alias", b"name: *nope\n", "malformed YAML"
    yield "unhashable-key", b"? [1]\n: 2\n", "malformed YAML"
    yield "python-tag", b"name: !!python/object:os.system x\n", "malformed YAML"
    yield "oversized", b"name: x\n" + b"# padding\n" * 300, "bytes in one YAML file"


def file_cases() -> Iterator[Case]:
    for name, data, expect in broken_files():
        env = {"GANSIM_MAX_YAML_BYTES": "1000"} if name == "oversized" else {}
        yield Case(f"scenario-file-{name}", ["simulate", "{dir}/f.yaml", "--out", "{out}"], {"f.yaml": data},
                   env, expect)
        yield Case(f"topology-file-{name}", ["topology", "show", "{dir}/f.yaml"], {"f.yaml": data}, env, expect)
        yield Case(f"nccl-tests-file-{name}", ["nccl-tests", "{dir}/f.yaml", "-g", "2"], {"f.yaml": data}, env, expect)
        yield Case(f"plan-file-{name}", ["plan", "{dir}/f.yaml", "--platforms", "aws-p3.2xlarge"], {"f.yaml": data},
                   env, expect)
        yield Case(f"scenario-topology-file-{name}", ["simulate", "{dir}/s.yaml", "--out", "{out}"],
                   {"f.yaml": data, "s.yaml": {**GOOD, "topology": "f.yaml"}}, env, expect)
    for name, data, expect in (
        ("not-json", b"{not json", "not valid JSON"), ("utf16", json.dumps(PROFILE).encode("utf-16"), "UTF-8"),
        ("latin1", b'{"a": "caf\xe9"}', "UTF-8"), ("deep", b"[" * 100_000 + b"]" * 100_000, "JSON"),
        ("empty", b"", "not valid JSON"), ("oversized", b"{}" + b" " * 2000, "bytes"),
    ):
        env = {"GANSIM_MAX_YAML_BYTES": "1000"} if name == "oversized" else {}
        yield Case(f"profile-file-{name}", ["predict", "--profile", "{dir}/p.json"], {"p.json": data}, env, expect)
    for command in (["simulate", "{dir}"], ["topology", "show", "{dir}"], ["plan", "{dir}"],
                    ["predict", "--profile", "{dir}"], ["validate", "--profile", "{dir}"],
                    ["nccl-tests", "{dir}", "-g", "2"], ["calibrate", "--from-trace", "{dir}", "--out", "{dir}/p.json"]):
        yield Case(f"directory-as-file-{command[0]}", command, expect="directory")
    for command in (["simulate", "{dir}/none.yaml"], ["topology", "show", "{dir}/none.yaml"],
                    ["predict", "--profile", "{dir}/none.json"]):
        yield Case(f"missing-file-{command[0]}", command, expect="none.")
    yield Case("device-file", ["simulate", "/dev/null"], expect="not a regular file")


def structure_cases() -> Iterator[Case]:
    """Right syntax, wrong shape: unknown or missing fields, wrong containers, names."""
    def sim(name: str, doc: Any, expect: str, **files: Any) -> Case:
        return Case(f"scenario-{name}", ["simulate", "{dir}/s.yaml", "--out", "{out}"],
                    {"s.yaml": doc, "box.yaml": BOX, **files}, expect=expect)

    yield sim("unknown-field", {**GOOD, "gpu_count": 3}, "gpu_count")
    yield sim("unknown-nested-field", replaced(GOOD, ("options", "speed"), 1), "options.speed")
    for required in ("name", "topology", "workload", "gpus"):
        yield sim(f"missing-{required}", without(GOOD, required), required)
    yield sim("gpus-empty", {**GOOD, "gpus": []}, "gpus")
    yield sim("gpus-zero", {**GOOD, "gpus": [0, 2]}, "gpus")
    yield sim("gpus-bool", {**GOOD, "gpus": [True, 2]}, "gpus[0]")
    yield sim("gpus-mapping", {**GOOD, "gpus": {"a": 1}}, "gpus")
    yield sim("steps-yes", {**GOOD, "steps": "yes"}, "steps")
    yield sim("steps-float", {**GOOD, "steps": 2.5}, "steps")
    yield sim("negative-seed", {**GOOD, "seed": -1}, "seed")
    yield sim("huge-seed", {**GOOD, "seed": 2**70}, "seed")
    yield sim("name-empty", {**GOOD, "name": ""}, "name")
    yield sim("name-number", {**GOOD, "name": 5}, "name")
    yield sim("algorithm-unknown", {**GOOD, "algorithms": ["butterfly"]}, "algorithms[0]")
    yield sim("cost-model-unknown", {**GOOD, "cost_model": "magic"}, "cost_model")
    yield sim("workload-unknown", {**GOOD, "workload": "stylegan9"}, "workload")
    yield sim("workload-number", {**GOOD, "workload": 5}, "workload")
    yield sim("topology-unknown", {**GOOD, "topology": "no-such-box"}, "topology")
    yield sim("topology-directory", {**GOOD, "topology": "."}, "topology")
    yield sim("topology-absolute-missing", {**GOOD, "topology": "/no/such/t.yaml"}, "topology")
    yield sim("more-gpus-than-topology", {**GOOD, "gpus": [1, 8]}, "gpus")
    yield sim("sweep-unknown-axis", {**GOOD, "sweep": {"colour": [1]}}, "sweep")
    yield sim("sweep-empty-axis", {**GOOD, "sweep": {"steps": []}}, "sweep")
    yield sim("sweep-nan", {**GOOD, "sweep": {"link_bandwidth_scale": [1.0, float("nan")]}}, "link_bandwidth_scale")
    yield sim("sweep-bool", {**GOOD, "sweep": {"steps": [True]}}, "steps")
    yield sim("sweep-not-a-list", {**GOOD, "sweep": {"steps": 3}}, "sweep")
    yield sim("elastic-inverted", replaced(GOOD, ("elastic", "min_gpus"), 4), "elastic")
    yield sim("whatif-without-run", without(GOOD, "run"), "run")
    yield sim("storage-unknown", {**GOOD, "storage": "floppy"}, "storage")
    yield sim("platform-unknown", {**GOOD, "platform": "mainframe"}, "platform")
    yield sim("spot-without-platform", {**GOOD, "pricing": "spot"}, "pricing")
    yield sim("strong-without-global-batch", {**GOOD, "scaling": "strong"}, "global_batch")
    yield sim("inline-allreduce-negative", {**GOOD, "workload": {"allreduce_bytes": -1}}, "allreduce_bytes")
    yield sim("inline-allreduce-huge", {**GOOD, "workload": {"allreduce_bytes": 2**70}}, "allreduce_bytes")
    bad_box = copy.deepcopy(BOX)
    bad_box["links"].append({"a": "gpu0", "b": "gpu9", "kind": "pcie", "bandwidth_GBps": 1.0, "latency_us": 1.0})
    yield sim("topology-unknown-link-end", GOOD, "links[2].b", **{"box.yaml": bad_box})
    dup_box = copy.deepcopy(BOX)
    dup_box["nodes"].append(dict(BOX["nodes"][1]))
    yield sim("topology-duplicate-node", GOOD, "nodes[3].id", **{"box.yaml": dup_box})
    yield sim("topology-both-forms", GOOD, "", **{"box.yaml": {**BOX, "generator": "ring"}})
    for name, value in (("p2p", 1), ("p2p", "yes"), ("p2p", None), ("nvlink_sharp", "yes"), ("nvlink_sharp", 0)):
        yield sim(f"topology-{name}={value!r}", GOOD, name, **{"box.yaml": replaced(BOX, ("nodes", 1, name), value)})
    yield sim("topology-no-gpus", GOOD, "nodes", **{"box.yaml": {
        "name": "b", "nodes": [{"id": "h", "kind": "host"}, {"id": "s", "kind": "switch"}],
        "links": [{"a": "h", "b": "s", "kind": "pcie", "bandwidth_GBps": 1.0, "latency_us": 1.0}]}})
    for name, doc, expect in (
        ("generator-unknown", {"name": "g", "generator": "torus"}, "generator"),
        ("generator-params-list", {"name": "g", "generator": "ring", "params": [1]}, "params"),
        ("generator-unknown-param", {"name": "g", "generator": "ring", "params": {"colour": 1}}, "params.colour"),
        ("generator-dgx1-bricks-overflow", {"name": "g", "generator": "dgx1",
                                            "params": {"nvlink_brick_bandwidth_GBps": 900000.0}}, "params"),
        ("generator-dgx1-node-size", {"name": "g", "generator": "multi_node",
                                      "params": {"intra": "dgx1", "gpus_per_node": 4}}, "gpus_per_node"),
        ("generator-intra-gpus", {"name": "g", "generator": "multi_node",
                                  "params": {"intra_params": {"gpus": 2}}}, "intra_params"),
    ):
        yield Case(f"topology-{name}", ["topology", "show", "{dir}/t.yaml"], {"t.yaml": doc}, expect=expect)


def limit_cases() -> Iterator[Case]:
    """Work beyond a limit, refused before it starts, naming the limit's variable."""
    def sim(name: str, doc: Any, expect: str, env: dict[str, str] | None = None, **files: Any) -> Case:
        return Case(f"limit-{name}", ["simulate", "{dir}/s.yaml", "--out", "{out}"],
                    {"s.yaml": doc, "box.yaml": BOX, **files}, env or {}, expect)

    axes = {"per_gpu_batch": list(range(1, 11)), "steps": list(range(1, 11)), "chunks": list(range(1, 11)),
            "link_bandwidth_scale": [float(i) for i in range(1, 11)], "overlap": [True, False],
            "gradient_dtype": ["fp32", "fp16", "int8"], "cost_model": ["flow", "alpha_beta", "paper"]}
    yield sim("sweep-of-millions", {**GOOD, "sweep": axes}, "GANSIM_MAX_RUNS")
    yield sim("gpus-100-million", {**GOOD, "gpus": [1, 10**8]}, "GANSIM_MAX_RANKS")
    yield sim("steps-billion", {**GOOD, "steps": 10**9}, "GANSIM_MAX_STEPS")
    yield sim("swept-steps-billion", {**GOOD, "sweep": {"steps": [1, 10**9]}}, "GANSIM_MAX_STEPS")
    yield sim("d-steps-billion", replaced(GOOD, ("workload", "d_steps_per_g_step"), 10**9), "GANSIM_MAX_D_STEPS")
    yield sim("segments", replaced(replaced(GOOD, ("run", "images"), 10**12), ("checkpoint", "every_steps"), 1),
              "GANSIM_MAX_SEGMENTS")
    yield sim("elastic-epochs", replaced(GOOD, ("run", "epochs"), 900000.0), "GANSIM_MAX_SEGMENTS")
    yield sim("runs-lowered", GOOD, "GANSIM_MAX_RUNS", {"GANSIM_MAX_RUNS": "1"})
    yield sim("bad-limit-variable", GOOD, "GANSIM_MAX_RUNS", {"GANSIM_MAX_RUNS": "lots"})
    yield sim("elastic-over-rank-limit", replaced(GOOD, ("elastic", "max_gpus"), 10**6), "GANSIM_MAX_RANKS")
    for name, generator, params, env in (
        ("multi-node-10-million", "multi_node", {"nodes": 1250000, "gpus_per_node": 8}, {}),
        ("multi-node-over-ranks", "multi_node", {"nodes": 12501, "gpus_per_node": 8}, {}),  # 100,008 GPUs
        ("ring-10-million", "ring", {"gpus": 10**7}, {}),
        ("fully-connected-links", "fully_connected", {"gpus": 100}, {"GANSIM_MAX_TOPOLOGY_LINKS": "1000"}),
        ("cpu-host-nodes", "cpu_host", {"ranks": 50}, {"GANSIM_MAX_TOPOLOGY_NODES": "20"}),
    ):
        yield Case(f"limit-topology-{name}", ["topology", "show", "{dir}/t.yaml"],
                   {"t.yaml": {"name": "t", "generator": generator, "params": params}}, env, "GANSIM_MAX_")
    yield Case("limit-tasks", ["predict", "--profile", "{profile}", "--world-sizes", "1,64"], {},
               {"GANSIM_MAX_TASKS": "1000"}, "GANSIM_MAX_TASKS")
    yield Case("limit-explicit-topology", ["topology", "show", "{dir}/t.yaml"], {"t.yaml": BOX},
               {"GANSIM_MAX_RANKS": "1"}, "GANSIM_MAX_RANKS")
    yield Case("limit-yaml-nodes", ["simulate", "{dir}/s.yaml"], {"s.yaml": GOOD}, {"GANSIM_MAX_YAML_NODES": "10"},
               "GANSIM_MAX_YAML_NODES")
    yield Case("limit-yaml-depth", ["simulate", "{dir}/s.yaml"], {"s.yaml": GOOD}, {"GANSIM_MAX_YAML_DEPTH": "2"},
               "GANSIM_MAX_YAML_DEPTH")


def flag_cases() -> Iterator[Case]:
    good = ["simulate", "{good}", "--out", "{out}"]
    for value, expect in (("400", "GANSIM_MAX_WORKERS"), ("0", "--workers"), ("-1", "--workers"),
                          ("x", "--workers"), ("1e3", "--workers"), ("2.0", "--workers")):
        yield Case(f"simulate-workers={value}", good + ["--workers", value], expect=expect)
    for spec in ("dask://", "dask://host", "dask://host:", "dask://host:0", "dask://host:65536", "dask://host:-1",
                 "dask://ho st:1", "dask://127.0.0.1:notaport", "dask://[::1", "dask:/127.0.0.1:1", "mpi", "",
                 "dask://127.0.0.1:1", "dask://no-such-host.invalid:8786"):
        yield Case(f"simulate-executor={spec!r}", good + ["--executor", spec], expect="--executor")
    yield Case("simulate-traces-unknown", good + ["--traces", "some"], expect="--traces")
    yield Case("simulate-unknown-flag", good + ["--fast"], expect="--fast")
    yield Case("simulate-no-scenario", ["simulate"], expect="SCENARIO")
    yield Case("unknown-command", ["frobnicate"], expect="frobnicate")
    for value in ("1,,2", "", ",", "0", "-1", "1e3", "abc", "1.5", "100000000", "2,2", " ", "1;2", "٣"):
        yield Case(f"predict-world-sizes={value!r}", ["predict", "--profile", "{profile}", "--world-sizes", value],
                   expect="--world-sizes")
    yield Case("predict-topology-missing", ["predict", "--profile", "{profile}", "--topology", "{dir}/no.yaml"],
               expect="no.yaml")
    yield Case("predict-topology-too-small", ["predict", "--profile", "{profile}", "--topology", "{box}",
                                              "--world-sizes", "1,4"], expect="--world-sizes")
    plan = ["plan", "seed000-dcgan-clouds"]
    for value in ("nan", "inf", "1e308", "-1", "0", "abc", ""):
        yield Case(f"plan-deadline-hours={value!r}", plan + ["--deadline-hours", value], expect="--deadline-hours")
    for value in ("yesterday", "2000-01-01T00:00", "2030-13-45"):
        yield Case(f"plan-deadline={value!r}", plan + ["--deadline", value], expect="--deadline")
    for value in ("1,,2", "0", "100000000", "x"):
        yield Case(f"plan-gpus={value!r}", plan + ["--gpus", value], expect="--gpus")
    for flag, value in (("--platforms", "mainframe"), ("--platforms", ","), ("--pricing", "free")):
        yield Case(f"plan{flag}={value!r}", plan + [flag, value], expect=flag)
    yield Case("plan-needs-run", ["plan", "paper-table3", "--platforms", "aws-p3.2xlarge"], expect="run")
    calibrate = ["calibrate", "--out", "{dir}/p.json"]
    for flag, value in (("--seed", "-1"), ("--seed", "1e3"), ("--seed", str(2**64)), ("--d-steps", "1000000000"),
                        ("--timeout-s", "1e308"), ("--timeout-s", "inf"), ("--timeout-s", "nan"),
                        ("--timeout-s", "-1"), ("--world-sizes", "1,,2"), ("--world-sizes", "1,100000000"),
                        ("--batch-size", "10000000000"), ("--steps", "0"), ("--steps", "yes"),
                        ("--sizes", "4K:1e9"), ("--sizes", "8G:16G"), ("--repeats", "1.5"), ("--threads", "-3")):
        yield Case(f"calibrate{flag}={value}", calibrate + [flag, value], expect=flag)


def output_cases() -> Iterator[Case]:
    """--out that cannot take the results: found before any simulating."""
    published = ["validate", "--published", "a40-nvlink-pair"]
    for name, argv in (("simulate", ["simulate", "{good}"]), ("validate", ["validate", "--profile", "{profile}"]),
                       ("plan", ["plan", "seed000-dcgan-clouds"]), ("topology", ["topology", "show", "{box}"]),
                       ("validate-published", published)):
        yield Case(f"out-is-a-file-{name}", argv + ["--out", "{dir}/file"], {"file": b"x"}, expect="--out")
        yield Case(f"out-below-a-file-{name}", argv + ["--out", "{dir}/file/sub"], {"file": b"x"},
                   expect="not a directory")
    for name, argv in (("simulate", ["simulate", "{good}"]), ("validate", ["validate", "--profile", "{profile}"]),
                       ("validate-published", published)):
        yield Case(f"out-is-cwd-{name}", argv + ["--out", "."], cwd=True, expect="current folder")
        yield Case(f"out-is-above-cwd-{name}", argv + ["--out", ".."], cwd=True, expect="current folder")
        yield Case(f"out-is-root-{name}", argv + ["--out", "/"], expect="--out")
        yield Case(f"out-holds-other-folders-{name}", argv + ["--out", "{dir}"], {"mine/notes.txt": b"x"},
                   expect="folders gansim did not write")


# Numbers no flag may take (as typed on a command line)
HOSTILE_FLAG_NUMBERS = ("nan", "inf", "-inf", "-1", "0", "1e308", "true", "", "x")


def nccl_tests_cases() -> Iterator[Case]:
    """`gansim nccl-tests`: its flags, and a topology with the node fields NCCL's model reads."""
    base = ["nccl-tests", "{box}"]
    for value in ("0", "-1", "x", "1.5", "nan", "3", "100000000000"):
        yield Case(f"nccl-tests-g={value!r}", base + ["-g", value], expect="-g")
    for flag in ("-b", "-e"):
        for value in ("nan", "inf", "-1", "0", "9" * 400, "1e3", "2P", "", "1.5T"):
            yield Case(f"nccl-tests{flag}={value[:12]!r}", base + ["-g", "2", flag, value], expect=flag)
    for value in (*HOSTILE_FLAG_NUMBERS, "1", "0.5"):
        yield Case(f"nccl-tests-f={value!r}", base + ["-g", "2", "-f", value], expect="-f")
    yield Case("nccl-tests-e-below-b", base + ["-g", "2", "-b", "1M", "-e", "1K"], expect="-e")
    for flag, value in (("--op", "all_to_all"), ("--algorithm", "butterfly"), ("--nccl-algo", "collnet"),
                        ("--nccl-proto", "LL256")):
        yield Case(f"nccl-tests{flag}={value}", base + ["-g", "2", flag, value], expect=flag)
    yield Case("nccl-tests-textbook-all-gather", base + ["-g", "2", "--algorithm", "ring", "--op", "all_gather"],
               expect="--op")
    yield Case("nccl-tests-explain-textbook", base + ["-g", "2", "--algorithm", "ring", "--explain"],
               expect="--explain")
    yield Case("nccl-tests-no-g", base, expect="-g")
    for field, value in (("compute_capability", float("nan")), ("compute_capability", 0.5),
                         ("memory_bandwidth_GBps", float("inf")), ("p2p", "no")):
        yield Case(f"nccl-tests-node-{field}={value!r}", ["nccl-tests", "{dir}/t.yaml", "-g", "2"],
                   {"t.yaml": replaced(BOX, ("nodes", 1, field), value)}, expect=field)
    yield Case("nccl-tests-host-dram=-1", ["nccl-tests", "{dir}/t.yaml", "-g", "2"],
               {"t.yaml": replaced(BOX, ("nodes", 0, "dram_bandwidth_GBps"), -1.0)}, expect="dram_bandwidth_GBps")


def published_cases() -> Iterator[Case]:
    """`gansim validate --published NAME` names one of the shipped tables; the tables
    themselves are tested below (test_hostile_published_table)."""
    for name in ("no-such-system", "../scenarios/paper-table3", ""):
        if name:
            yield Case(f"validate-published={name!r}", ["validate", "--published", name, "--out", "{dir}/o"],
                       expect="--published")
    yield Case("validate-published-and-profile", ["validate", "--published", "--profile", "{profile}"],
               expect="--profile")


def trace_files() -> Iterator[tuple[str, Any, str, dict[str, str]]]:
    """(name, the trace: a mapping or bytes, a piece of the message, environment)."""
    rng = random.Random(14)
    text = json.dumps(TRACE).encode()
    yield "not-json", b"{not json", "not a JSON Chrome trace", {}
    yield "empty", b"", "not a JSON Chrome trace", {}
    yield "binary", bytes(rng.randrange(256) for _ in range(2048)), "", {}
    yield "utf16", json.dumps(TRACE).encode("utf-16"), "not a JSON Chrome trace", {}
    yield "nan-constant", text.replace(b'"dur": 900.0', b'"dur": NaN', 1), "NaN", {}
    yield "deep", b"[" * 100_000 + b"]" * 100_000, "not a JSON Chrome trace", {}
    yield "huge", text, "GANSIM_MAX_TRACE_BYTES", {"GANSIM_MAX_TRACE_BYTES": "1000"}
    yield "top-level-list", [TRACE], "traceEvents", {}
    yield "no-events", without(TRACE, "traceEvents"), "traceEvents", {}
    yield "events-not-a-list", {**TRACE, "traceEvents": {"a": 1}}, "traceEvents", {}
    yield "no-kineto-keys", {"traceEvents": TRACE["traceEvents"]}, "Kineto", {}
    steps_gone = [e for e in TRACE["traceEvents"] if not str(e.get("name")).startswith("ProfilerStep")]
    yield "no-steps", {**TRACE, "traceEvents": steps_gone}, "ProfilerStep", {}
    yield ("steps-not-complete", replaced(replaced(TRACE, ("traceEvents", 1, "ph"), "i"), ("traceEvents", 9, "ph"), "i"),
           "ProfilerStep", {})
    yield "no-phases", {**TRACE, "traceEvents": [e for e in TRACE["traceEvents"] if e.get("cat") != "user_annotation"
                                                 or e["name"].startswith("ProfilerStep")]}, "optimizer", {}
    for field, value in (("name", 5), ("ts", "1000"), ("ts", True), ("dur", -1.0), ("dur", 1e308), ("args", [1])):
        yield f"event-{field}={value!r}", replaced(TRACE, ("traceEvents", 2, field), value), "traceEvents[2]", {}
    for field, value in (("world_size", "2"), ("world_size", 0), ("world_size", 10**9), ("rank", 5), ("rank", True)):
        yield (f"distributed-{field}={value!r}", replaced(TRACE, ("distributedInfo", field), value),
               f"distributedInfo.{field}", {})
    yield "distributed-not-a-mapping", {**TRACE, "distributedInfo": [1]}, "distributedInfo", {}
    yield "flops-beyond-any-phase", replaced(TRACE, ("traceEvents", 8, "args", "flops"), 1e30), "flops", {}
    yield "dims-garbage", replaced(TRACE, ("traceEvents", 8, "args", "Input Dims"), [["x", 1e300], {}]), "", {}


def trace_cases() -> Iterator[Case]:
    """`gansim calibrate --from-trace`: traces that are not one, too large, or lacking what is read."""
    calibrate = ["calibrate", "--profiler-overhead-us", "0", "--out", "{dir}/p.json", "--from-trace"]
    for name, doc, expect, env in trace_files():
        if name == "dims-garbage":  # shapes it cannot read are unknown, not an error: the trace imports
            continue
        yield Case(f"trace-{name}", calibrate + ["{dir}/t.json"], {"t.json": doc}, env, expect)
    yield Case("trace-gzip-bomb", calibrate + ["{dir}/t.json.gz"],
               {"t.json.gz": gzip.compress(b" " * 4_000_000)}, {"GANSIM_MAX_TRACE_BYTES": "100000"},
               "GANSIM_MAX_TRACE_BYTES")
    yield Case("trace-gz-not-gzip", calibrate + ["{dir}/t.json.gz"], {"t.json.gz": json.dumps(TRACE).encode()},
               expect="cannot read the trace")
    yield Case("trace-missing", calibrate + ["{dir}/none.json"], expect="none.json")
    yield Case("trace-two-of-rank-0", calibrate + ["{dir}/a.json", "{dir}/b.json"],
               {"a.json": TRACE, "b.json": TRACE}, expect="distributedInfo.rank")
    # traces of two world sizes are two runs, fitted together; a phase map must name the traces' labels
    yield Case("trace-phase-map-unknown-label", calibrate + ["{dir}/t.json", "--phase-map", "critic_step=d"],
               {"t.json": TRACE}, expect="--phase-map")
    yield Case("trace-phase-map-not-a-network", calibrate + ["{dir}/t.json", "--phase-map", "critic_step=q"],
               {"t.json": TRACE}, expect="--phase-map")
    for value in ("nan", "inf", "-1", "1e308", "x"):
        yield Case(f"trace-overhead={value}", ["calibrate", "--from-trace", "{dir}/t.json", "--out", "{dir}/p.json",
                                               "--profiler-overhead-us", value], {"t.json": TRACE},
                   expect="--profiler-overhead-us")
    yield Case("trace-and-script", calibrate + ["{dir}/t.json", "--script", "{dir}/t.py"],
               {"t.json": TRACE, "t.py": b"pass\n"}, expect="--from-trace")


def calibrate_source_cases() -> Iterator[Case]:
    """`calibrate --script` and the device figures a profile keeps for the roofline."""
    script = ["calibrate", "--out", "{dir}/p.json", "--script"]
    yield Case("script-missing", script + ["{dir}/none.py"], expect="--script")
    yield Case("script-directory", script + ["{dir}"], expect="--script")
    yield Case("script-not-python", script + ["{dir}/train.sh"], {"train.sh": b"echo\n"}, expect="--script")
    yield Case("script-args-without-script", ["calibrate", "--out", "{dir}/p.json", "--", "--lr", "1"],
               expect="calibrate")
    for flag in ("--device-tflops", "--device-memory-bandwidth-GBps"):
        for value in HOSTILE_FLAG_NUMBERS:
            yield Case(f"calibrate{flag}={value!r}", script + ["{dir}/t.py", flag, value], {"t.py": b"pass\n"},
                       expect=flag)
            yield Case(f"trace{flag}={value!r}", ["calibrate", "--from-trace", "{dir}/t.json", "--out",
                                                  "{dir}/p.json", "--profiler-overhead-us", "0", flag, value],
                       {"t.json": TRACE}, expect=flag)


def predict_device_cases() -> Iterator[Case]:
    """`predict --topology` to another device: the measured device's figures, and what the
    roofline needs."""
    base = ["predict", "--profile", "{profile}", "--topology", "{box}", "--world-sizes", "1,2"]
    for flag in ("--measured-tflops", "--measured-memory-bandwidth-GBps"):
        for value in HOSTILE_FLAG_NUMBERS:
            yield Case(f"predict{flag}={value!r}", base + [flag, value], expect=flag)
    no_figures = without(without(PROFILE, "provenance", "device_tflops"), "provenance", "device_memory_bandwidth_GBps")
    yield Case("predict-device-without-figures", ["predict", "--profile", "{dir}/p.json", "--topology", "{box}",
                                                  "--world-sizes", "1,2"], {"p.json": no_figures},
               expect="--measured-tflops")
    yield Case("predict-phase-without-costs", base, expect="phase_costs.d_backward_s")
    yield Case("predict-target-without-figures", ["predict", "--profile", "{profile}", "--topology", "{dir}/t.yaml",
                                                  "--world-sizes", "1,2"],
               {"t.yaml": without(BOX, "nodes", 1, "memory_bandwidth_GBps")}, expect="memory_bandwidth_GBps")


def scenario_profile_cases() -> Iterator[Case]:
    """A scenario's `profile:` (the calibration profile's compute in place of its workload)
    and the profiled workload it becomes, which a scenario may also give inline."""
    def sim(name: str, doc: Any, expect: str, **files: Any) -> Case:
        return Case(f"scenario-profile-{name}", ["simulate", "{dir}/s.yaml", "--out", "{out}"],
                    {"s.yaml": doc, "box.yaml": BOX, **files}, expect=expect)

    costed = replaced(PROFILE, ("measured", "phase_costs"), {p: {"flops": 1e8, "bytes": 1e6} for p in PHASE_NAMES[1:]})
    with_profile = {**GOOD, "profile": "p.json"}
    yield sim("missing", with_profile, "profile")
    yield sim("not-json", with_profile, "not valid JSON", **{"p.json": b"{not json"})
    yield sim("nan", with_profile, "NaN", **{"p.json": json.dumps(PROFILE).replace(
        '"alpha_s": 0.0002', '"alpha_s": NaN').encode()})
    yield sim("phase-without-costs", with_profile, "phase_costs", **{"p.json": PROFILE})
    fastest = replaced(replaced(costed, ("provenance", "device_tflops"), 1e6),
                       ("provenance", "device_memory_bandwidth_GBps"), 1e6)
    slowest = replaced(replaced(BOX, ("nodes", 1, "tflops"), 1e-6), ("nodes", 1, "memory_bandwidth_GBps"), 1e-6)
    yield sim("phase-beyond-any-duration", with_profile, "out of range", **{"p.json": fastest, "box.yaml": slowest})
    yield sim("calibrated-swept-with-box", {**with_profile, "topology": "calibrated",
                                           "sweep": {"topology": ["calibrated", "box.yaml"]}}, "sweep", **{"p.json": costed})
    inline = {"name": "mine", "from_profile": "p.json", "d_steps_per_g_step": 1,
              "phases": {"batch": 32.0, "data_host_s": 0.001, "sample_bytes": 3136.0, **{p: 0.01 for p in PHASE_NAMES[1:]}},
              "d_param_tensors": [1000], "g_param_tensors": [2000], "d_buffer_bytes": 0, "g_buffer_bytes": 64,
              "core_sharing": {2: 1.1}}
    for path, _ in leaves(inline):
        for label, value in (("nan", float("nan")), ("1e308", 1e308), ("true", True)):
            yield sim(f"inline-{'.'.join(map(str, path))}={label}", {**GOOD, "workload": replaced(inline, path, value)},
                      field_name(path))
    yield sim("inline-sharing-below-1", {**GOOD, "workload": replaced(inline, ("core_sharing", 2), 0.5)}, "core_sharing")


def all_cases() -> list[Case]:
    cases = [*scenario_number_cases(), *topology_number_cases(), *generator_number_cases(),
             *profile_number_cases(), *profile_model_cases(), *file_cases(), *structure_cases(), *limit_cases(),
             *flag_cases(), *output_cases(), *nccl_tests_cases(), *published_cases(), *trace_cases(),
             *calibrate_source_cases(), *predict_device_cases(), *scenario_profile_cases()]
    names = [c.name for c in cases]
    assert len(names) == len(set(names)), "case names must be unique"
    return cases


CASES = all_cases()


# ----------------------------------------------------------------------------- running them
def snapshot(folder: Path) -> dict[str, tuple[int, int, int]]:
    """Every entry's inode, size and modification time, and the folder's own inode: a
    replaced or rewritten file, or a swapped folder, changes it."""
    entries = {".": (folder.stat().st_ino, 0, 0)}
    for path in sorted(folder.rglob("*")):
        st = path.stat()
        entries[str(path.relative_to(folder))] = (st.st_ino, st.st_size, st.st_mtime_ns)
    return entries


@dataclass
class Arena:
    root: Path
    out: Path
    before: dict[str, tuple[int, int, int]]

    def format(self, text: str, case_dir: Path) -> str:
        return text.format(dir=case_dir, out=self.out, box=self.root / "box.yaml", good=self.root / "good.yaml",
                           profile=self.root / "profile.json")


@pytest.fixture(scope="module")
def arena(tmp_path_factory) -> Arena:
    """The good files and an earlier good output, simulated once; every case must leave it."""
    root = tmp_path_factory.mktemp("arena")
    write_files(root, {"box.yaml": BOX, "good.yaml": GOOD, "profile.json": PROFILE})
    out = root / "out"
    assert main(["simulate", str(root / "good.yaml"), "--out", str(out)]) == 0
    assert main(["validate", "--profile", str(root / "profile.json"), "--out", str(out)]) == 0
    return Arena(root, out, snapshot(out))


def run_cli(argv: list[str]) -> int:
    try:
        return main(argv)
    except SystemExit as exc:  # argparse's usage errors (OneLineParser) exit through SystemExit
        return int(exc.code or 0)


def assert_one_line_exit_2(code: int, err: str) -> str:
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith("gansim: error: ")
    return lines[0]


def test_there_are_enough_generated_cases():
    assert len(CASES) >= 150


def test_every_limit_is_stated_in_the_docs():
    page = (Path(__file__).resolve().parents[1] / "docs" / "limits.md").read_text()
    for limit in limits.ALL:
        assert f"| `{limit.variable}` | " in page, limit.variable


def test_the_good_scenario_and_profile_pass(arena):
    assert (arena.out / "summary.json").is_file() and (arena.out / "validation.json").is_file()


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_hostile_input(case, arena, tmp_path, capsys, monkeypatch):
    write_files(tmp_path, case.files)
    for name, value in case.env.items():
        monkeypatch.setenv(name, value)
    if case.cwd:
        monkeypatch.chdir(tmp_path)
    argv = [arena.format(arg, tmp_path) for arg in case.argv]
    capsys.readouterr()
    code = run_cli(argv)
    line = assert_one_line_exit_2(code, capsys.readouterr().err)
    assert case.expect in line
    assert snapshot(arena.out) == arena.before


# ----------------------------------------------------------------------------- executors
def listening(handle: Callable[[socket.socket], None]) -> int:
    """A local server that is not a Dask scheduler; returns its port."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)

    def serve() -> None:
        while True:
            conn, _ = server.accept()
            threading.Thread(target=handle, args=(conn,), daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    return server.getsockname()[1]


def silent(conn: socket.socket) -> None:
    threading.Event().wait()  # accepts, never answers: distributed.Client would wait for its handshake forever


def http(conn: socket.socket) -> None:
    conn.recv(1024)
    conn.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
    conn.close()


@pytest.mark.parametrize("server", [silent, http])
def test_a_server_that_is_not_dask_is_refused_in_one_line(server, arena, capsys):
    port = listening(server)
    code = run_cli(["simulate", str(arena.root / "good.yaml"), "--out", str(arena.out),
                    "--executor", f"dask://127.0.0.1:{port}"])
    line = assert_one_line_exit_2(code, capsys.readouterr().err)
    assert "not a Dask scheduler" in line
    assert snapshot(arena.out) == arena.before


def test_a_refused_dask_address_is_one_line(arena, capsys):
    with socket.socket() as probe:  # a port that was free a moment ago: nothing listens once closed
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    code = run_cli(["simulate", str(arena.root / "good.yaml"), "--executor", f"dask://127.0.0.1:{port}"])
    line = assert_one_line_exit_2(code, capsys.readouterr().err)
    assert "refused" in line


# ----------------------------------------------------------------------------- catalog files
def catalog_cases() -> Iterator[tuple[str, dict]]:
    platform = {"name": "p", "gpus": 8, "gpu_power_W": 300.0, "host_power_W": 500.0, "vcpus": 64,
                "on_demand_usd_per_hour": 24.0, "spot_usd_per_hour": 7.0,
                "interconnect": {"generator": "nvswitch", "params": {"gpus": 8}}}
    storage = {"name": "s", "bandwidth_MBps": 125.0, "iops": 3000.0, "latency_ms": 1.0, "queue_depth": 1}
    doc = {"provider": "x", "platforms": [platform], "storage": [storage]}
    for path, _ in leaves(doc):
        if "interconnect" in path:
            continue  # the generator's parameters, checked when the platform's machine is built
        for label, value in (("nan", float("nan")), ("1e308", 1e308), ("true", True), ("string", "1")):
            yield f"{'.'.join(map(str, path))}={label}", replaced(doc, path, value)
    yield "duplicate-platform", {**doc, "platforms": [platform, platform]}
    yield "unknown-field", {**doc, "colour": 1}


@pytest.mark.parametrize("name,doc", list(catalog_cases()), ids=[n for n, _ in catalog_cases()])
def test_hostile_platform_catalog(name, doc, tmp_path):
    write_files(tmp_path, {"cloud.yaml": doc})
    with pytest.raises(UserInputError) as err:
        load_catalog_from(tmp_path)
    assert "\n" not in str(err.value) and str(err.value).startswith(str(tmp_path / "cloud.yaml"))


# ----------------------------------------------------------------------------- published tables
PUBLISHED = {
    "name": "pair", "kind": "NVLink pair", "system": "Two GPUs joined by one NVLink bridge", "nccl_version": "2.16.2",
    "source": {"url": "https://example.org/table", "where": "table 1", "read": "2026-11-23"},
    "topology": {"name": "pair", "nodes": [{"id": f"gpu{i}", "kind": "gpu", "model": "NVIDIA A40", "tflops": 37.4,
                                            "memory_GB": 48.0} for i in range(2)],
                 "links": [{"a": "gpu0", "b": "gpu1", "kind": "nvlink", "bandwidth_GBps": 56.25, "latency_us": 0.5}]},
    "gpus": 2,
    "measurements": [{"op": "all_reduce", "points": [[1048576, 50.0, 20.97, 20.97]]}],
}


def published_table_cases() -> Iterator[tuple[str, Any]]:
    for path, _ in leaves(PUBLISHED, every=True):
        for label, value in (("nan", float("nan")), ("1e308", 1e308), ("true", True), ("string", "1")):
            yield f"{'.'.join(map(str, path))}={label}", replaced(PUBLISHED, path, value)
    point = PUBLISHED["measurements"][0]["points"][0]
    for name, path, value in (
        ("row-of-three", ("measurements", 0, "points", 0), point[:3]),
        ("row-of-five", ("measurements", 0, "points", 0), [*point, 1.0]),
        ("no-points", ("measurements", 0, "points"), []),
        ("zero-busbw", ("measurements", 0, "points", 0, 3), 0.0),
        ("unknown-op", ("measurements", 0, "op"), "all_to_all"),
        ("one-gpu", ("gpus",), 1),
        ("more-gpus-than-topology", ("gpus",), 3),
        ("name-not-the-file", ("name",), "other"),
        ("topology-not-a-mapping", ("topology",), [1]),
        ("topology-bad-link-end", ("topology", "links", 0, "b"), "gpu9"),
    ):
        yield name, replaced(PUBLISHED, path, value)
    yield "no-source", without(PUBLISHED, "source")
    yield "unknown-field", {**PUBLISHED, "colour": 1}


def test_the_published_table_the_cases_start_from_is_good(tmp_path):
    write_files(tmp_path, {"pair.yaml": PUBLISHED})
    (table,) = load_published(directory=tmp_path)
    (row,) = compare(table)
    assert row.predicted_busbw_GBps > 0


@pytest.mark.parametrize("name,doc", list(published_table_cases()), ids=[n for n, _ in published_table_cases()])
def test_hostile_published_table(name, doc, tmp_path):
    """validation/*.yaml: each table is read, its topology built and its points predicted
    (what `validate --published` does) or refused with one line naming the file."""
    write_files(tmp_path, {"pair.yaml": doc})
    with pytest.raises(UserInputError) as err:
        for table in load_published(directory=tmp_path):
            compare(table)
    assert "\n" not in str(err.value) and str(err.value).startswith(str(tmp_path / "pair.yaml"))


def test_a_trace_with_shapes_it_cannot_read_imports_without_them(tmp_path, capsys):
    """Input Dims that are not whole numbers count as unknown (no FLOPs, no bytes), as a
    trace recorded without record_shapes would."""
    (name, doc, _, _), = [case for case in trace_files() if case[0] == "dims-garbage"]
    write_files(tmp_path, {"t.json": doc})
    assert run_cli(["calibrate", "--from-trace", str(tmp_path / "t.json"), "--profiler-overhead-us", "0",
                    "--out", str(tmp_path / "p.json")]) == 0, capsys.readouterr().err
    assert run_cli(["predict", "--profile", str(tmp_path / "p.json"), "--world-sizes", "1,2"]) == 0


# ----------------------------------------------------------------------------- output folders
def test_a_scenario_name_never_puts_results_outside_their_folder(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    write_files(tmp_path, {"box.yaml": BOX})
    for name, folder in (("../../x", "x"), (str(tmp_path / "abs"), f"{str(tmp_path).strip('/').replace('/', '-')}-abs"),
                         ("..", "scenario"), ("a/b", "a-b"), (".hidden", "hidden")):
        write_files(tmp_path, {"s.yaml": {**GOOD, "name": name, "run": None, "checkpoint": None, "failures": None,
                                          "preemption": None, "elastic": None, "steps": 1}})
        assert run_cli(["simulate", "s.yaml"]) == 0, capsys.readouterr().err
        assert (tmp_path / "gansim-out" / folder / "summary.json").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["box.yaml", "gansim-out", "s.yaml"]
    assert not (tmp_path / "abs").exists()


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0, reason="root may write anywhere")
def test_a_read_only_out_is_found_before_simulating(arena, tmp_path, capsys):
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    code = run_cli(["simulate", str(arena.root / "good.yaml"), "--out", str(locked / "out")])
    line = assert_one_line_exit_2(code, capsys.readouterr().err)
    assert "not writable" in line


@pytest.fixture
def earlier(tmp_path) -> tuple[Path, Path, dict[str, bytes]]:
    """A scenario, an earlier output of it, and the bytes of every file in that output."""
    write_files(tmp_path, {"box.yaml": BOX, "good.yaml": GOOD, "notes.txt": b"mine"})
    out = tmp_path / "out"
    assert main(["simulate", str(tmp_path / "good.yaml"), "--out", str(out)]) == 0
    (out / "notes.txt").write_text("the user's own file")
    return tmp_path / "good.yaml", out, contents(out)


def contents(folder: Path) -> dict[str, bytes]:
    """The results in `folder`, without the points an unfinished run kept there to resume
    from (tests/test_resume.py checks those)."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file() and p.relative_to(folder).parts[0] != SIMULATE_PARTIAL}


def no_leftovers(out: Path) -> bool:
    return [p.name for p in out.parent.iterdir() if p.name.startswith(f".{out.name}.")] == []


def failing_after(calls: int, error: BaseException) -> Callable[..., None]:
    """An atomic_write that writes `calls` files, then fails as a full disk or Ctrl-C would."""
    from gansim.core.files import atomic_write
    count = {"n": 0}

    def write(path: Any, text: str) -> None:
        count["n"] += 1
        if count["n"] > calls:
            raise error
        atomic_write(path, text)

    return write


@pytest.mark.parametrize("calls", [0, 2, 4])
def test_a_full_disk_leaves_the_earlier_results_as_they_were(earlier, calls, monkeypatch, capsys):
    scenario, out, before = earlier
    monkeypatch.setattr("gansim.outputs.results.atomic_write",
                        failing_after(calls, OSError(28, "No space left on device")))
    capsys.readouterr()
    code = run_cli(["simulate", str(scenario), "--out", str(out), "--traces", "all"])
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("gansim: error: ")]
    assert code == 1 and "Traceback" not in err and len(errors) == 1 and err.strip().splitlines()[-1] == errors[0]
    assert "No space left on device" in errors[0] and "unchanged" in errors[0]
    assert contents(out) == before and no_leftovers(out)


@pytest.mark.parametrize("calls", [0, 3])
def test_ctrl_c_while_writing_leaves_the_earlier_results_as_they_were(earlier, calls, monkeypatch, capsys):
    scenario, out, before = earlier
    monkeypatch.setattr("gansim.outputs.results.atomic_write", failing_after(calls, KeyboardInterrupt()))
    code = run_cli(["simulate", str(scenario), "--out", str(out)])
    assert code == 130 and contents(out) == before and no_leftovers(out)
    assert list((out / SIMULATE_PARTIAL).iterdir())  # the simulated points, for the run that resumes


def test_a_new_run_replaces_its_results_and_keeps_the_users_files(earlier, capsys):
    scenario, out, before = earlier
    write_files(scenario.parent, {"good.yaml": {**GOOD, "sweep": {"steps": [1, 2]}}})
    assert run_cli(["simulate", str(scenario), "--out", str(out)]) == 0
    after = contents(out)
    assert after["notes.txt"] == before["notes.txt"] and after["summary.json"] != before["summary.json"]
    old_traces = {k for k in before if k.startswith("traces/")}
    assert old_traces and not old_traces & set(after) and no_leftovers(out)  # the sweep's traces only


def test_without_an_atomic_exchange_two_renames_replace_the_folder(earlier, monkeypatch, capsys):
    scenario, out, before = earlier  # file systems without renameat2's RENAME_EXCHANGE
    monkeypatch.setattr("gansim.core.files._exchange", lambda a, b: False)
    write_files(scenario.parent, {"good.yaml": {**GOOD, "steps": 3}})
    assert run_cli(["simulate", str(scenario), "--out", str(out)]) == 0
    after = contents(out)
    assert after["notes.txt"] == before["notes.txt"] and after["summary.json"] != before["summary.json"]
    assert no_leftovers(out)


def test_a_failed_run_keeps_its_earlier_traces_unmixed(earlier, monkeypatch, capsys):
    scenario, out, before = earlier
    write_files(scenario.parent, {"good.yaml": {**GOOD, "sweep": {"steps": [1, 2]}}})
    monkeypatch.setattr("gansim.outputs.results.atomic_write", failing_after(3, KeyboardInterrupt()))
    assert run_cli(["simulate", str(scenario), "--out", str(out), "--traces", "all"]) == 130
    assert sorted(p.name for p in (out / "traces").iterdir()) == sorted(
        Path(k).name for k in before if k.startswith("traces/"))


# ----------------------------------------------------------------------------- hangs and signals
def gansim(args: list[str], cwd: Path, **kwargs: Any) -> subprocess.Popen:
    def limit_memory() -> None:  # runaway memory ends the process instead of the machine
        import resource
        resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))

    return subprocess.Popen([sys.executable, "-m", "gansim", *args], cwd=cwd, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, preexec_fn=limit_memory, **kwargs)


@pytest.mark.parametrize("name", ["alias-bomb", "deep-flow"])
def test_a_yaml_bomb_is_refused_without_hanging_or_eating_memory(name, tmp_path):
    data = dict((n, d) for n, d, _ in broken_files())[name]
    write_files(tmp_path, {"s.yaml": data})
    proc = gansim(["simulate", "s.yaml"], tmp_path)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_faults_that_never_let_a_segment_finish_end_the_run_unfinished(tmp_path):
    """Failures so frequent (a million GPUs' worth) that every segment and restart is cut
    short: the whole-run model gives up after a bounded number of faults."""
    scenario = {**GOOD, "failures": {"mtbf_hours_per_gpu": 0.001, "restart_s": 1000.0}, "elastic": None,
                "preemption": {"rate_per_hour": 1000.0, "restart_s": 1000.0}, "run": {"images": 10000, "epochs": 20.0}}
    write_files(tmp_path, {"box.yaml": BOX, "s.yaml": scenario})
    proc = gansim(["simulate", "s.yaml", "--json", "--out", "o"], tmp_path)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    runs = json.loads(out)["runs"]
    assert all(run["finished"] is False for run in runs)


# Runs gansim with every run point held until the command has taken its SIGINT: the signal
# is sent when a point reports that it started, and no point can finish before the command
# has seen the signal, however fast the machine (a process pool's forked workers inherit
# the held function).
HELD_POINTS = """
import signal, sys, time
from pathlib import Path
import gansim.runner.sweep as sweep
from gansim.cli.main import main

released = Path("released")
real = sweep.run_one_detailed

def held(request):
    print("test: a point started", file=sys.stderr, flush=True)
    while not released.exists():
        time.sleep(0.01)
    return real(request)

def interrupted(signum, frame):
    released.touch()
    raise KeyboardInterrupt

sweep.run_one_detailed = held
signal.signal(signal.SIGINT, interrupted)
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.parametrize("workers", ["1", "2"])
def test_ctrl_c_while_simulating_is_one_line_and_keeps_the_earlier_results(workers, tmp_path):
    write_files(tmp_path, {"box.yaml": BOX, "s.yaml": {**GOOD, "steps": 1}})
    assert main(["simulate", str(tmp_path / "s.yaml"), "--out", str(tmp_path / "o")]) == 0
    before = contents(tmp_path / "o")
    write_files(tmp_path, {"s.yaml": {**GOOD, "steps": 1, "sweep": {"per_gpu_batch": [1, 2, 3, 4]}},
                           "held.py": HELD_POINTS.encode()})
    proc = subprocess.Popen([sys.executable, "held.py", "simulate", "s.yaml", "--out", "o", "--workers", workers],
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    while "test: a point started" not in proc.stderr.readline():
        assert proc.poll() is None
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130 and "Traceback" not in err and err.strip().splitlines()[-1] == "gansim: interrupted"
    assert contents(tmp_path / "o") == before and no_leftovers(tmp_path / "o")
