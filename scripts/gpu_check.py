"""The GPU check behind scripts/gpu_check.sh: real GPUs, real Spark GPU scheduling, NCCL, scoring and TF on the GPU.

One local-cluster worker owns up to 2 of this machine's GPUs (found by an nvidia-smi discovery script) and
runs one task per GPU: several GPU tasks on one host. Each rank picks its GPU with the tutorials' idiom,
`set_device(LOCAL_RANK)`, and reports the GPU it computes on (by UUID, from torch) and the GPUs Spark gave its
task (by index, mapped to UUIDs with nvidia-smi here): they must match, and no two ranks may share one.
`ScoringModel.transform` must score on its task's GPU, with the CPU's results; `TorchEstimator` and
`LightningEstimator` must train on the task's GPU and learn the generating function. TensorFlow's part is skipped
(and says so) where no TensorFlow is installed.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import tempfile
from typing import Any, Literal


def gpu_uuids() -> dict[str, str]:
    """index -> UUID of every GPU on this machine, from nvidia-smi."""
    out = subprocess.run(
        ["nvidia-smi", "--query-gpu=index,uuid", "--format=csv,noheader"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return dict(line.split(", ") for line in out.strip().splitlines())


def torch_ddp_nccl() -> list[dict[str, Any]]:
    """Every rank: set_device(LOCAL_RANK), a DDP step over NCCL; rank 0 returns every rank's view."""
    import os

    import torch
    import torch.distributed as dist

    assert torch.cuda.is_available(), "torch sees no GPU (a CPU-only torch build?)"
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)  # the idiom every GPU tutorial starts with
    dist.init_process_group("nccl")
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 1).cuda(), device_ids=[local_rank])
    loss = model(torch.ones(8, 4, device="cuda")).sum()
    loss.backward()
    total = torch.ones(1, device="cuda")
    dist.all_reduce(total)
    view = {
        "rank": dist.get_rank(),
        "visible": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "task_gpus": os.environ.get("SPARKRUNNER_TASK_GPUS"),
        "device_count": torch.cuda.device_count(),
        "uuid": "GPU-" + str(torch.cuda.get_device_properties(local_rank).uuid),
        "allreduce": float(total.item()),
    }
    views: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(views, view)
    dist.destroy_process_group()
    return views


def tf_mwms_fit() -> dict[str, Any]:
    """Every rank: a Keras fit under MultiWorkerMirroredStrategy with NCCL collectives on its GPU."""
    import json
    import os

    import numpy as np
    import tensorflow as tf

    gpus = tf.config.list_physical_devices("GPU")
    local_rank = int(os.environ["LOCAL_RANK"])
    assert len(gpus) > local_rank, f"TensorFlow sees {len(gpus)} GPUs, none at LOCAL_RANK (a CPU-only build?)"
    tf.config.set_visible_devices(gpus[local_rank], "GPU")  # every rank sees its host's GPUs: keep its own
    options = tf.distribute.experimental.CommunicationOptions(
        implementation=tf.distribute.experimental.CommunicationImplementation.NCCL
    )
    strategy = tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)
    x = np.random.default_rng(0).normal(size=(256, 4)).astype("float32")
    y = x.sum(axis=1, keepdims=True)
    with strategy.scope():
        model = tf.keras.Sequential([tf.keras.Input(shape=(4,)), tf.keras.layers.Dense(1)])
        model.compile(optimizer=tf.keras.optimizers.SGD(0.05), loss="mse")
    history = model.fit(x, y, batch_size=32, epochs=3, verbose=0)
    device = model.layers[0].kernel.device
    return {
        "rank": json.loads(os.environ["TF_CONFIG"])["task"]["index"],
        "device": device,
        "loss": [float(v) for v in history.history["loss"]],
    }


class DeviceReportingLinear:
    """Builds, in each process, a torch Linear whose first forward pass writes the device and GPU UUID it computes
    on to a file named by the process's pid: the check's own record of where training and scoring ran."""

    def __init__(self, report_dir: str) -> None:
        self.report_dir = report_dir

    def __call__(self) -> Any:
        import torch

        report_dir = self.report_dir

        class Reporting(torch.nn.Linear):  # pickled by value with the estimators' models
            def forward(self, x: Any) -> Any:
                uuid = "GPU-" + str(torch.cuda.get_device_properties(x.device).uuid) if x.is_cuda else "cpu"
                try:  # the process's first forward pass: a training or scoring step (not a later probe)
                    with open(os.path.join(report_dir, str(os.getpid())), "x") as f:
                        f.write(f"{x.device} {uuid}")
                except FileExistsError:
                    pass
                return super().forward(x)

        torch.manual_seed(0)
        return Reporting(4, 1)


