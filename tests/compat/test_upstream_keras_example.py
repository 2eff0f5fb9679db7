"""Horovod v0.28.1's own ``examples/spark/keras/keras_spark_mnist.py``, with only its import line changed to the
drop-in, trains on sparkrunner's ranks (its own ``local[2]`` session, ``num_proc=2``: a Spark barrier stage,
launcher "direct", the drop-in's default) and prints a test accuracy above 0.9 on a local MNIST stand-in
(`tests.compat.mnist_standin`), with Keras 3 (``from tensorflow import keras`` on TensorFlow 2.21) and with
tf_keras (``TF_USE_LEGACY_KERAS=1``). The example stays out of this repository: `scripts/fetch_upstream_tests.sh`
puts it under ``$SPARKRUNNER_UPSTREAM_TESTS`` (opt-in, as tests/compat/test_upstream_suites.py)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.compat.mnist_standin import write_mnist_standin
from tests.compat.upstream import REPO, UPSTREAM, rewrite

pytestmark = [pytest.mark.slow, pytest.mark.spark]

EXAMPLE = "horovod/examples/keras_spark_mnist.py"  # horovod/horovod@v0.28.1:examples/spark/keras/keras_spark_mnist.py
IMPORTS = {"import horovod.spark.keras as hvd": "from sparkrunner.compat import horovod_spark as hvd"}
_TIMEOUT_S = 900


@pytest.mark.parametrize("legacy", [False, True], ids=["keras3", "tf_keras"])
def test_horovods_keras_spark_mnist_example_learns_through_the_drop_in(tmp_path: Path, legacy: bool) -> None:
    if "SPARKRUNNER_UPSTREAM_TESTS" not in os.environ:
        pytest.skip("opt-in: SPARKRUNNER_UPSTREAM_TESTS=~/.cache/sparkrunner/upstream-tests pytest ...")
    source = UPSTREAM / EXAMPLE
    if not source.exists():
        pytest.skip(f"the original example is not at {source} (scripts/fetch_upstream_tests.sh)")
    pytest.importorskip("horovod.spark.common.store")  # the example imports Horovod's Store and SparkBackend
    pytest.importorskip("tensorboard")  # its TensorBoard callback writes through tf.summary
    script = tmp_path / "keras_spark_mnist.py"
    script.write_text(rewrite(source.read_text(), IMPORTS))
    write_mnist_standin(tmp_path)
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "PYSPARK_PYTHON": sys.executable,
        "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path}/mlflow.db",
    }
    env.pop("TF_USE_LEGACY_KERAS", None)
    if legacy:
        env["TF_USE_LEGACY_KERAS"] = "1"
    arguments = ["--num-proc", "2", "--epochs", "2", "--batch-size", "32"]
    folders = ["--work-dir", str(tmp_path / "work"), "--data-dir", str(tmp_path)]
    done = subprocess.run(
        [sys.executable, str(script), *arguments, *folders],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=_TIMEOUT_S,
    )  # fmt: skip
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-6000:]
    accuracy = re.search(r"^Test accuracy: ([0-9.]+)$", done.stdout, flags=re.MULTILINE)
    assert accuracy is not None, output[-6000:]
    assert float(accuracy.group(1)) > 0.9, output[-6000:]
