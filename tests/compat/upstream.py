"""The originals' own test files, run against the drop-ins with only their import lines changed.

The files are not part of this repository (their licences and text stay theirs): put them under
``$SPARKRUNNER_UPSTREAM_TESTS`` (default ``~/.cache/sparkrunner/upstream-tests``) as named in `SUITES`
(`scripts/fetch_upstream_tests.sh` fetches them at the pinned commits). Each suite lists the tests that check
public behaviour (run, must pass) and the tests left out, with why: they call private internals, download a
data set, or check something this drop-in does differently on purpose (docs/migrating.md).
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
UPSTREAM = Path(
    os.environ.get("SPARKRUNNER_UPSTREAM_TESTS", "~/.cache/sparkrunner/upstream-tests")
).expanduser()
_SUITE_TIMEOUT_S = 1800


@dataclass(frozen=True)
class Suite:
    """One original test file: where it lives, the import lines replaced, what runs and what is left out."""

    name: str
    source: str  # under UPSTREAM
    origin: str  # repository@commit:path it was taken from
    imports: dict[str, str]  # original import line -> the line that replaces it
    public: tuple[str, ...]  # pytest node ids (relative to the file) or -k expressions, "k:" prefixed
    left_out: dict[str, str]  # test -> why
    conftest: str | None = None  # a module of ours copied next to the file as conftest.py
    requires: tuple[str, ...] = field(default=())  # modules that must import, else the suite is skipped
    beside: tuple[str, ...] = field(default=())  # the original's helper modules (under UPSTREAM) it imports

    def path(self) -> Path:
        return UPSTREAM / self.source


@dataclass(frozen=True)
class Outcome:
    """Counts from the suite's JUnit report."""

    ran: int
    passed: int
    failed: int
    skipped: int
    output: str


def skip_reason(name: str, path: Path, requires: tuple[str, ...]) -> str | None:
    """Why an original file cannot run here (opt-in not given, file not fetched, a module missing), or None."""
    if "SPARKRUNNER_UPSTREAM_TESTS" not in os.environ:
        return "opt-in (minutes): SPARKRUNNER_UPSTREAM_TESTS=~/.cache/sparkrunner/upstream-tests pytest ..."
    if not path.exists():
        return f"the original file is not at {path} (scripts/fetch_upstream_tests.sh)"
    missing = [m for m in requires if importlib.util.find_spec(m) is None]
    return f"{name} needs {', '.join(missing)}" if missing else None


def rewrite(source: str, imports: dict[str, str]) -> str:
    """The file with each listed import line replaced; every listed line must be there exactly once."""
    for old, new in imports.items():
        count = len(re.findall(rf"^{re.escape(old)}$", source, flags=re.MULTILINE))
        if count != 1:
            raise ValueError(
                f"expected the import line {old!r} once in the original file, found it {count} times"
            )
        source = re.sub(rf"^{re.escape(old)}$", new, source, flags=re.MULTILINE)
    return source


def run_suite(suite: Suite, workdir: Path) -> Outcome:
    """Run the suite's public tests, one fresh interpreter per test class (each class makes and stops its own
    SparkContext, which one process cannot always do twice)."""
    target = workdir / Path(suite.source).name
    target.write_text(rewrite(suite.path().read_text(), suite.imports))
    (workdir / "pytest.ini").write_text("[pytest]\n")
    if suite.conftest:
        (workdir / "conftest.py").write_text((REPO / suite.conftest).read_text())
    for helper in suite.beside:
        (workdir / Path(helper).name).write_text((UPSTREAM / helper).read_text())
    outcomes = [_run_group(target, workdir, n, group) for n, group in enumerate(_groups(suite.public))]
    return Outcome(
        sum(o.ran for o in outcomes),
        sum(o.passed for o in outcomes),
        sum(o.failed for o in outcomes),
        sum(o.skipped for o in outcomes),
        "\n".join(o.output for o in outcomes),
    )


def _groups(public: tuple[str, ...]) -> list[list[str]]:
    """Node ids grouped by test class; all -k expressions together."""
    groups: dict[str, list[str]] = {}
    for test in public:
        groups.setdefault("k:" if test.startswith("k:") else test.split("::")[0], []).append(test)
    return list(groups.values())


def _run_group(target: Path, workdir: Path, number: int, tests: list[str]) -> Outcome:
    report = workdir / f"report{number}.xml"
    command = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        f"--rootdir={workdir}",
        "-c",
        str(workdir / "pytest.ini"),
        f"--junitxml={report}",
    ]
    if tests[0].startswith("k:"):
        command += [str(target), "-k", " or ".join(t[2:] for t in tests)]
    else:
        command += [f"{target}::{t}" for t in tests]
    env = {
        **os.environ,
        # the file's folder too, as when the original runs from its own folder: the classes it defines (a model
        # pickled by reference) import in the ranks and Spark's workers
        "PYTHONPATH": os.pathsep.join([str(REPO), str(workdir)]),
        "PYSPARK_PYTHON": sys.executable,
        "MLFLOW_TRACKING_URI": f"sqlite:///{workdir}/mlflow.db",  # estimators track by default: not in REPO
    }
    done = subprocess.run(
        command, cwd=REPO, env=env, capture_output=True, text=True, timeout=_SUITE_TIMEOUT_S
    )
    return _outcome(report, done.stdout + done.stderr)