def score_on_task_gpus(spark: Any, uuids: dict[str, str], report_dir: str) -> dict[str, Any]:
    """`ScoringModel.transform` on a GPU stage: every scoring worker computes on a GPU, with the CPU's results."""
    import numpy as np

    from sparkrunner.ml import ScoringModel

    rows = [([float(i), float(i % 7), 1.0, -float(i) / 3],) for i in range(4096)]
    df = spark.createDataFrame(rows, "x array<float>").repartition(4)
    builder = DeviceReportingLinear(report_dir)
    scored: Any = ScoringModel(builder=builder, feature_cols=["x"], batch_size=256).transform(df).toPandas()
    on_cpu = builder()
    x = np.array(scored["x"].tolist(), dtype=np.float32)
    expected = x @ on_cpu.weight.detach().numpy().T + on_cpu.bias.detach().numpy()
    assert np.allclose(scored["prediction"].to_numpy(), expected[:, 0], atol=1e-3), (
        "GPU scores differ from CPU's"
    )
    reports = {}
    for name in os.listdir(report_dir):
        with open(os.path.join(report_dir, name)) as f:
            reports[name] = f.read()
    assert reports, "no scoring worker reported its device"
    for pid, report in reports.items():
        device, uuid = report.split()
        assert device.startswith("cuda:"), f"worker {pid} scored on {device}, not a GPU"
        assert uuid == uuids[device.split(":")[1]], (
            f"worker {pid} computed on {uuid}, not its task's {device}"
        )
    return {"rows": len(scored), "workers": reports}


WEIGHTS = (2.0, -1.0, 0.5, 3.0)
BIAS = 0.5


def linear_frame(spark: Any) -> Any:
    """x: array<float>[4] uniform in [0, 1), y = x . WEIGHTS + BIAS."""
    from pyspark.sql import functions as F

    xs = [F.rand(i).cast("float") for i in range(4)]
    frame = spark.range(0, 2048, numPartitions=4).select(F.array(*xs).alias("x"))
    y = sum((F.col("x")[i] * w for i, w in enumerate(WEIGHTS)), F.lit(BIAS))
    return frame.withColumn("y", y.cast("double"))


