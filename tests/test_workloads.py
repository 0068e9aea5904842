"""The simulator's layer descriptions are the calibrator's torch networks."""

from __future__ import annotations

import pytest

from gansim.calibration.ranks.models import buffer_bytes, build_model, trainable_parameters
from gansim.training.workloads import ARCHITECTURES


@pytest.mark.parametrize("name", ["paper-mlp-gan", "dcgan", "dcgan-32"])
def test_simulated_and_calibrated_networks_have_the_same_parameters(name):
    arch = ARCHITECTURES.get(name)()
    generator, discriminator, _latent, _shape = build_model(name)
    assert arch.generator.params == trainable_parameters(generator)
    assert arch.discriminator.params == trainable_parameters(discriminator)
    # what DDP's broadcast_buffers sends (BatchNorm running statistics and batch count)
    assert arch.generator.buffer_bytes == buffer_bytes(generator)
    assert arch.discriminator.buffer_bytes == buffer_bytes(discriminator)


def test_paper_gan_matches_seed_002_table_2():
    arch = ARCHITECTURES.get("paper-mlp-gan")()
    assert arch.generator.params == 2_051_384 and arch.discriminator.params == 233_985
