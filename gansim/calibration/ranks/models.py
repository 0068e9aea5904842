"""GAN workloads for calibration: torch modules and the ``MODELS`` registry.

Every entry of :data:`MODELS` is a zero-argument factory returning
``(generator, discriminator, latent_dim, sample_shape)``:

- ``generator`` maps a ``(batch, latent_dim)`` noise tensor to ``(batch, *sample_shape)``;
- ``discriminator`` maps ``(batch, *sample_shape)`` to ``(batch, 1)`` probabilities
  (a sigmoid output: the loss is ``BCELoss``, as in the paper);
- ``sample_shape`` is the shape of one real sample, channels first (``(1, 28, 28)``).

Besides the registered names, :func:`resolve_model` accepts ``module.path:factory`` or
``path/to/file.py:factory`` so any pair of ``torch.nn.Module`` can be calibrated.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from typing import Callable, Tuple

import torch
from torch import nn

from gansim.core.errors import UserInputError
from gansim.core.registry import Registry

ModelTuple = Tuple[nn.Module, nn.Module, int, Tuple[int, ...]]
ModelFactory = Callable[[], ModelTuple]

MODELS: Registry[ModelFactory] = Registry("model")

MNIST_SHAPE = (1, 28, 28)


# --------------------------------------------------------------------------- paper MLP GAN
class PaperGenerator(nn.Module):
    """Seed 002, Table 2, generator: 50 -> Dense 1200 + BN -> Dense 1000 + BN -> Dense 784,
    reshaped to 28x28x1 and passed through a sigmoid ("Activation" row).

    Table 2 lists no activation layer between the dense layers; the hidden activation is
    LeakyReLU(0.2) after each batch norm (the usual choice for this Keras MNIST GAN; it has
    no parameters, so the parameter count is Table 1's: 2,051,384 trainable, plus 4,400
    batch-norm running statistics that Keras counts as non-trainable).
    """

    def __init__(self, latent_dim: int = 50, out_shape: tuple[int, ...] = MNIST_SHAPE):
        super().__init__()
        self.out_shape = tuple(out_shape)
        out = 1
        for d in self.out_shape:
            out *= d
        self.net = nn.Sequential(
            nn.Linear(latent_dim, 1200),
            nn.BatchNorm1d(1200),
            nn.LeakyReLU(0.2),
            nn.Linear(1200, 1000),
            nn.BatchNorm1d(1000),
            nn.LeakyReLU(0.2),
            nn.Linear(1000, out),
            nn.Sigmoid(),
        )

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return self.net(z).view(z.shape[0], *self.out_shape)


class PaperDiscriminator(nn.Module):
    """Seed 002, Table 2, discriminator: 28x28x1 -> Flatten 784 -> Dense 256 -> Dropout ->
    Dense 128 -> Dropout -> Dense 1 -> sigmoid: 233,985 trainable parameters.

    The paper gives neither the hidden activation nor the dropout rate: LeakyReLU(0.2) and
    dropout 0.3 are used (the common Keras MNIST GAN values; neither changes the parameter
    count and both cost little next to the dense layers).
    """

    def __init__(self, in_shape: tuple[int, ...] = MNIST_SHAPE, dropout: float = 0.3):
        super().__init__()
        n = 1
        for d in in_shape:
            n *= d
        self.net = nn.Sequential(
            nn.Flatten(),
            nn.Linear(n, 256),
            nn.LeakyReLU(0.2),
            nn.Dropout(dropout),
            nn.Linear(256, 128),
            nn.LeakyReLU(0.2),
            nn.Dropout(dropout),
            nn.Linear(128, 1),
            nn.Sigmoid(),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


@MODELS.register("paper-mlp-gan")
def paper_mlp_gan() -> ModelTuple:
    """The paper's MLP GAN (seed 002, Table 2) for 28x28x1 MNIST."""
    return PaperGenerator(50), PaperDiscriminator(), 50, MNIST_SHAPE


