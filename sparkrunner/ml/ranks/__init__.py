"""Spark ML training in a rank: the loop that `fit` runs on every rank (DDP, checkpoints, per-epoch metrics)."""
