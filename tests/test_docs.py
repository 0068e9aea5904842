"""The documentation holds: the site builds strictly (and a broken link breaks it), every
command of README.md's tour runs on shipped inputs, the formats page names every field a run
writes and every field a scenario, topology or profile accepts, and every generated table
and figure is what `python -m gansim.docs` writes now."""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterator

import pydantic
import pytest

from gansim import docs
from gansim.cli.main import main
from tests.hostile import PROFILE

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
FORMATS = ROOT / "docs" / "formats.md"
# the line CI runs, verbatim: the README's set-up block must keep it as its second line
CI_LINE = ("python3 -m venv .venv && . .venv/bin/activate && pip install torch==2.13.0 "
           "'.[calibrate,test]' && python -m pytest -q")


def build_site(config_dir: Path, site_dir: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site_dir)],
                          cwd=config_dir, env=env, capture_output=True, text=True)


def test_the_docs_build_strictly(tmp_path):
    done = build_site(ROOT, tmp_path / "site")
    assert done.returncode == 0, done.stderr
    api = (tmp_path / "site" / "api" / "index.html").read_text()
    assert 'id="gansim.api.simulate"' in api and 'id="gansim.api.SimulationResult"' in api  # docstrings rendered
    assert (tmp_path / "site" / "formats" / "index.html").is_file()


def test_a_broken_link_fails_the_build(tmp_path):
    copy = tmp_path / "checkout"
    shutil.copytree(ROOT / "docs", copy / "docs")
    shutil.copy(ROOT / "mkdocs.yml", copy / "mkdocs.yml")
    (copy / "gansim").symlink_to(ROOT / "gansim")  # for the API page's mkdocstrings
    page = copy / "docs" / "guide" / "plan.md"
    page.write_text(page.read_text() + "\nSee [nowhere](../no-such-page.md).\n")
    done = build_site(copy, tmp_path / "site")
    assert done.returncode != 0 and "no-such-page.md" in done.stderr, done.stderr


# --- README.md


def test_readme_is_short_and_keeps_the_set_up_lines_first():
    text = README.read_text()
    assert len(text.splitlines()) <= 200
    first_block = re.search(r"```bash\n(.*?)```", text, re.S).group(1).splitlines()
    assert first_block[0] == ("python3 -m venv .venv && . .venv/bin/activate && pip install . "
                              "&& gansim simulate paper-table3")
    assert first_block[1] == CI_LINE


def tour_commands() -> list[str]:
    match = re.search(r"<!-- tour:start -->\n```bash\n(.*?)```\n<!-- tour:end -->", README.read_text(), re.S)
    assert match, "README.md has no tour block"
    return [line for line in match.group(1).splitlines() if line.startswith("gansim ")]


def test_the_tour_shows_every_step_the_front_door_promises():
    commands = tour_commands()
    for shown in ("gansim simulate ", "gansim nccl-tests ", "gansim calibrate --script ",
                  "gansim calibrate --from-trace ", "gansim calibrate --from-timings ", "gansim predict ", "gansim validate --published",
                  "gansim plan "):
        assert any(c.startswith(shown) for c in commands), shown


def test_every_tour_command_runs_on_shipped_inputs(tmp_path):
    """The tour's commands, in order, as a newcomer runs them from a fresh folder beside the
    checkout's examples/ and tests/data/."""
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "data").symlink_to(ROOT / "tests" / "data")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    for command in tour_commands():
        argv = [sys.executable, "-m", "gansim", *shlex.split(command)[1:]]
        done = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True)
        assert done.returncode == 0, f"{command}\n{done.stderr[-3000:]}"
    assert (tmp_path / "gansim-out" / "paper-table3" / "report.html").is_file()


