"""NCCL_MIN_NCHANNELS and NCCL_MAX_NCHANNELS, worked out here from NCCL's source (NVIDIA/nccl):

- src/graph/connect.cc ncclTopoPostset, v2.5.6-1 to v2.30.7-1: after the channels are doubled
  (and, from 2.18, doubled again on fast rings across machines), "We permit combining max,
  then min, to only use the first channels, then duplicate them":
  `nChannels = min(ncclMaxNchannels(), nChannels)`, then
  `nChannels = copyChannels(comm, nChannels, ncclMinNchannels(), ...)`, which copies channel
  c from c - start (rings and trees: `memcpy(comm->channels+c, comm->channels+c-start, ...)`)
  up to the minimum; both at most MAXCHANNELS (ncclMinNchannels, ncclMaxNchannels).
- src/misc/rings.cc ncclGetRings, v2.4.8-1: the maximum applies where it is at most the rings
  found ("maxNrings <= *nrings"), and only otherwise is the minimum applied ("Duplicating
  rings to %d per user request"); a minimum above the maximum is ignored.
- src/graph/tuning.cc ncclTopoTuneModel: bandwidths from `graphs[a]->nChannels`, which the
  settings do not change, so neither does NCCL's choice of algorithm and protocol.
"""

from __future__ import annotations

import pytest

from gansim import api
from gansim.cli.main import main
from gansim.collectives.nccl_topology import NcclMachine
from gansim.collectives.nccl_versions import era_for
from gansim.core.errors import UserInputError
from gansim.topology.graph import load_topology
from tests.cli_checks import run_bad


def _machine(version: str = "2.30.7", limits=(None, None), name: str = "dgx-a100", gpus: int = 8) -> NcclMachine:
    return NcclMachine.build(load_topology(name), gpus, channel_limits=limits, **era_for(version).search_rules())


def test_a_dgx_a100_has_24_channels_of_its_own():
    """The reference the cases below start from: 12 ring channels, doubled."""
    machine = _machine()
    assert (machine.ring.channels, machine.searched_comm_channels, machine.comm_channels) == (12, 24, 24)


@pytest.mark.parametrize("version,limits,expected", [
    ("2.30.7", (None, 4), 4),  # min(max, 24)
    ("2.30.7", (None, 30), 24),  # a maximum above NCCL's own count changes nothing
    ("2.30.7", (32, None), 32),  # copied up to the minimum
    ("2.30.7", (8, 4), 8),  # max, then min: the first 4, duplicated to 8
    ("2.30.7", (4, None), 24),  # a minimum below NCCL's own count changes nothing
    ("2.21.5", (40, None), 32),  # MAXCHANNELS 32 before 2.25
    ("2.30.7", (64, None), 64),  # 64 from 2.25
    ("2.4.8", (None, 4), 4),  # 2.4: the maximum cuts its 16 rings ...
    ("2.4.8", (8, 4), 4),  # ... and then the minimum is not applied
    ("2.4.8", (20, None), 16),  # the minimum at most MAXCHANNELS, 16 in 2.4
])
def test_the_communicator_s_channels_follow_the_release_s_connect_cc(version, limits, expected):
    assert _machine(version, limits).comm_channels == expected


def test_copied_channels_run_the_rings_and_trees_of_the_channels_they_copy():
    """copyChannels: with the first 5 channels kept and copied to 8, channels 5-7 are channels
    0-2 again; without settings, channels past the doubled ones (the doubling across machines)
    repeat them, the doubled channels' own copies (12-23) running the second tree."""
    machine = _machine(limits=(8, 5))
    assert [machine.source_channel(c) for c in range(8)] == [0, 1, 2, 3, 4, 0, 1, 2]
    plain = _machine()
    assert [plain.source_channel(c) for c in range(24)] == list(range(24))
    wide = _machine(limits=(48, None))
    assert [wide.source_channel(c) for c in range(24, 48)] == list(range(24))


def _rows(**settings):
    return api.nccl_tests("dgx-a100", 8, minbytes="256M", maxbytes="256M", **settings).rows[0]


def test_fewer_channels_keep_nccl_s_choice_and_carry_their_share_of_the_graph_s_bandwidth():
    """At 256 MiB the ring/Simple all-reduce on one channel of 24 runs its kernels at 1/24 of
    the graph's bus bandwidth (12 channels x bwIntra), which then bounds it; on all 24 the
    NVLinks bound it, below what the kernels would move."""
    machine = _machine()
    graph_bus = machine.ring.channels * machine.ring.bw_intra  # GB/s
    own, one = _rows(), _rows(nccl_max_channels=1)
    assert (one.algorithm, one.protocol) == (own.algorithm, own.protocol) == ("ring", "Simple")
    assert (own.channels, one.channels) == (24, 1)
    assert one.busbw_GBps == pytest.approx(graph_bus / 24, rel=0.01)
    four = _rows(nccl_max_channels=4)
    assert four.busbw_GBps == pytest.approx(4 * one.busbw_GBps, rel=0.01)
    assert 5 * four.busbw_GBps < own.busbw_GBps < graph_bus  # on all 24, the links bound it below the kernels


