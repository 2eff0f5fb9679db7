"""The chaos soak: `--runs` runs (default 200) of np=2, each with a fault drawn at random, on local-cluster[2,1,1024]
and on the two-host fixture (network namespaces; there a host may also be cut off for a few seconds), both
launchers. Prints each cluster's outcome table (fault x launcher: runs, expected outcome met, max seconds) and
what was left: processes, temp folders, /dev/shm, ports, the driver's threads and RSS. The faults, their expected
outcomes and the checks are tests/scenarios/faults/{chaos,leftovers,soak}.py, which CI's test_soak.py runs too.

With ``--one-driver``: `--ops` mixed operations (default 200) in this one driver process and one Spark
application (local-cluster[2,1,1024]): np=2 runs there and np=-2 runs on this machine, each with a fault drawn as
above and either launcher, estimator fits, scorings of a new model each (`ScoringModel`, reused Python workers)
and a CrossValidator; every `--every` operations it samples what the driver and its processes hold
(bench/footprint.py) and prints the samples and, per quantity, whether it stayed within its bound of the warm-up's
maximum (the warm-up: by default until every kind of operation has run on every launcher, so that every pool,
zygote and cache such an operation starts belongs to it), with its slope per 100 operations.

Run: ``PYTHONPATH=$PWD .venv/bin/python -m bench.soak --runs 40 [--seed 1] [--only local|two-hosts]``, or
``PYTHONPATH=$PWD .venv/bin/python -m bench.soak --one-driver [--ops 200] [--every 10] [--warm-up N]``.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
import traceback
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench import footprint
from bench.spark_session import checkout_on_pythonpath, quiet_session
from tests.helpers import TEST_SESSION_ENV
from tests.matrix import RUNNABLE_LAUNCHERS
from tests.scenarios.cluster.netns_cluster import NetnsCluster, can_create_namespaces
from tests.scenarios.faults.chaos import SPARK_ONLY
from tests.scenarios.faults.leftovers import shm_entries, use_private_temp_dir
from tests.scenarios.faults.soak import SOAK_FAULTS, TWO_HOST_FAULTS, Soak

SESSION_CONF = {
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.executor.memory": "768m",
    "spark.ui.enabled": "false",
}


def soak_on(spark: object, runs: int, seed: int, faults: tuple[str, ...], cluster: object = None) -> Soak:
    """One warm-up run (its pools belong to the baseline), then the soak."""
    soak = Soak(spark, runs, seed, faults, RUNNABLE_LAUNCHERS, cluster)
    soak.one("none", "direct", -1)
    soak.table.clear()
    soak.leftovers.clear()
    soak.run()
    return soak


def local_cluster(runs: int, seed: int) -> Soak:
    spark = quiet_session("local-cluster[2,1,1024]", **SESSION_CONF)
    try:
        return soak_on(spark, runs, seed, SOAK_FAULTS)
    finally:
        spark.stop()


def two_hosts(runs: int, seed: int) -> Soak | None:
    why = can_create_namespaces()
    if why is not None:
        print(f"two-host soak skipped: {why}")
        return None
    cluster = NetnsCluster(hosts=2, slots_per_host=2, variant=7)
    try:
        cluster.start()
        host = {"spark.driver.host": cluster.master_host, "spark.driver.bindAddress": cluster.master_host}
        spark = quiet_session(cluster.url, **{**SESSION_CONF, **host})
        try:
            return soak_on(spark, runs, seed, TWO_HOST_FAULTS, cluster)
        finally:
            spark.stop()
    finally:
        cluster.close()


LOCAL_FAULTS = tuple(fault for fault in SOAK_FAULTS if fault not in SPARK_ONLY)
"""The faults of np=-2 runs: those that need no Spark."""
ROUND = ("cluster",) * 4 + ("local",) * 3 + ("fit", "score", "score")
"""The operations of each round of ten, shuffled; every `CV_EVERY`-th round (the first included) fits a
CrossValidator instead of the one estimator."""
CV_EVERY = 4
SCORED_ROWS = 64
SCORING_WIDTH = 1024
"""Each scored model: Linear(1024, 2048), 8 MB of float32 weights, seeded by its operation's number."""