# --------------------------------------------------------------------------- DCGAN
class DCGANGenerator(nn.Module):
    """DCGAN generator (Radford et al. 2016) for 28x28 (via 7x7 -> 14x14 -> 28x28) or
    32x32 (via 4x4 -> 8x8 -> 16x16 -> 32x32) images: transposed convolutions, batch norm,
    ReLU, tanh output."""

    def __init__(self, latent_dim: int = 100, channels: int = 1, size: int = 28, width: int = 64):
        super().__init__()
        self.latent_dim = latent_dim
        if size == 28:
            self.project = nn.Sequential(
                nn.ConvTranspose2d(latent_dim, width * 4, 7, 1, 0, bias=False),  # 7x7
                nn.BatchNorm2d(width * 4),
                nn.ReLU(True),
            )
            self.body = nn.Sequential(
                nn.ConvTranspose2d(width * 4, width * 2, 4, 2, 1, bias=False),  # 14x14
                nn.BatchNorm2d(width * 2),
                nn.ReLU(True),
                nn.ConvTranspose2d(width * 2, channels, 4, 2, 1, bias=False),  # 28x28
                nn.Tanh(),
            )
        elif size == 32:
            self.project = nn.Sequential(
                nn.ConvTranspose2d(latent_dim, width * 4, 4, 1, 0, bias=False),  # 4x4
                nn.BatchNorm2d(width * 4),
                nn.ReLU(True),
            )
            self.body = nn.Sequential(
                nn.ConvTranspose2d(width * 4, width * 2, 4, 2, 1, bias=False),  # 8x8
                nn.BatchNorm2d(width * 2),
                nn.ReLU(True),
                nn.ConvTranspose2d(width * 2, width, 4, 2, 1, bias=False),  # 16x16
                nn.BatchNorm2d(width),
                nn.ReLU(True),
                nn.ConvTranspose2d(width, channels, 4, 2, 1, bias=False),  # 32x32
                nn.Tanh(),
            )
        else:  # pragma: no cover - guarded by the factories
            raise ValueError("DCGAN size must be 28 or 32")

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return self.body(self.project(z.view(z.shape[0], self.latent_dim, 1, 1)))


class DCGANDiscriminator(nn.Module):
    """DCGAN discriminator: strided convolutions, batch norm, LeakyReLU(0.2), sigmoid."""

    def __init__(self, channels: int = 1, size: int = 28, width: int = 64):
        super().__init__()
        if size == 28:
            self.body = nn.Sequential(
                nn.Conv2d(channels, width, 4, 2, 1, bias=False),  # 14x14
                nn.LeakyReLU(0.2, inplace=True),
                nn.Conv2d(width, width * 2, 4, 2, 1, bias=False),  # 7x7
                nn.BatchNorm2d(width * 2),
                nn.LeakyReLU(0.2, inplace=True),
                nn.Conv2d(width * 2, 1, 7, 1, 0, bias=False),  # 1x1
                nn.Sigmoid(),
            )
        elif size == 32:
            self.body = nn.Sequential(
                nn.Conv2d(channels, width, 4, 2, 1, bias=False),  # 16x16
                nn.LeakyReLU(0.2, inplace=True),
                nn.Conv2d(width, width * 2, 4, 2, 1, bias=False),  # 8x8
                nn.BatchNorm2d(width * 2),
                nn.LeakyReLU(0.2, inplace=True),
                nn.Conv2d(width * 2, width * 4, 4, 2, 1, bias=False),  # 4x4
                nn.BatchNorm2d(width * 4),
                nn.LeakyReLU(0.2, inplace=True),
                nn.Conv2d(width * 4, 1, 4, 1, 0, bias=False),  # 1x1
                nn.Sigmoid(),
            )
        else:  # pragma: no cover
            raise ValueError("DCGAN size must be 28 or 32")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x).view(x.shape[0], 1)


@MODELS.register("dcgan")
def dcgan() -> ModelTuple:
    """DCGAN for 28x28x1 (MNIST-shaped) images, latent 100, base width 64."""
    return DCGANGenerator(100, 1, 28), DCGANDiscriminator(1, 28), 100, (1, 28, 28)


@MODELS.register("dcgan-32")
def dcgan_32() -> ModelTuple:
    """DCGAN for 32x32x3 (CIFAR-shaped) images, latent 100, base width 64."""
    return DCGANGenerator(100, 3, 32), DCGANDiscriminator(3, 32), 100, (3, 32, 32)


# --------------------------------------------------------------------------- helpers
def trainable_parameters(module: nn.Module) -> int:
    """Number of trainable (requires_grad) parameters."""
    return sum(p.numel() for p in module.parameters() if p.requires_grad)


def gradient_bytes(module: nn.Module) -> int:
    """Bytes of gradient one all-reduce of ``module`` moves (trainable parameters)."""
    return sum(p.numel() * p.element_size() for p in module.parameters() if p.requires_grad)


def buffer_bytes(module: nn.Module) -> int:
    """Bytes of ``module``'s buffers (BatchNorm statistics): what DDP's broadcast_buffers
    sends from rank 0 before a forward."""
    return sum(b.numel() * b.element_size() for b in module.buffers())


