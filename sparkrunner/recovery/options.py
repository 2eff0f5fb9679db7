"""Runner's recovery options (max_failures, checkpoint_dir, stop_grace_s, retry_if), checked before anything starts."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sparkrunner.channel.environment import Env
from sparkrunner.errors import InvalidArgumentError
from sparkrunner.recovery.attempts import RetryPolicy, RetryPredicate
from sparkrunner.recovery.checkpoint_dir import check_options


@dataclass(frozen=True)
class RecoveryOptions:
    policy: RetryPolicy
    checkpoint_dir: str | None
    stop_grace_s: float

    @classmethod
    def checked(
        cls,
        np: int,
        max_failures: Any,
        checkpoint_dir: Any,
        stop_grace_s: Any,
        retry_if: RetryPredicate | None,
    ) -> RecoveryOptions:
        if isinstance(max_failures, bool) or not isinstance(max_failures, int) or max_failures < 0:
            raise InvalidArgumentError(
                f"max_failures must be an int >= 0 (failed attempts to retry), not {max_failures!r}"
            )
        if isinstance(stop_grace_s, bool) or not isinstance(stop_grace_s, (int, float)) or stop_grace_s < 0:
            raise InvalidArgumentError(f"stop_grace_s must be a number of seconds >= 0, not {stop_grace_s!r}")
        if retry_if is not None and not callable(retry_if):
            raise InvalidArgumentError(f"retry_if must be a function(error) -> bool, not {retry_if!r}")
        check_options(np, max_failures, checkpoint_dir)
        folder = None if checkpoint_dir is None else str(checkpoint_dir)
        return cls(RetryPolicy(max_failures, retry_if), folder, float(stop_grace_s))

    def rank_env(self, attempt: int) -> dict[str, str]:
        """What every rank of attempt `attempt` needs to know about recovery."""
        return {Env.ATTEMPT: str(attempt), Env.STOP_GRACE_S: repr(self.stop_grace_s)}
