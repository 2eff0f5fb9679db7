"""Runner's recovery options (max_failures, checkpoint_dir, stop_grace_s, retry_if), as the attempts use them."""

from __future__ import annotations

from dataclasses import dataclass

from sparkrunner.channel.environment import Env
from sparkrunner.options import RunOptions
from sparkrunner.recovery.attempts import RetryPolicy


@dataclass(frozen=True)
class RecoveryOptions:
    policy: RetryPolicy
    checkpoint_dir: str | None
    stop_grace_s: float

    @classmethod
    def of(cls, options: RunOptions) -> RecoveryOptions:
        """The recovery part of Runner's options (already checked by `RunOptions`)."""
        folder = None if options.checkpoint_dir is None else str(options.checkpoint_dir)
        return cls(RetryPolicy(options.max_failures, options.retry_if), folder, float(options.stop_grace_s))

    def rank_env(self, attempt: int) -> dict[str, str]:
        """What every rank of attempt `attempt` needs to know about recovery."""
        return {Env.ATTEMPT: str(attempt), Env.STOP_GRACE_S: repr(self.stop_grace_s)}