def kinds(ops: int, draw: random.Random) -> list[str]:
    """The operations' kinds, in rounds of `ROUND`."""
    plan: list[str] = []
    for number in range(-(-ops // len(ROUND))):
        kind = [("cv" if k == "fit" and number % CV_EVERY == 0 else k) for k in ROUND]
        plan += draw.sample(kind, len(kind))
    return plan[:ops]


def fit(spark: Any, launcher: str) -> str | None:
    """One TorchEstimator fit (np=-1, the default store) of a linear model on 256 rows; its transform of 16 rows
    counted (Spark may prune the prediction column from a count: the scorings are `score`'s)."""
    import torch

    from sparkrunner.ml import TorchEstimator
    from tests.ml.nets import linear_rows

    estimator = TorchEstimator(
        model=torch.nn.Linear(3, 1), loss="mse", feature_cols=["x"], label_cols=["y"], batch_size=32, epochs=1,
        np=-1, launcher=launcher, tracking=False, verbose=0,
    )  # fmt: skip
    scored = estimator.fit(linear_rows(spark, 256, partitions=2)).transform(linear_rows(spark, 16, 2, seed=9))
    count = scored.count()
    return None if count == 16 else f"the fitted model scored {count} rows of 16"


def cross_validator(spark: Any, launcher: str) -> str | None:
    """A CrossValidator (2 folds x 2 epochs counts: five fits) over a Pipeline ending in TorchEstimator."""
    from pyspark.ml import Pipeline
    from pyspark.ml.evaluation import MulticlassClassificationEvaluator
    from pyspark.ml.feature import VectorAssembler
    from pyspark.ml.tuning import CrossValidator, ParamGridBuilder

    from sparkrunner.ml import TorchEstimator
    from tests.ml.nets import class_rows, classifier

    estimator = TorchEstimator(
        model=classifier(), loss="cross_entropy", feature_cols=["features"], label_cols=["label"], batch_size=32,
        np=-1, launcher=launcher, tracking=False, verbose=0,
    )  # fmt: skip
    pipeline = Pipeline(stages=[VectorAssembler(inputCols=["a", "b"], outputCol="features"), estimator])
    grid = ParamGridBuilder().addGrid(estimator.epochs, [1, 2]).build()
    evaluator = MulticlassClassificationEvaluator(labelCol="label", metricName="accuracy")
    cv = CrossValidator(estimator=pipeline, estimatorParamMaps=grid, evaluator=evaluator, numFolds=2, seed=3)
    metrics = cv.fit(class_rows(spark, 200)).avgMetrics
    return None if len(metrics) == 2 and all(0 <= m <= 1 for m in metrics) else f"metrics {metrics}"


def _scoring_model(seed: int) -> Callable[[], Any]:
    def build() -> Any:
        import torch

        torch.manual_seed(seed)
        return torch.nn.Linear(SCORING_WIDTH, 2 * SCORING_WIDTH)

    return build


def _row_sums(model: Any, x: Any) -> Any:
    import torch

    with torch.no_grad():
        return model(torch.as_tensor(x, dtype=torch.float32)).sum(dim=1, keepdim=True).numpy()


def score(spark: Any, seed: int) -> str | None:
    """`SCORED_ROWS` rows scored by a model no operation scored before (each Python worker loads it anew)."""
    import math

    from pyspark.sql import functions as F

    from sparkrunner.ml import ScoringModel

    rows = spark.range(SCORED_ROWS, numPartitions=2).select(
        F.array_repeat(F.rand(seed).cast("float"), SCORING_WIDTH).alias("x")
    )
    model = ScoringModel(builder=_scoring_model(seed), predict_fn=_row_sums, feature_cols=["x"])
    got = [row["prediction"] for row in model.transform(rows).select("prediction").collect()]
    finite = len(got) == SCORED_ROWS and all(math.isfinite(v) for v in got)
    return None if finite else f"{len(got)} predictions of {SCORED_ROWS}, finite: {finite}"


class OneDriver:
    """The mixed operations in one driver and one application: the np=2 and np=-2 runs are two `Soak`s (their
    faults and launchers drawn as the chaos soak draws them, their outcomes and leftovers judged by it), the
    other operations' failures listed; `rows` holds the samples. `ops`: a count (the kinds drawn in rounds,
    `kinds`) or the kinds themselves."""

    def __init__(self, spark: Any, ops: int | list[str], seed: int) -> None:
        self.spark, self.draw = spark, random.Random(seed)
        self.plan = kinds(ops, self.draw) if isinstance(ops, int) else ops
        self.soaks = {
            "cluster": Soak(spark, self.plan.count("cluster"), seed, SOAK_FAULTS, RUNNABLE_LAUNCHERS),
            "local": Soak(spark, self.plan.count("local"), seed, LOCAL_FAULTS, RUNNABLE_LAUNCHERS, np=-2),
        }
        self.faults = {name: iter(soak.plan(self.draw)) for name, soak in self.soaks.items()}
        self.failures: list[str] = []
        self.rows: list[tuple[int, dict[str, float]]] = []
        self.done: list[tuple[str, str]] = []
        """Each operation's kind and launcher, in order."""

    def run(self, every: int) -> None:
        shm_before = shm_entries()
        self.rows.append((0, footprint.sample(shm_before)))
        print("\n".join(footprint.table(self.rows)), flush=True)
        for number, kind in enumerate(self.plan, 1):
            self.one(kind, number)
            if number % every == 0 or number == len(self.plan):
                self.rows.append((number, footprint.sample(shm_before)))
                print(footprint.table(self.rows)[-1], flush=True)

    def one(self, kind: str, number: int) -> None:
        launcher = self.draw.choice(RUNNABLE_LAUNCHERS)
        self.done.append((kind, launcher))
        if kind in self.soaks:
            self.soaks[kind].one(next(self.faults[kind]), launcher, number)
            return
        try:
            wrong = {
                "fit": lambda: fit(self.spark, launcher),
                "cv": lambda: cross_validator(self.spark, launcher),
                "score": lambda: score(self.spark, number),
            }[kind]()
        except Exception:
            wrong = traceback.format_exc()
        if wrong:
            self.failures.append(f"operation {number} ({kind}, {launcher}): {wrong}")

    def warmed_up(self) -> int:
        """The operations until every kind has run on every launcher (all of them, if some never did)."""
        wanted = {(kind, launcher) for kind in self.plan for launcher in RUNNABLE_LAUNCHERS}
        met: set[tuple[str, str]] = set()
        for number, done in enumerate(self.done, 1):
            met.add(done)
            if met == wanted:
                return number
        return len(self.done)

    def report(self, warm_up: int) -> str:
        counts = {kind: self.plan.count(kind) for kind in dict.fromkeys(self.plan)}
        lines = [f"operations: {len(self.plan)} ({', '.join(f'{n} {k}' for k, n in counts.items())})"]
        lines += [self.soaks["cluster"].report("np=2 runs on local-cluster[2,1,1024]")]
        lines += [self.soaks["local"].report("np=-2 runs on the driver's machine"), *self.failures]
        lines += ["samples:", *footprint.table(self.rows), f"after a warm-up of {warm_up} operations:"]
        return "\n".join(lines + footprint.verdicts(self.rows, warm_up))

    def passed(self, warm_up: int) -> bool:
        bounded = all(line.endswith("bounded") for line in footprint.verdicts(self.rows, warm_up)[1:])
        return bounded and not self.failures and all(soak.passed for soak in self.soaks.values())


def one_driver(ops: int, seed: int, every: int, warm_up: int | None) -> bool:
    """The mixed operations, their datasets materialized into the bench's own temp dir (where it counts files)."""
    from sparkrunner.common.environment import Env

    checkout_on_pythonpath()
    os.environ.setdefault(Env.DATA_CACHE, os.path.join(tempfile.gettempdir(), "datasets"))
    spark = quiet_session("local-cluster[2,1,1024]", **SESSION_CONF, **{"spark.python.worker.reuse": "true"})
    try:
        soak = OneDriver(spark, ops, seed)
        soak.run(every)
        warm_up = soak.warmed_up() if warm_up is None else warm_up
        print(soak.report(warm_up), flush=True)
        return soak.passed(warm_up)
    finally:
        spark.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--only", choices=["local", "two-hosts"])
    parser.add_argument("--one-driver", action="store_true")
    parser.add_argument("--ops", type=int, default=200)
    parser.add_argument("--every", type=int, default=10)
    parser.add_argument(
        "--warm-up", type=int, help="operations (default: until every kind met every launcher)"
    )
    args = parser.parse_args()
    # the scans below see this process's runs only: a temp dir of its own (the executors inherit it), its tag
    os.environ.setdefault(TEST_SESSION_ENV, uuid.uuid4().hex)
    os.environ["PYSPARK_PYTHON"] = sys.executable
    use_private_temp_dir(Path(tempfile.mkdtemp(prefix="soak-")))
    if args.one_driver:
        sys.exit(0 if one_driver(args.ops, args.seed, args.every, args.warm_up) else 1)
    passed = True
    if args.only in (None, "local"):
        soak = local_cluster(args.runs, args.seed)
        print(soak.report(f"local-cluster[2,1,1024]: {args.runs} runs, seed {args.seed}"), flush=True)
        passed &= soak.passed
    if args.only in (None, "two-hosts"):
        hosts = two_hosts(args.runs, args.seed)
        if hosts is not None:
            print(
                hosts.report(f"two hosts (netns, 2 x 2 slots): {args.runs} runs, seed {args.seed}"),
                flush=True,
            )
            passed &= hosts.passed
    sys.exit(0 if passed else 1)


if __name__ == "__main__":
    main()
