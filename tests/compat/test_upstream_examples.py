"""The originals' own examples run through the drop-ins with only their import line changed, on a local stand-in
for their data, and print a test accuracy above 0.9 (tests/compat/upstream_examples.py lists them)."""

from __future__ import annotations

import bz2
import logging
from pathlib import Path

import numpy as np
import pytest

from tests.compat.upstream import skip_reason
from tests.compat.upstream_examples import EXAMPLES, MNIST_PIXELS, Example, mnist_stand_in, run_example

log = logging.getLogger("sparkrunner")


def test_the_mnist_stand_in_is_libsvm_of_784_pixels_of_0_255_and_ten_classes(tmp_path: Path) -> None:
    path = tmp_path / "mnist.bz2"
    mnist_stand_in(path, rows=200)
    lines = bz2.decompress(path.read_bytes()).decode().splitlines()
    labels = [int(line.split()[0]) for line in lines]
    pairs = [item.split(":") for line in lines for item in line.split()[1:]]
    indices, values = np.array([int(i) for i, _ in pairs]), np.array([float(v) for _, v in pairs])
    assert len(lines) == 200 and set(labels) == set(range(10))
    assert indices.min() >= 1 and indices.max() <= MNIST_PIXELS
    assert values.min() >= 1 and values.max() <= 255 and np.array_equal(values, values.round())


@pytest.mark.slow
@pytest.mark.spark
@pytest.mark.parametrize("example", EXAMPLES, ids=[e.name for e in EXAMPLES])
def test_original_example_trains_through_the_drop_in(example: Example, tmp_path: Path) -> None:
    reason = skip_reason(example.name, example.path(), example.requires)
    if reason is not None:
        pytest.skip(reason)
    outcome = run_example(example, tmp_path)
    log.info("%s: exit %d, test accuracy %s", example.name, outcome.returncode, outcome.accuracy)
    assert outcome.returncode == 0, outcome.output[-6000:]
    assert outcome.accuracy is not None and outcome.accuracy > 0.9, outcome.output[-6000:]
