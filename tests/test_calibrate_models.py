"""gansim.calibration.ranks.models: the paper's GAN exactly, DCGAN shapes, custom factories."""

from __future__ import annotations

import textwrap

import pytest

torch = pytest.importorskip("torch")  # the calibrate extra; installed in CI

from gansim.calibration.ranks.models import (  # noqa: E402
    MODELS,
    build_model,
    check_model_shapes,
    gradient_bytes,
    trainable_parameters,
)
from gansim.core.errors import UserInputError  # noqa: E402


def test_paper_mlp_gan_parameter_counts():
    g, d, latent, shape = build_model("paper-mlp-gan")
    assert latent == 50
    assert shape == (1, 28, 28)
    assert trainable_parameters(g) == 2_051_384
    assert trainable_parameters(d) == 233_985
    # Keras' "non-trainable 238,385" = D's 233,985 + G's 4,400 batch-norm statistics
    bn_stats = sum(b.numel() for n, b in g.named_buffers() if "running" in n)
    assert bn_stats == 4_400
    assert trainable_parameters(d) + bn_stats == 238_385
    assert gradient_bytes(g) == 4 * 2_051_384
    assert gradient_bytes(d) == 4 * 233_985


def test_paper_mlp_gan_layers_follow_table_2():
    g, d, _, _ = build_model("paper-mlp-gan")
    linear = [m for m in g.modules() if isinstance(m, torch.nn.Linear)]
    assert [(m.in_features, m.out_features) for m in linear] == [(50, 1200), (1200, 1000), (1000, 784)]
    bns = [m.num_features for m in g.modules() if isinstance(m, torch.nn.BatchNorm1d)]
    assert bns == [1200, 1000]
    linear = [m for m in d.modules() if isinstance(m, torch.nn.Linear)]
    assert [(m.in_features, m.out_features) for m in linear] == [(784, 256), (256, 128), (128, 1)]
    assert sum(isinstance(m, torch.nn.Dropout) for m in d.modules()) == 2


@pytest.mark.parametrize("name,shape", [("paper-mlp-gan", (1, 28, 28)), ("dcgan", (1, 28, 28)),
                                        ("dcgan-32", (3, 32, 32))])
def test_forward_shapes(name, shape):
    g, d, latent, sample_shape = build_model(name)
    assert sample_shape == shape
    z = torch.randn(4, latent)
    with torch.no_grad():
        fake = g(z)
        out = d(fake)
    assert tuple(fake.shape) == (4, *shape)
    assert tuple(out.shape) == (4, 1)
    assert float(out.min()) >= 0.0 and float(out.max()) <= 1.0
    check_model_shapes(name)


def test_registry_names():
    assert {"paper-mlp-gan", "dcgan", "dcgan-32"} <= set(MODELS.names())


def test_custom_factory_from_file(tmp_path):
    f = tmp_path / "my_gan.py"
    f.write_text(textwrap.dedent("""
        import torch.nn as nn
        def make():
            g = nn.Sequential(nn.Linear(8, 16), nn.Sigmoid(), nn.Unflatten(1, (1, 4, 4)))
            d = nn.Sequential(nn.Flatten(), nn.Linear(16, 1), nn.Sigmoid())
            return g, d, 8, (1, 4, 4)
        def bad():
            return 1, 2
        def wrong_shape():
            g = nn.Sequential(nn.Linear(8, 16), nn.Sigmoid())
            d = nn.Sequential(nn.Flatten(), nn.Linear(16, 1), nn.Sigmoid())
            return g, d, 8, (1, 4, 4)
    """))
    g, d, latent, shape = build_model(f"{f}:make")
    assert latent == 8 and shape == (1, 4, 4)
    check_model_shapes(f"{f}:make")
    with pytest.raises(UserInputError) as err:
        build_model(f"{f}:bad")
    assert err.value.field == "--model"
    with pytest.raises(UserInputError) as err:
        check_model_shapes(f"{f}:wrong_shape")
    assert "generator output" in str(err.value)
    with pytest.raises(UserInputError) as err:
        build_model(f"{f}:missing")
    assert "no callable" in str(err.value)


def test_custom_factory_module_form(tmp_path, monkeypatch):
    (tmp_path / "gan_mod_for_test.py").write_text(
        "from gansim.calibration.ranks.models import paper_mlp_gan as make\n")
    monkeypatch.chdir(tmp_path)
    g, d, latent, shape = build_model("gan_mod_for_test:make")
    assert trainable_parameters(g) == 2_051_384


def test_unknown_model_is_a_user_error():
    with pytest.raises(UserInputError) as err:
        build_model("dcgan-33")
    assert err.value.field == "--model"
    assert "paper-mlp-gan" in str(err.value)
    with pytest.raises(UserInputError):
        build_model("no_such_module_xyz:make")