def _outcome(report: Path, output: str) -> Outcome:
    if not report.exists():
        return Outcome(0, 0, 0, 0, output)
    root = ET.parse(report).getroot()
    suite = root if root.tag == "testsuite" else root.find("testsuite")
    assert suite is not None
    ran, failed = int(suite.get("tests", 0)), int(suite.get("failures", 0)) + int(suite.get("errors", 0))
    skipped = int(suite.get("skipped", 0))
    return Outcome(ran, ran - failed - skipped, failed, skipped, output)


_PRIVATE = "calls a private internal of the original ({})"
_HOROVOD_INTERNAL = "tests Horovod's own {} (imported from horovod itself), not the drop-in"
_ELASTIC = (
    'in the suite "Horovod run_elastic" (the same file, horovod.spark.run_elastic being the drop-in\'s)'
)
_ESTIMATOR = 'in the suite "Horovod TorchEstimator" (the same file)'
_DROP_IN_RUN_ELASTIC = """import horovod
import horovod.spark
from sparkrunner.compat import horovod_spark as _drop_in
horovod.spark.run_elastic = _drop_in.run_elastic  # the cases call it by Horovod's full name"""
"""How Horovod's run_elastic cases reach the drop-in: they call ``horovod.spark.run_elastic`` by its full name, so
the line that imports ``horovod`` also puts the drop-in's function under that name."""
_MNIST = "downloads MNIST with torchvision (nothing may be downloaded from a data hub here)"

