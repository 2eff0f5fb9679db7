"""Hyperparameter search with Optuna over sparkrunner runs (docs/trials.md).

Each trial is one run on the cluster's ranks; rank 0 reports its loss every step with `report_progress`, an
observer hands each report to the trial, and when Optuna's median pruner drops a trial that falls behind, the
observer asks the ranks to stop (`sparkrunner.stopping()` turns true mid-run, with `stop_reason == "prune"`).
The trials share one warm session, so only the first one (and the one after a pruned trial, whose stopped
ranks are replaced) starts rank processes.

    python examples/optuna_search.py [--np 2] [--trials 8] [--master local[4]]
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import Any

import optuna

from sparkrunner import Runner, RunObserver

log = logging.getLogger("sparkrunner.examples.optuna")
STEPS = 40


class TrialReporter(RunObserver):
    """Passes rank 0's reported loss to the Optuna trial being run (trials run one at a time here), and stops
    the ranks as soon as the pruner drops the trial."""

    def __init__(self) -> None:
        self.trial: optuna.Trial | None = None
        self.session: Any = None
        self._pruned = False

    def start(self, trial: optuna.Trial, session: Any) -> None:
        self.trial, self.session, self._pruned = trial, session, False

    def on_progress(self, rank: int, progress: Any) -> None:
        if rank != 0 or self.trial is None or "loss" not in progress.metrics:
            return
        self.trial.report(progress.metrics["loss"], progress.step)
        if not self._pruned and self.trial.should_prune():
            self._pruned = True
            self.session.ask_to_stop("prune")


def search(
    spark: Any, learning_rates: list[float] | None = None, trials: int = 8, np: int = 2
) -> optuna.Study:
    """Search a learning rate: `learning_rates` are tried first (in order), then Optuna's own choices."""

    def train(
        lr: float, steps: int
    ) -> tuple[float, int]:  # defined here: pickled by value, nothing to import on executors
        """The last loss and the steps trained (fewer when the trial was pruned)."""
        import time

        from sparkrunner import report_progress, stopping

        loss, step = 0.0, 0
        while step < steps and not stopping():
            time.sleep(0.05)  # stands in for one training step...
            loss = (lr - 0.3) ** 2 + 1.0 / (step + 1)  # ...and its loss
            report_progress(step, loss=loss)
            step += 1
        return loss, step

    reporter = TrialReporter()
    runner = Runner(
        np=np, spark=spark, launcher="direct", tracking=False, progress=False, observers=[reporter]
    )
    study = optuna.create_study(
        sampler=optuna.samplers.TPESampler(seed=0),
        pruner=optuna.pruners.MedianPruner(n_startup_trials=2, n_warmup_steps=0),
    )
    for lr in learning_rates or []:
        study.enqueue_trial({"lr": lr})
    with runner.session() as session:

        def objective(trial: optuna.Trial) -> float:
            reporter.start(trial, session)
            loss, steps = session.run(train, trial.suggest_float("lr", 0.01, 1.0), STEPS)
            trial.set_user_attr("steps", steps)
            if trial.should_prune():  # its reported losses fell behind the median of the finished trials
                raise optuna.TrialPruned()
            return float(loss)

        study.optimize(objective, n_trials=len(learning_rates) if learning_rates else trials)
    return study


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--np", type=int, default=2)
    parser.add_argument("--trials", type=int, default=8)
    parser.add_argument("--master", default="local[4]")
    args = parser.parse_args(argv)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.master(args.master).getOrCreate()
    try:
        study = search(spark, trials=args.trials, np=args.np)
    finally:
        spark.stop()
    log.warning("best learning rate %.3f (loss %.4f)", study.best_params["lr"], study.best_value)
    return 0


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO)
    sys.exit(main())