def _load_custom_factory(spec: str, field: str) -> ModelFactory:
    target, _, attr = spec.rpartition(":")
    if not target or not attr:
        raise UserInputError(
            f"{spec!r} is neither a known model ({', '.join(MODELS.names())}) nor "
            "'module.path:factory' / 'file.py:factory'",
            field=field,
        )
    try:
        if target.endswith(".py") or os.sep in target:
            path = os.path.abspath(target)
            if not os.path.isfile(path):
                raise UserInputError(f"file {target!r} does not exist", field=field)
            name = "gansim_user_model_" + os.path.splitext(os.path.basename(path))[0]
            mspec = importlib.util.spec_from_file_location(name, path)
            if mspec is None or mspec.loader is None:
                raise UserInputError(f"cannot import {target!r}", field=field)
            module = importlib.util.module_from_spec(mspec)
            sys.modules[name] = module
            mspec.loader.exec_module(module)
        else:
            cwd = os.getcwd()
            if cwd not in sys.path:  # like `python -m`: the current directory is importable
                sys.path.insert(0, cwd)
            module = importlib.import_module(target)
    except UserInputError:
        raise
    except Exception as exc:  # ImportError, SyntaxError, errors at import time
        raise UserInputError(
            f"cannot import {target!r} ({type(exc).__name__}: {exc})", field=field
        ) from None
    factory = getattr(module, attr, None)
    if not callable(factory):
        raise UserInputError(f"{target!r} has no callable {attr!r}", field=field)
    return factory


def build_model(spec: str, *, field: str = "--model") -> ModelTuple:
    """Build ``(generator, discriminator, latent_dim, sample_shape)`` for a registered name
    or a ``module:factory`` spec, checking what a custom factory returns."""
    if spec in MODELS:
        factory = MODELS.get(spec)
    else:
        factory = _load_custom_factory(spec, field)
    try:
        result = factory()
    except Exception as exc:
        raise UserInputError(
            f"model factory {spec!r} failed: {type(exc).__name__}: {exc}", field=field
        ) from None
    if not (isinstance(result, tuple) and len(result) == 4):
        raise UserInputError(
            f"model factory {spec!r} must return (generator, discriminator, latent_dim, "
            f"sample_shape), got {type(result).__name__}",
            field=field,
        )
    g, d, latent, shape = result
    if not isinstance(g, nn.Module) or not isinstance(d, nn.Module):
        raise UserInputError(
            f"model factory {spec!r}: generator and discriminator must be torch.nn.Module",
            field=field,
        )
    if not isinstance(latent, int) or isinstance(latent, bool) or latent < 1:
        raise UserInputError(
            f"model factory {spec!r}: latent_dim must be a positive int, got {latent!r}",
            field=field,
        )
    try:
        shape = tuple(int(s) for s in shape)
    except (TypeError, ValueError):
        raise UserInputError(
            f"model factory {spec!r}: sample_shape must be a tuple of ints, got {shape!r}",
            field=field,
        ) from None
    if not shape or any(s < 1 for s in shape):
        raise UserInputError(
            f"model factory {spec!r}: sample_shape must be positive ints, got {shape!r}",
            field=field,
        )
    if trainable_parameters(g) == 0 or trainable_parameters(d) == 0:
        raise UserInputError(
            f"model factory {spec!r}: generator and discriminator need trainable parameters",
            field=field,
        )
    return g, d, latent, shape


def check_model_shapes(spec: str, batch: int = 2, *, field: str = "--model") -> None:
    """Run one tiny forward pass of G and D to catch shape mismatches before spawning ranks."""
    g, d, latent, shape = build_model(spec, field=field)
    g.eval()
    d.eval()
    try:
        with torch.no_grad():
            fake = g(torch.zeros(batch, latent))
            if tuple(fake.shape) != (batch, *shape):
                raise UserInputError(
                    f"model {spec!r}: generator output {tuple(fake.shape)} != "
                    f"(batch, *sample_shape) = {(batch, *shape)}",
                    field=field,
                )
            out = d(fake)
            if out.numel() != batch:
                raise UserInputError(
                    f"model {spec!r}: discriminator output {tuple(out.shape)} is not one "
                    "value per sample",
                    field=field,
                )
    except UserInputError:
        raise
    except Exception as exc:
        raise UserInputError(
            f"model {spec!r}: forward pass failed: {type(exc).__name__}: {exc}", field=field
        ) from None
