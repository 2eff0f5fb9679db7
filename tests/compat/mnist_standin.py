"""A local stand-in for the MNIST download of Horovod's Spark examples (``mnist.bz2``, libsvm, 784 pixels,
labels 0-9): each class is a fixed pattern of lit pixels, and each row that pattern with some pixels dropped and
some noise lit, so a small network learns it to well above 0.9 accuracy in an epoch or two. Nothing is
downloaded; the examples find the file where they would have saved theirs (``--data-dir``)."""

from __future__ import annotations

import bz2
from pathlib import Path

import numpy as np

PIXELS, CLASSES = 784, 10


def write_mnist_standin(folder: Path, rows: int = 2000, seed: int = 0) -> Path:
    """``folder/mnist.bz2``: `rows` labelled rows in libsvm's text format (1-based pixel indices), bz2-packed."""
    rng = np.random.default_rng(seed)
    patterns = rng.random((CLASSES, PIXELS)) < 0.12
    lines = []
    for label in rng.integers(0, CLASSES, rows):
        lit = (patterns[label] & (rng.random(PIXELS) > 0.2)) | (rng.random(PIXELS) < 0.03)
        pixels = np.flatnonzero(lit)
        values = rng.uniform(0.6, 1.0, len(pixels))
        lines.append(f"{label} " + " ".join(f"{i + 1}:{v:.3f}" for i, v in zip(pixels, values, strict=True)))
    path = folder / "mnist.bz2"
    path.write_bytes(bz2.compress(("\n".join(lines) + "\n").encode()))
    return path
