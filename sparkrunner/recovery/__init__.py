"""Recovery on the driver: the attempt loop (`attempts.run_attempts`: retry a failed attempt from the latest
checkpoint, `max_failures`), elastic size (`elastic`), and the run's checkpoint folder (`checkpoint_dir`, which
ranks read too). The rank side (`save_checkpoint`, `stopping`, ...) is in `sparkrunner.ranks`.

Nothing is imported here: a rank that reads `checkpoint_dir` must not load the driver's attempt loop.
"""
