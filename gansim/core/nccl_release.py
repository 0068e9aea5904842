"""NCCL release numbers as users write them (`nccl_version: 2.18.3` in a topology, a scenario's
options, a published measurement, `--nccl-version`): parsed and held to the releases whose
tuning model gansim follows (gansim/collectives/nccl_versions.py has one era per change)."""

from __future__ import annotations

import re

NEWEST_VERSION = "2.30.7"  # the newest release whose src/graph/tuning.cc the model follows
OLDEST_VERSION = "2.4"  # 2.4 by its thresholds, 2.5 on by src/graph/tuning.cc (nccl_versions.py)
_VERSION = re.compile(r"v?(\d+)\.(\d+)(?:\.(\d+))?(?:-\d+)?")


def parse_version(text: str) -> tuple[int, int, int]:
    """"2.18", "2.18.3", "v2.18.3-1" -> (2, 18, 3); ValueError for anything else."""
    match = _VERSION.fullmatch(text.strip())
    if not match:
        raise ValueError(f"expected an NCCL version such as 2.18.3 (allowed: {OLDEST_VERSION} to {NEWEST_VERSION}), "
                         f"got {text!r}")
    return int(match.group(1)), int(match.group(2)), int(match.group(3) or 0)


def check_version(text: str) -> str:
    """A release the model follows (OLDEST_VERSION to NEWEST_VERSION), as given; ValueError
    naming what is allowed otherwise."""
    version = parse_version(text)
    if not parse_version(OLDEST_VERSION) <= version <= parse_version(NEWEST_VERSION):
        raise ValueError(f"NCCL {text} is not modelled; allowed: {OLDEST_VERSION} to {NEWEST_VERSION} "
                         "(2.5 on from each release's src/graph/tuning.cc, 2.4 by its thresholds)")
    return text