SUITES = [
    Suite(
        name="pyspark TorchDistributor",
        source="pyspark/test_distributor.py",
        origin="apache/spark@c9d9a1059ff8e06106fabc6599bb0cb61b8c95d5:python/pyspark/ml/torch/tests/test_distributor.py",
        imports={
            "from pyspark.ml.torch.distributor import TorchDistributor, get_gpus_owned": (
                "from sparkrunner.compat import TorchDistributor"
            ),
            # pyspark 4.3 no longer exports it
            "from pyspark.testing.utils import SPARK_HOME": "from tests.compat.upstream_support import SPARK_HOME",
        },
        public=(
            "TorchDistributorBaselineUnitTests::test_validate_correct_inputs",
            "TorchDistributorBaselineUnitTests::test_validate_incorrect_inputs",
            "TorchDistributorBaselineUnitTests::test_get_num_tasks_fails",
        ),
        left_out={
            "test_encryption_passes": _PRIVATE.format("_check_encryption"),
            "test_encryption_fails": _PRIVATE.format("_check_encryption"),
            "test_execute_command": _PRIVATE.format("_execute_command"),
            "test_create_torchrun_command": _PRIVATE.format("_create_torchrun_command"),
            "test_get_num_tasks_locally": _PRIVATE.format("_get_num_tasks"),
            "test_get_gpus_owned_local": _PRIVATE.format("get_gpus_owned"),
            "test_local_training_succeeds": _PRIVATE.format("_run_local_training"),
            "test_dist_training_succeeds": _PRIVATE.format("_run_distributed_training"),
            "test_get_num_tasks_distributed": _PRIVATE.format("_get_num_tasks"),
            "test_clean_and_terminate": _PRIVATE.format("torch_run_process_wrapper"),
            "test_check_parent_alive": _PRIVATE.format("torch_run_process_wrapper"),
            "test_local_file_with_pytorch": _MNIST
            + "; and it needs Spark's source tree (python/test_support)",
            "test_distributed_file_with_pytorch": _MNIST
            + "; and it needs Spark's source tree (python/test_support)",
            "test_end_to_end_run_locally": _MNIST,
            "test_end_to_end_run_distributedly": _MNIST,
        },
        requires=("torch", "six"),
    ),
    Suite(
        name="pyspark DeepspeedTorchDistributor",
        source="pyspark/test_deepspeed_distributor.py",
        origin=(
            "apache/spark@103a23263b3307f6fd40fc005e87cd505955a9cc:"
            "python/pyspark/ml/deepspeed/tests/test_deepspeed_distributor.py"
        ),
        imports={
            "from pyspark.ml.deepspeed.deepspeed_distributor import DeepspeedTorchDistributor": (
                "from sparkrunner.compat import DeepspeedTorchDistributor"
            ),
            # helpers of a newer test_distributor.py than the one stored: stand-ins of ours
            "from pyspark.ml.torch.tests.test_distributor import get_local_mode_conf, set_up_test_dirs, "
            "get_distributed_mode_conf": (
                "from tests.compat.upstream_support import get_local_mode_conf, set_up_test_dirs, "
                "get_distributed_mode_conf"
            ),
        },
        public=(
            "DeepspeedTorchDistributorDistributedEndToEnd::test_simple_function_e2e",
            "DeepspeedTorchDistributorDistributedEndToEnd::test_pytorch_file_e2e",
            "DeepspeedDistributorLocalEndToEndTests::test_simple_function_e2e",
            "DeepspeedDistributorLocalEndToEndTests::test_pytorch_file_e2e",
        ),
        left_out={
            "test_get_torchrun_args_local": _PRIVATE.format("_get_torchrun_args"),
            "test_get_torchrun_args_distributed": _PRIVATE.format("_get_torchrun_args"),
            "test_create_torchrun_command_local": _PRIVATE.format("_create_torchrun_command"),
            "test_create_torchrun_command_distributed": _PRIVATE.format("_create_torchrun_command"),
        },
        requires=("torch", "deepspeed"),
    ),
    Suite(
        name="spark-tensorflow-distributor MirroredStrategyRunner",
        source="spark-tensorflow-distributor/test_mirrored_strategy_runner.py",
        origin=(
            "tensorflow/ecosystem@c39378894bf080843a86edacd0176c53f70d939f:"
            "spark/spark-tensorflow-distributor/tests/integration/test_mirrored_strategy_runner.py"
        ),
        imports={
            "from spark_tensorflow_distributor import MirroredStrategyRunner": (
                "from sparkrunner.compat import MirroredStrategyRunner"
            ),
        },
        public=(
            "k:test_equal_gpu_allocation",
            "k:test_zero_num_slots",
            "k:test_local_run",
            "k:test_run_on_ssl_cluster",
            "k:test_cpu_training_with_gpus",
            "k:test_spark_task_cuda_devices_env_support",
        ),
        left_out={},
        conftest="tests/compat/upstream_tf_conftest.py",
        requires=("tensorflow",),
    ),
    Suite(
        name="Horovod TorchEstimator",
        source="horovod/integration/test_spark_torch.py",
        origin="horovod/horovod@v0.28.1:test/integration/test_spark_torch.py",
        imports={
            "import horovod.spark.torch as hvd_spark": (
                "from sparkrunner.compat import horovod_spark as hvd_spark"
            ),
        },
        public=(
            "SparkTorchTests::test_fit_model",
            "SparkTorchTests::test_transform_multi_class",
        ),
        left_out={
            "test_restore_from_checkpoint": _PRIVATE.format(
                "the estimator's _load_checkpoint, wrapped in a mock"
            )
            + "; and it expects Horovod's checkpoint in the Store under run_id, where sparkrunner "
            "checkpoints into checkpoint_dir",
            "test_fit_model_nvtabular": "needs NVTabular (data_module=NVTabularDataModule, refused by the "
            "drop-in); the original skips it without NVTabular too",
            "test_torch_direct_parquet_train": _HOROVOD_INTERNAL.format(
                "remote.RemoteTrainer over Petastorm"
            ),
            "test_happy_run_elastic": _ELASTIC,
            "test_happy_run_elastic_fault_tolerant": _ELASTIC,
            "test_happy_run_elastic_fault_tolerant_fails": "skipped by the original itself",
            "test_pytorch_get_optimizer_with_unscaled_lr": _HOROVOD_INTERNAL.format("remote module"),
            "test_metric_class": _HOROVOD_INTERNAL.format("remote module"),
            "test_construct_metric_value_holders_one_metric_for_all_labels": _HOROVOD_INTERNAL.format(
                "remote module"
            ),
            "test_prepare_np_data": _HOROVOD_INTERNAL.format("spark.common.util"),
            "test_get_metric_avgs": _HOROVOD_INTERNAL.format("remote module"),
            "test_update_metrics": _HOROVOD_INTERNAL.format("remote module"),
            "test_torch_param_serialize": _HOROVOD_INTERNAL.format("_torch_param_serialize"),
            "test_calculate_loss_with_sample_weight": _HOROVOD_INTERNAL.format("remote module"),
            "test_calculate_loss_without_sample_weight": _HOROVOD_INTERNAL.format("remote module"),
        },
        beside=("horovod/integration/common.py", "horovod/integration/spark_common.py"),
        # the file imports Horovod's estimator internals at the top: Horovod's torch extension and tensorboard
        requires=("horovod.torch", "tensorboard", "mock"),
    ),
]
_TORCH = SUITES[-1]
SUITES.append(
    Suite(
        name="Horovod run_elastic",
        source=_TORCH.source,
        origin=_TORCH.origin,
        imports={**_TORCH.imports, "import horovod": _DROP_IN_RUN_ELASTIC},
        public=(
            "SparkTorchTests::test_happy_run_elastic",
            "SparkTorchTests::test_happy_run_elastic_fault_tolerant",
        ),
        left_out={
            **{test: _ESTIMATOR for test in (*_TORCH.public, *_TORCH.left_out) if "run_elastic" not in test},
            "test_happy_run_elastic_fault_tolerant_fails": "skipped by the original itself (Horovod's elastic "
            "driver cannot be shut down from the Spark driver while it waits for hosts)",
        },
        beside=_TORCH.beside,
        requires=_TORCH.requires,
    )
)
