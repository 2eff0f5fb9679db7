"""Recovery: failed attempts restart from the latest checkpoint (max_failures), and ranks stop gracefully.

Rank side: `save_checkpoint`, `load_checkpoint`, `sharded_checkpoint`, `latest_sharded_checkpoint`,
`stopping`, `on_stop`. Driver side: the attempt loop
(`run_attempts`), the checkpoint folder of a run, and the wait for slots before a retry.
"""

from sparkrunner.recovery.attempts import AttemptRecord, RetryPolicy, run_attempts
from sparkrunner.recovery.checkpoint_dir import list_checkpoints
from sparkrunner.recovery.checkpoints import load_checkpoint, save_checkpoint
from sparkrunner.recovery.graceful_stop import on_stop, stopping
from sparkrunner.recovery.sharded import latest_sharded_checkpoint, sharded_checkpoint

__all__ = [
    "AttemptRecord",
    "RetryPolicy",
    "latest_sharded_checkpoint",
    "list_checkpoints",
    "load_checkpoint",
    "on_stop",
    "run_attempts",
    "save_checkpoint",
    "sharded_checkpoint",
    "stopping",
]