def test_more_channels_than_nccl_s_own_run_as_many_and_no_faster_where_links_bound():
    own, more = _rows(), _rows(nccl_min_channels=32)
    assert more.channels == 32
    assert more.busbw_GBps == pytest.approx(own.busbw_GBps, rel=1e-6)


def test_small_messages_still_use_fewer_channels():
    """enqueue.cc: channels drop while a thread would have too little to move, from the
    communicator's count whatever set it."""
    row = api.nccl_tests("dgx-a100", 8, minbytes="64K", maxbytes="64K", nccl_min_channels=32).rows[0]
    assert row.channels == api.nccl_tests("dgx-a100", 8, minbytes="64K", maxbytes="64K").rows[0].channels < 24


def test_nvls_keeps_its_own_channels(tmp_path):
    """transport/nvls.cc: comm->nvlsChannels comes from NCCL_NVLS_NCHANNELS (16 on Hopper), not
    from these settings, and enqueue.cc runs NVLS on all of them ("nc = comm->nvlsChannels"):
    an H100 box's 1 GiB NVLS all-reduce is the same with NCCL_MAX_NCHANNELS=1."""
    path = tmp_path / "h100.yaml"
    path.write_text("name: h100-box\ngenerator: nvswitch\nparams: {gpus: 8, gpu_model: H100-SXM5-80GB, "
                    "nvlink_bandwidth_GBps: 450.0}\n")
    own, one = (api.nccl_tests(str(path), 8, minbytes="1G", maxbytes="1G", nccl_max_channels=m).rows[0]
                for m in (None, 1))
    assert (own.algorithm, own.channels) == (one.algorithm, one.channels) == ("nvls", 16)
    assert one.time_us == own.time_us


def test_explain_says_the_settings_changed_the_channels(capsys):
    assert main(["nccl-tests", "dgx-a100", "-g", "8", "-b", "256M", "-e", "256M", "--nccl-max-channels", "2",
                 "--explain"]) == 0
    out = capsys.readouterr().out
    assert "x2/2 ch" in out and "NCCL's own 24, before NCCL_MIN/MAX_NCHANNELS" in out


@pytest.mark.parametrize("flag,value,allowed", [("--nccl-max-channels", "0", ">= 1"),
                                                ("--nccl-min-channels", "65", "<= 64"),
                                                ("--nccl-min-channels", "-1", ">= 0"),
                                                ("--nccl-max-channels", "2.0", "whole number")])
def test_a_bad_channel_count_is_one_line(capsys, flag, value, allowed):
    line = run_bad(capsys, ["nccl-tests", "dgx-a100", "-g", "8", flag, value])
    assert flag in line and allowed in line


def test_the_api_checks_channel_counts_as_the_command_does():
    with pytest.raises(UserInputError, match="--nccl-max-channels"):
        api.nccl_tests("dgx-a100", 8, nccl_max_channels=True)
    with pytest.raises(UserInputError, match="--nccl-min-channels"):
        api.nccl_tests("dgx-a100", 8, nccl_min_channels=65)


def test_a_scenario_s_channel_limits_slow_its_all_reduces():
    """options.nccl_max_channels in a scenario reaches the simulated all-reduces; one out of
    range is refused with the field named."""
    import gansim

    base = {"name": "chan", "topology": "dgx-a100", "workload": {"allreduce_bytes": 268435456}, "gpus": [8],
            "algorithms": ["nccl"], "steps": 1}
    times = [next(r.step_time_s for r in gansim.simulate({**base, "options": options}, executor=None).runs
                  if r.gpus == 8)
             for options in ({}, {"nccl_max_channels": 1})]
    assert times[1] > 10 * times[0]
    with pytest.raises(UserInputError, match="options.nccl_max_channels"):
        gansim.simulate({**base, "options": {"nccl_max_channels": 65}}, executor=None)


def test_a_published_run_s_channel_settings_are_applied(tmp_path):
    """A published file's NCCL_MAX_NCHANNELS (or the legacy NCCL_MAX_NRINGS; the NCHANNELS name
    wins) sets the run's option; a value NCCL would not read as a count is one line."""
    from tests.test_published import _copy_with_env

    from gansim.prediction.published import load_published

    folder = _copy_with_env(tmp_path, "a40-nvlink-pair", {"NCCL_MAX_NRINGS": "3", "NCCL_MAX_NCHANNELS": "1",
                                                           "NCCL_MIN_NRINGS": "2"})
    (published,) = load_published("a40-nvlink-pair", folder)
    options = published.options()
    assert (options.nccl_min_channels, options.nccl_max_channels) == (2, 1)
    _copy_with_env(tmp_path, "a40-nvlink-pair", {"NCCL_MIN_NCHANNELS": "many"})
    with pytest.raises(UserInputError) as err:
        load_published("a40-nvlink-pair", tmp_path)
    assert "NCCL_MIN_NCHANNELS" in str(err.value) and "allowed" in str(err.value)