def test_no_page_points_outside_the_repository_or_carries_a_date():
    """Dates and machines belong inside generated blocks only; ../shared is not shipped."""
    pages = [README, *sorted((ROOT / "docs").rglob("*.md"))]
    for page in pages:
        prose = re.sub(r"<!-- (\S+):start -->.*?<!-- \1:end -->", "", page.read_text(), flags=re.S)
        assert "../shared" not in prose and "INTERFACES.md" not in prose, page
        assert not re.search(r"\b20\d\d-\d\d-\d\d\b|\bUTC\b|\bVM\b", prose), (page, re.findall(
            r".{30}(?:\b20\d\d-\d\d-\d\d\b|\bUTC\b|\bVM\b).{30}", prose))


def test_no_file_of_the_repository_points_to_the_design_notes_outside_it():
    """A clone or a pip install has no ../shared: the formats and the model live in docs/."""
    forbidden = re.compile(r"\.\./shared|INTERFACES\.md|DESIGN\.md")
    skipped = {".git", ".venv", "gansim-out", "site", "__pycache__", ".pytest_cache", ".hypothesis",
               ".import_linter_cache"}
    offenders = []
    for path in ROOT.rglob("*"):
        relative = path.relative_to(ROOT)
        if (set(relative.parts) & skipped or relative.parts[0].endswith(".egg-info") or not path.is_file()
                or path == Path(__file__) or path.suffix in {".gz", ".svg", ".png"}):
            continue
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        offenders += [f"{relative}:{n}" for n, line in enumerate(text.splitlines(), 1) if forbidden.search(line)]
    assert not offenders, offenders


# --- the formats page


def documented(name: str, formats: str) -> bool:
    """A field counts as documented when it is named as code: `name`, or inside a code span
    as a whole word (`provenance.host`, `host`, `{rank, phases}`)."""
    return re.search(rf"`[^`\n]*(?<![\w-]){re.escape(name)}(?![\w-])[^`\n]*`", formats) is not None


# maps whose keys are data, not fields: details.json's topologies by name
KEYED_BY_DATA = {"topologies"}


def keys(document: Any, parent: str = "") -> Iterator[str]:
    """Every object key of a JSON document, except keys that are data (world sizes, GPU counts,
    topology names)."""
    if isinstance(document, dict):
        for key, value in document.items():
            if not re.fullmatch(r"\d+", str(key)) and parent not in KEYED_BY_DATA:
                yield str(key)
            yield from keys(value, str(key))
    elif isinstance(document, list):
        for item in document:
            yield from keys(item, parent)


@pytest.fixture(scope="module")
def written(tmp_path_factory) -> dict[str, Any]:
    """Real outputs: simulate on the shipped scenarios that exercise every what-if, a profile
    imported from the shipped trace, a validation of each kind, and the commands' --json."""
    out = tmp_path_factory.mktemp("written")
    documents: dict[str, Any] = {}
    for scenario in ("paper-table3", "seed001-resource-aware-pcie", "seed003-spot-checkpoints",
                     "seed004-k8s-storage"):
        assert main(["simulate", scenario, "--out", str(out / scenario), "--traces", "none"]) == 0
        documents[f"{scenario}/summary.json"] = json.loads((out / scenario / "summary.json").read_text())
        documents[f"{scenario}/details.json"] = json.loads((out / scenario / "details.json").read_text())
    traces = sorted(str(p) for p in (ROOT / "tests" / "data").glob("ddp_gan_trace_rank*.json.gz"))
    profile = out / "trace-profile.json"
    assert main(["calibrate", "--from-trace", *traces, "--profiler-overhead-us", "2", "--out", str(profile)]) == 0
    documents["profile.json (from a trace)"] = json.loads(profile.read_text())
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        assert main(["predict", "--profile", str(profile), "--world-sizes", "1,2", "--topology", "dgx-a100",
                     "--measured-tflops", "1.5", "--measured-memory-bandwidth-GBps", "40", "--json"]) == 0
    documents["predict --json, on another GPU"] = json.loads(printed.getvalue())
    every_section = out / "profile.json"
    every_section.write_text(json.dumps(PROFILE))
    documents["profile.json (every section)"] = PROFILE
    assert main(["validate", "--profile", str(every_section), "--out", str(out / "validate")]) == 0
    documents["validate --profile"] = json.loads((out / "validate" / "validation.json").read_text())
    assert main(["validate", "--published", "autodl-2080ti-pcie-no-p2p", "--out", str(out / "published")]) == 0
    documents["validate --published"] = json.loads((out / "published" / "validation.json").read_text())
    return documents


