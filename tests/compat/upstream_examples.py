"""The originals' own example scripts, run through the drop-ins with only their import line changed, on a local
stand-in for the data they download.

As with `upstream.SUITES`, the scripts are not part of this repository: `scripts/fetch_upstream_tests.sh` puts them
under ``$SPARKRUNNER_UPSTREAM_TESTS`` at the pinned commits. Each example names the command-line arguments it is
given (its own flags, values chosen to fit a small machine) and writes its stand-in data where the script looks
for its download, so the script finds it and downloads nothing.
"""

from __future__ import annotations

import bz2
import os
import re
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from tests.compat.upstream import REPO, UPSTREAM, rewrite

_EXAMPLE_TIMEOUT_S = 1200
MNIST_PIXELS = 784
MNIST_CLASSES = 10


@dataclass(frozen=True)
class Example:
    """One original example script: where it lives, the import line replaced, its arguments, its data."""

    name: str
    source: str  # under UPSTREAM
    origin: str  # repository@commit:path it was taken from
    imports: dict[str, str]  # original import line -> the line that replaces it
    args: Callable[[Path], list[str]]  # its command-line arguments, given the working folder
    data: Callable[[Path], None]  # writes the stand-in for its download into the working folder
    requires: tuple[str, ...] = field(default=())  # modules that must import, else it is skipped
    env: dict[str, str] = field(default_factory=dict)  # its own variables (TF_USE_LEGACY_KERAS for tf_keras)

    def path(self) -> Path:
        return UPSTREAM / self.source


@dataclass(frozen=True)
class ExampleOutcome:
    returncode: int
    output: str

    @property
    def accuracy(self) -> float | None:
        """The test accuracy the script printed (``Test accuracy: 0.97``), or None."""
        found = re.findall(r"^Test accuracy:\s*([0-9.]+)", self.output, flags=re.MULTILINE)
        return float(found[-1]) if found else None


def mnist_stand_in(path: Path, rows: int = 4000, seed: int = 0) -> None:
    """A learnable stand-in for libsvm's ``mnist.bz2`` (784 integer pixels in 0-255 as in the original, labels
    0-9), written to `path`: each class lights a 7x7 block of its own place on the 28x28 grid (each pixel of it
    on with probability 0.8) over 40 pixels of noise, so a small convolutional net tells the classes apart."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, MNIST_CLASSES, rows)
    lines = []
    for label in labels:
        image = np.zeros((28, 28), dtype=np.int64)
        top, left = 2 + 8 * (label // 4), 2 + 6 * (label % 4)
        image[top : top + 7, left : left + 7] = (rng.random((7, 7)) < 0.8) * rng.integers(128, 256, (7, 7))
        pixels = image.reshape(-1)
        noise = rng.integers(0, MNIST_PIXELS, 40)
        pixels[noise] = np.maximum(pixels[noise], rng.integers(1, 256, 40))
        lines.append(f"{label} " + " ".join(f"{i + 1}:{pixels[i]}" for i in np.flatnonzero(pixels)))
    path.write_bytes(bz2.compress(("\n".join(lines) + "\n").encode()))


def run_example(example: Example, workdir: Path) -> ExampleOutcome:
    """The example, rewritten, run as a script in a fresh interpreter from the working folder."""
    target = workdir / Path(example.source).name
    target.write_text(rewrite(example.path().read_text(), example.imports))
    example.data(workdir)
    env = {
        **os.environ,
        # the script's folder too, as when it runs from its own: the classes it defines (a model pickled by
        # reference) import in the ranks and in Spark's workers
        "PYTHONPATH": os.pathsep.join(
            [str(REPO), str(workdir), *filter(None, [os.environ.get("PYTHONPATH")])]
        ),
        "PYSPARK_PYTHON": sys.executable,
        "MLFLOW_TRACKING_URI": f"sqlite:///{workdir}/mlflow.db",  # estimators track by default: not in REPO
    }
    env.pop("TF_USE_LEGACY_KERAS", None)  # Keras 3 unless the example asks for tf_keras
    env.update(example.env)
    done = subprocess.run(
        [sys.executable, str(target), *example.args(workdir)],
        cwd=workdir,
        env=env,
        capture_output=True,
        text=True,
        timeout=_EXAMPLE_TIMEOUT_S,
    )
    return ExampleOutcome(done.returncode, done.stdout + done.stderr)


def _mnist_args(workdir: Path) -> list[str]:
    """Its own flags: two ranks on local[2], its store and data folders; its default batch size (128) and epochs
    (12: with 4 it printed 0.89 once, its split being unseeded)."""
    return ["--num-proc", "2", "--work-dir", str(workdir / "store"), "--data-dir", str(workdir / "data")]


def _keras_mnist_args(workdir: Path) -> list[str]:
    """Its own flags: two ranks on local[2], 2 epochs of batches of 32 (enough on the stand-in), its folders."""
    return ["--num-proc", "2", "--epochs", "2", "--batch-size", "32", *_mnist_args(workdir)[2:]]


def _mnist_into(workdir: Path) -> None:
    (workdir / "data").mkdir(exist_ok=True)
    mnist_stand_in(workdir / "data" / "mnist.bz2")


EXAMPLES = [
    Example(
        name="Horovod pytorch_spark_mnist",
        source="horovod/examples/spark/pytorch/pytorch_spark_mnist.py",
        origin="horovod/horovod@v0.28.1:examples/spark/pytorch/pytorch_spark_mnist.py",
        imports={"import horovod.spark.torch as hvd": "import sparkrunner.compat.horovod_spark as hvd"},
        args=_mnist_args,
        data=_mnist_into,
        # it imports Horovod's own Store and SparkBackend (horovod.spark), which the drop-in accepts
        requires=("horovod.spark", "torch"),
    ),
    *(
        Example(
            name=f"Horovod keras_spark_mnist ({keras})",
            source="horovod/examples/spark/keras/keras_spark_mnist.py",
            origin="horovod/horovod@v0.28.1:examples/spark/keras/keras_spark_mnist.py",
            imports={"import horovod.spark.keras as hvd": "import sparkrunner.compat.horovod_spark as hvd"},
            args=_keras_mnist_args,
            data=_mnist_into,
            # Horovod's Store and SparkBackend; its TensorBoard callback writes through tensorboard
            requires=("horovod.spark", "tensorflow", "tensorboard"),
            env=env,
        )
        for keras, env in (("Keras 3", {}), ("tf_keras", {"TF_USE_LEGACY_KERAS": "1"}))
    ),
]
