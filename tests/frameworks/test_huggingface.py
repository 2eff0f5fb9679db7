"""The Hugging Face Trainer and Accelerate, data-parallel on every launcher and placement, without
`accelerate launch`: tiny models built from configs (nothing comes from a hub), data generated in the rank."""

from __future__ import annotations

import math
from typing import Any

import pytest

from sparkrunner import Runner
from tests.matrix import Placement

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

SAMPLES, BATCH, EPOCHS = 22, 4, 2


def trainer_replica(samples: int, batch: int, epochs: int, own_callback: bool = False) -> dict[str, Any]:
    """One rank: `transformers.Trainer` on a 1-layer BERT classifier built from its config; with `own_callback`,
    the user's own callback reports each step with a loss (as code written before sparkrunner counted steps)."""
    import os
    import tempfile

    import torch
    from transformers import (
        BertConfig,
        BertForSequenceClassification,
        Trainer,
        TrainerCallback,
        TrainingArguments,
    )

    import sparkrunner

    class UsersProgress(TrainerCallback):
        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            sparkrunner.report_progress(loss=1.0 / state.global_step)

    config = BertConfig(
        vocab_size=32, hidden_size=8, num_hidden_layers=1, num_attention_heads=2, intermediate_size=16
    )
    torch.manual_seed(int(os.environ["RANK"]))  # different initial weights: DDP must broadcast rank 0's
    model = BertForSequenceClassification(config)
    ids = torch.arange(samples * 6).reshape(samples, 6) % 32
    data = [{"input_ids": row, "labels": int(row.sum()) % 2} for row in ids]
    with tempfile.TemporaryDirectory() as out:
        args = TrainingArguments(
            output_dir=out,
            per_device_train_batch_size=batch,
            num_train_epochs=epochs,
            use_cpu=True,
            report_to=[],
            save_strategy="no",
            logging_strategy="no",
            disable_tqdm=True,
        )
        callbacks = [UsersProgress()] if own_callback else None
        trainer = Trainer(model=model, args=args, train_dataset=data, callbacks=callbacks)
        trainer.train()
    return {
        "rank": int(os.environ["RANK"]),
        "process_index": args.process_index,
        "world_size": args.world_size,
        "global_step": trainer.state.global_step,
        "weights": torch.cat([p.detach().flatten() for p in model.parameters()]).tolist(),
    }


def accelerate_replica(samples: int, batch: int, epochs: int) -> dict[str, Any]:
    """One rank: a hand-written loop through `Accelerator.prepare`, with `PartialState` for who is who."""
    import os

    import torch
    from accelerate import Accelerator, PartialState

    state = PartialState(cpu=True)
    accelerator = Accelerator(cpu=True)
    torch.manual_seed(int(os.environ["RANK"]))
    model = torch.nn.Linear(4, 1)
    x = torch.arange(samples * 4, dtype=torch.float32).reshape(samples, 4) / (samples * 4)
    data = torch.utils.data.TensorDataset(x, x.sum(dim=1, keepdim=True))
    loader = torch.utils.data.DataLoader(data, batch_size=batch)
    model, optimizer, loader = accelerator.prepare(model, torch.optim.SGD(model.parameters(), lr=0.1), loader)
    steps = 0
    for _ in range(epochs):
        for inputs, targets in loader:
            optimizer.zero_grad()
            accelerator.backward(torch.nn.functional.mse_loss(model(inputs), targets))
            optimizer.step()
            steps += 1
    return {
        "rank": int(os.environ["RANK"]),
        "process_index": state.process_index,
        "world_size": state.num_processes,
        "global_step": steps,
        "weights": [p.detach().flatten().tolist() for p in accelerator.unwrap_model(model).parameters()],
    }


def check_data_parallel(views: list[dict[str, Any]]) -> None:
    """Every rank is its own process of the run, took its share of the batches, and ended with rank 0's weights."""
    world = len(views)
    steps = math.ceil(SAMPLES / (BATCH * world)) * EPOCHS  # each step takes one batch per rank
    assert steps != math.ceil(SAMPLES / BATCH) * EPOCHS, "the oracle must tell a split from no split"
    for view in views:
        assert view["process_index"] == view["rank"] and view["world_size"] == world, view
        assert view["global_step"] == steps, view
        assert view["weights"] == views[0]["weights"], "replicas diverged"


def check_steps_counted_once(runner: Runner, world: int) -> None:
    """The run's progress saw every optimizer step of every rank once, and the anatomy counted them (from one
    report to the next, so the first step opens the count)."""
    steps = math.ceil(SAMPLES / (BATCH * world)) * EPOCHS
    timings = runner.last_run.timings
    assert timings.groupby("rank")["step"].max().tolist() == [steps] * world
    assert timings.groupby("rank").size().tolist() == [steps] * world, "a step was reported twice"
    assert list(runner.last_run.step_anatomy["steps"]) == [steps - 1] * world


def test_trainer_trains_data_parallel(placement: Placement, launcher: str) -> None:
    """The Trainer's steps reach the bar, the timings and the anatomy with no callback in the user's code. On
    every launcher and placement: the Trainer is Hugging Face's launch path there, for Accelerate's too (its
    `TrainingArguments` set up Accelerate's `PartialState` from the run's torch variables, and the Trainer
    prepares the model and the data through an `Accelerator`)."""
    runner = Runner(np=placement.np(2), launcher=launcher, tracking=False)
    check_data_parallel(runner.run_all(trainer_replica, SAMPLES, BATCH, EPOCHS))
    check_steps_counted_once(runner, 2)


def test_a_trainer_whose_own_callback_reports_counts_each_step_once_np_below_zero_direct() -> None:
    """The user's callback reports (with a loss): sparkrunner's built-in one steps aside, nothing is doubled."""
    runner = Runner(np=-2, launcher="direct", tracking=False)
    check_data_parallel(runner.run_all(trainer_replica, SAMPLES, BATCH, EPOCHS, own_callback=True))
    check_steps_counted_once(runner, 2)
    assert runner.last_run.timings["loss"].notna().all(), "the user's reports (with their loss) were kept"


def test_accelerator_trains_data_parallel_np_below_zero_direct() -> None:
    """A loop of the user's own through `Accelerator.prepare`: one cell, as the launcher and the placement reach
    Accelerate through the same `PartialState` the Trainer's runs above set up on each of them."""
    runner = Runner(np=-2, launcher="direct", tracking=False)
    check_data_parallel(runner.run_all(accelerate_replica, SAMPLES, BATCH, EPOCHS))
