"""Datasets a whole training run passes over: image counts and sizes, each sourced."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Dataset:
    name: str
    images: int
    packed_bytes: float  # the dataset as torchvision reads it (one load per process)
    file_bytes: float  # one image as its own file (ImageFolder-style input)
    source: str


DATASETS: dict[str, Dataset] = {
    # MNIST training set: 60,000 images of 28x28 bytes; train-images-idx3-ubyte is a 16-byte
    # header plus 60,000 x 784 bytes = 47,040,016 bytes (Y. LeCun et al., "The MNIST database",
    # yann.lecun.com/exdb/mnist, file format section).
    "mnist": Dataset("mnist", 60_000, 47_040_016, 784,
                     "LeCun et al., MNIST database: 60,000 training images, idx file 16 + 60000x784 bytes"),
    # CIFAR-10 training set: 50,000 32x32x3 images; the binary version is 5 files of 10,000
    # rows of 3,073 bytes (1 label + 3,072 pixels) (A. Krizhevsky, cs.toronto.edu/~kriz/cifar.html).
    "cifar10": Dataset("cifar10", 50_000, 50_000 * 3_073, 3_072,
                       "Krizhevsky, CIFAR-10: 50,000 training images, binary rows of 3,073 bytes"),
    # CelebA: 202,599 face images (Liu et al., "Deep Learning Face Attributes in the Wild",
    # ICCV 2015; mmlab.ie.cuhk.edu.hk/projects/CelebA.html). The aligned JPEGs
    # (img_align_celeba.zip) are about 1.4 GB, i.e. about 7 kB per image: APPROXIMATE, from the
    # download listing, not measured here.
    "celeba": Dataset("celeba", 202_599, 1.4e9, 1.4e9 / 202_599,
                      "Liu et al. 2015, CelebA: 202,599 images; ~1.4 GB of aligned JPEGs (approximate)"),
}


def dataset_for(run: Any) -> Dataset:
    """The dataset of a RunSpec; `images` overrides the count (sizes scale with it)."""
    if run.dataset is not None:
        base = DATASETS[run.dataset]
        if run.images is None or run.images == base.images:
            return base
        return Dataset(base.name, run.images, base.packed_bytes * run.images / base.images, base.file_bytes,
                       base.source + f" (count overridden: {run.images})")
    return Dataset("custom", run.images, 0.0, 0.0, "images given in the scenario")