def lightning_regression(report_dir: str) -> Any:
    """A LightningModule around the reporting Linear (so its training steps say where they ran)."""
    import pytorch_lightning as pl
    import torch

    class Regression(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.layer = DeviceReportingLinear(report_dir)()

        def forward(self, x: Any) -> Any:
            return self.layer(x)

        def training_step(self, batch: Any, _: int) -> Any:
            return torch.nn.functional.mse_loss(self(batch["x"]), batch["y"])

        def configure_optimizers(self) -> Any:
            return torch.optim.Adam(self.parameters(), lr=0.05)

    return Regression()


def fit_on_task_gpus(spark: Any, uuids: dict[str, str], workdir: str, np_: int) -> dict[str, Any]:
    """TorchEstimator and LightningEstimator (launcher direct) train on the task GPUs and learn the function."""
    import numpy as np
    import torch

    from sparkrunner.ml import LightningEstimator, TorchEstimator

    frame = linear_frame(spark)
    common: dict[str, Any] = dict(
        feature_cols=["x"], label_cols=["y"], batch_size=64, epochs=15, np=np_, launcher="direct",
        store=os.path.join(workdir, "store"), tracking=False, verbose=0,
    )  # fmt: skip
    results = {}
    for name in ("torch", "lightning"):
        report_dir = os.path.join(workdir, f"fit-{name}")
        os.mkdir(report_dir)
        if name == "torch":
            net = DeviceReportingLinear(report_dir)()
            optimizer = torch.optim.Adam(net.parameters(), lr=0.05)
            model = TorchEstimator(model=net, optimizer=optimizer, loss="mse", **common).fit(frame)
            layer = model.getModel()
        else:
            model = LightningEstimator(model=lightning_regression(report_dir), **common).fit(frame)
            layer = model.getModel().layer
        learned = layer.weight.detach().cpu().numpy()[0]
        assert np.allclose(learned, WEIGHTS, atol=0.15), f"{name}: learned {learned}, not {WEIGHTS}"
        results[name] = {"weights": learned.round(3).tolist(), "devices": check_reports(report_dir, uuids)}
    return results


def check_reports(report_dir: str, uuids: dict[str, str]) -> dict[str, str]:
    """Every process that reported computed on a GPU, the one its task was given."""
    reports = {}
    for name in os.listdir(report_dir):
        with open(os.path.join(report_dir, name)) as f:
            reports[name] = f.read()
    reports.pop(
        str(os.getpid()), None
    )  # the driver's own forward passes (on its CPU) are not the check's subject
    print(f"gpu_check: devices reported in {os.path.basename(report_dir)}: {reports}")
    assert reports, f"no process reported its device in {report_dir}"
    for pid, report in reports.items():
        device, uuid = report.split()
        assert device.startswith("cuda:"), f"process {pid} computed on {device}, not a GPU"
        assert uuid == uuids[device.split(":")[1]], (
            f"process {pid} computed on {uuid}, not its task's {device}"
        )
    return reports


def check_torch_views(views: list[dict[str, Any]], uuids: dict[str, str]) -> None:
    for view in views:
        assigned = view["task_gpus"]
        assert assigned and "," not in assigned, (
            f"rank {view['rank']}: Spark assigned {assigned!r}, expected one"
        )
        visible = view["visible"].split(",")
        assert len(visible) == len(views) and assigned in visible, (
            f"rank {view['rank']} sees {view['visible']!r}: expected the host's {len(views)} task GPUs"
        )
        assert view["device_count"] == len(views), f"rank {view['rank']} sees {view['device_count']} GPUs"
        assert view["uuid"] == uuids[assigned], (
            f"rank {view['rank']} computes on {view['uuid']}, not GPU {assigned}"
        )
        assert view["allreduce"] == len(views), f"NCCL all_reduce gave {view['allreduce']}"
    used = [view["uuid"] for view in views]
    assert len(set(used)) == len(used), f"two ranks share a GPU: {used}"


def launchers() -> list[Literal["direct", "mpirun"]]:
    """direct always; mpirun too where it can run (Open MPI and Horovod built with MPI)."""
    from sparkrunner.driver.launcher_choice import resolve_launcher
    from sparkrunner.errors import LauncherUnavailableError

    try:
        resolve_launcher("mpirun").check_available()
    except LauncherUnavailableError as exc:
        print(f"gpu_check: launcher=mpirun skipped: {exc}")
        return ["direct"]
    return ["direct", "mpirun"]


def main() -> int:
    from bench.spark_session import gpu_conf, quiet_session
    from sparkrunner import Runner

    uuids = gpu_uuids()
    np_ = min(2, len(uuids))
    with tempfile.TemporaryDirectory(prefix="sparkrunner-gpu-check-") as tmp:
        spark = quiet_session(f"local-cluster[1,{np_},2048]", **gpu_conf(tmp, np_))  # one task per GPU
        try:
            for launcher in launchers():
                views = Runner(np=np_, launcher=launcher, use_gpu=True, tracking=False).run(torch_ddp_nccl)
                check_torch_views(views, uuids)
                print(f"gpu_check: torch DDP over NCCL OK (launcher={launcher}):", json.dumps(views))
            report_dir = os.path.join(tmp, "scoring")
            os.mkdir(report_dir)
            print(
                "gpu_check: ScoringModel.transform on the task GPUs OK:",
                json.dumps(score_on_task_gpus(spark, uuids, report_dir)),
            )
            fits = fit_on_task_gpus(spark, uuids, tmp, np_)
            print(
                "gpu_check: TorchEstimator and LightningEstimator fit on the task GPUs OK:", json.dumps(fits)
            )
            if importlib.util.find_spec("tensorflow") is None:
                print("gpu_check: TensorFlow SKIPPED - not installed here")
            else:
                fit = Runner(np=np_, launcher="direct", use_gpu=True, tracking=False).run(tf_mwms_fit)
                assert "GPU" in fit["device"], f"TensorFlow trained on {fit['device']}, not a GPU"
                print("gpu_check: TensorFlow MultiWorkerMirroredStrategy fit on GPU OK:", json.dumps(fit))
        finally:
            spark.stop()
    print(f"gpu_check: PASSED on {np_} GPU(s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
