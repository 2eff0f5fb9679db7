#!/usr/bin/env bash
# Fetch the originals' test files that tests/compat/test_upstream_suites.py runs against the drop-ins, at the
# commits tests/compat/upstream.py names, into $SPARKRUNNER_UPSTREAM_TESTS (they stay out of this repository).
set -euo pipefail
dest="${SPARKRUNNER_UPSTREAM_TESTS:-$HOME/.cache/sparkrunner/upstream-tests}"
raw=https://raw.githubusercontent.com
fetch() { mkdir -p "$(dirname "$dest/$1")"; curl -fsSL "$raw/$2" -o "$dest/$1"; }
fetch pyspark/test_distributor.py \
  apache/spark/c9d9a1059ff8e06106fabc6599bb0cb61b8c95d5/python/pyspark/ml/torch/tests/test_distributor.py
fetch pyspark/test_deepspeed_distributor.py \
  apache/spark/103a23263b3307f6fd40fc005e87cd505955a9cc/python/pyspark/ml/deepspeed/tests/test_deepspeed_distributor.py
fetch spark-tensorflow-distributor/test_mirrored_strategy_runner.py \
  tensorflow/ecosystem/c39378894bf080843a86edacd0176c53f70d939f/spark/spark-tensorflow-distributor/tests/integration/test_mirrored_strategy_runner.py
# Horovod's own suite (tests/frameworks/horovod/test_horovod_upstream.py): not in Horovod's sdist, which ships no test/ folder
fetch horovod/test_torch.py horovod/horovod/v0.28.1/test/parallel/test_torch.py
fetch horovod/common.py horovod/horovod/v0.28.1/test/utils/common.py
# Horovod's estimator suites (tests/compat/upstream.py), with the helpers they import from test/utils
for f in test_spark_torch test_spark_lightning test_spark_keras; do
  fetch "horovod/integration/$f.py" "horovod/horovod/v0.28.1/test/integration/$f.py"
done
fetch horovod/integration/spark_common.py horovod/horovod/v0.28.1/test/utils/spark_common.py
fetch horovod/integration/common.py horovod/horovod/v0.28.1/test/utils/common.py
# Horovod's own Spark examples (tests/compat/upstream_examples.py), run with one import line changed
fetch horovod/examples/spark/pytorch/pytorch_spark_mnist.py \
  horovod/horovod/v0.28.1/examples/spark/pytorch/pytorch_spark_mnist.py
fetch horovod/examples/spark/pytorch/pytorch_lightning_spark_mnist.py \
  horovod/horovod/v0.28.1/examples/spark/pytorch/pytorch_lightning_spark_mnist.py
fetch horovod/examples/spark/keras/keras_spark_mnist.py \
  horovod/horovod/v0.28.1/examples/spark/keras/keras_spark_mnist.py
fetch horovod/examples/spark/keras/keras_spark_rossmann_estimator.py \
  horovod/horovod/v0.28.1/examples/spark/keras/keras_spark_rossmann_estimator.py
# TensorFlow's "Multi-worker training with Keras" tutorial (tests/compat/upstream_examples.py: its mnist_setup.py
# and main.py cells); pyspark's TorchDistributor docstring examples come from the installed pyspark
fetch tensorflow-docs/multi_worker_with_keras.ipynb \
  tensorflow/docs/7c3650212740204359d4ceae481abc79345541be/site/en/tutorials/distribute/multi_worker_with_keras.ipynb
echo "upstream test files in $dest"