def test_every_field_a_run_writes_is_on_the_formats_page(written):
    formats = FORMATS.read_text()
    missing = {f"{where}: {key}" for where, document in written.items() for key in keys(document)
               if not documented(key, formats)}
    assert not missing, sorted(missing)


def test_every_json_output_of_the_commands_is_on_the_formats_page(capsys):
    formats = FORMATS.read_text()
    outputs = {}
    for argv in (["nccl-tests", "dgx-a100", "-g", "8", "-b", "1M", "-e", "4M", "--explain", "--json"],
                 ["topology", "show", "dgx1-v100", "--json"],
                 ["plan", "seed003-spot-checkpoints", "--json"]):
        capsys.readouterr()
        assert main(argv) == 0
        outputs[" ".join(argv)] = json.loads(capsys.readouterr().out)
    missing = {f"{where}: {key}" for where, document in outputs.items() for key in keys(document)
               if not documented(key, formats)}
    assert not missing, sorted(missing)


def input_models() -> list[type[pydantic.BaseModel]]:
    """The models a user's scenario, topology and profile are read into."""
    from gansim.calibration.profile import schema as profile
    from gansim.core import config

    internal = {config.ProfiledWorkloadSpec, config.StepPhaseFigures}  # built from a profile, never written
    models = [m for module in (config, profile) for m in vars(module).values()
              if isinstance(m, type) and issubclass(m, pydantic.BaseModel) and m.__module__ == module.__name__
              and m.model_fields and m not in internal]
    assert config.Scenario in models and config.TopologyFile in models and profile.Profile in models
    return models


def test_every_field_a_file_accepts_is_on_the_formats_page():
    formats = FORMATS.read_text()
    missing = {f"{model.__name__}.{field.alias or name}" for model in input_models()
               for name, field in model.model_fields.items() if not documented(field.alias or name, formats)}
    assert not missing, sorted(missing)


def test_the_field_check_finds_an_undocumented_field():
    assert documented("step_time_s", "| `step_time_s` | s |")
    assert documented("host", "`provenance.host`, `platform`")
    assert not documented("time_s", "| `step_time_s` | s |")
    assert documented("allreduce", "`measured.allreduce`")
    assert not documented("no_such_field", FORMATS.read_text())


# --- generated blocks and figures


def test_every_generated_block_and_figure_is_what_the_generator_writes_now():
    assert docs.differences(ROOT) == []


def test_the_generator_rewrites_a_stale_block_and_check_reports_it(tmp_path):
    for block in {b.page for b in docs.BLOCKS}:
        (tmp_path / block).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / block, tmp_path / block)
    (block,) = [b for b in docs.BLOCKS if b.name == "limits"]
    limits = tmp_path / block.page
    limits.write_text(limits.read_text().replace("| `GANSIM_MAX_RUNS` |", "| `GANSIM_MAX_WALKS` |"))
    assert docs.main(["--root", str(tmp_path), "--check"]) == 1
    assert docs.main(["--root", str(tmp_path)]) == 0
    assert docs.block_in_page(tmp_path, block) == block.render()
    assert "GANSIM_MAX_WALKS" not in limits.read_text()
    assert docs.main(["--root", str(tmp_path), "--check"]) == 0
    assert (tmp_path / docs.SPEEDUP_FIGURE).read_text().startswith("<svg")
