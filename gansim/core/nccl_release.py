"""NCCL release numbers as users write them (`nccl_version: 2.18.3` in a topology, a scenario's
options, a published measurement, `--nccl-version`): parsed and held to the releases whose
tuning model gansim follows (gansim/collectives/nccl_versions.py has one era per change)."""

from __future__ import annotations

import re
from datetime import date

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


# When each release the model follows came out: the date of its tag (v2.x.y-1) in NVIDIA/nccl.
RELEASE_DATES = {
    "2.4.2": "2019-01-29", "2.4.6": "2019-04-05", "2.4.7": "2019-05-10", "2.4.8": "2019-06-25",
    "2.5.6": "2019-11-19", "2.5.7": "2020-01-16", "2.6.4": "2020-03-20", "2.7.3": "2020-06-08",
    "2.7.5": "2020-06-26", "2.7.6": "2020-06-26", "2.7.8": "2020-07-27", "2.8.3": "2020-11-17",
    "2.8.4": "2021-02-09", "2.9.6": "2021-04-12", "2.9.8": "2021-05-10", "2.9.9": "2021-05-12",
    "2.10.3": "2021-07-08", "2.11.4": "2021-09-08", "2.12.7": "2022-03-02", "2.12.10": "2022-03-30",
    "2.12.12": "2022-05-13", "2.13.4": "2022-07-11", "2.14.3": "2022-08-18", "2.15.1": "2022-09-27",
    "2.15.5": "2022-10-25", "2.16.2": "2022-11-30", "2.16.5": "2023-02-02", "2.17.1": "2023-03-01",
    "2.18.1": "2023-04-18", "2.18.3": "2023-06-14", "2.18.5": "2023-08-23", "2.19.1": "2023-09-26",
    "2.19.3": "2023-09-26", "2.18.6": "2023-10-10", "2.19.4": "2023-11-13", "2.20.3": "2024-02-13",
    "2.20.5": "2024-02-26", "2.21.5": "2024-04-02", "2.22.3": "2024-06-19", "2.23.4": "2024-09-16",
    "2.24.3": "2025-01-07", "2.25.1": "2025-01-27", "2.26.2": "2025-03-12", "2.26.3": "2025-04-22",
    "2.26.5": "2025-04-22", "2.26.6": "2025-05-20", "2.27.3": "2025-05-29", "2.27.5": "2025-06-18",
    "2.27.6": "2025-07-11", "2.27.7": "2025-07-24", "2.28.3": "2025-09-02", "2.28.7": "2025-10-17",
    "2.28.9": "2025-11-10", "2.29.2": "2025-12-24", "2.29.3": "2026-02-03", "2.29.7": "2026-02-27",
    "2.30.3": "2026-04-14", "2.30.4": "2026-04-22", "2.30.7": "2026-06-04",
}


def newest_release_before(day: str) -> str:
    """The newest release (by number) tagged before `day` (YYYY-MM-DD): the newest NCCL a run
    published that day can have used. OLDEST_VERSION for a day before every release followed."""
    when = date.fromisoformat(day)
    released = [v for v, d in RELEASE_DATES.items() if date.fromisoformat(d) < when]
    return max(released, key=parse_version) if released else OLDEST_VERSION
