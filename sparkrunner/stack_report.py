"""What a `HangError` carries: every live rank's threads' stacks and last output lines at one moment (made by
`sparkrunner.driver.attempt.stacks`, read by the user as `error.stack_report`)."""

from __future__ import annotations

from dataclasses import dataclass, field

ERROR_TAIL_LINES = 20
"""Lines of a rank's output an error message shows (the full tail is an attribute of the error)."""


@dataclass(frozen=True)
class RankStack:
    """One rank's state: its threads' stacks (None when it did not answer) and the last lines it printed."""

    rank: int
    host: str
    pid: int | None
    where: str
    threads: str | None
    output_tail: list[str] = field(default_factory=list)

    def __str__(self) -> str:
        head = f"--- rank {self.rank} (host {self.host or '?'}, pid {self.pid or '?'}): {self.where} ---"
        body = self.threads if self.threads is not None else "(no stacks)\n"
        tail = "\n".join(self.output_tail[-ERROR_TAIL_LINES:]) or "(nothing)"
        return f"{head}\n{body}\nlast output of rank {self.rank}:\n{tail}\n"


@dataclass(frozen=True)
class StackReport:
    """Every rank's stacks at one moment; `summary()` is one line per rank, `str()` the full dumps."""

    ranks: dict[int, RankStack]

    def summary(self) -> str:
        return "\n".join(f"  rank {r}: {s.where}" for r, s in sorted(self.ranks.items()))

    @property
    def stacks(self) -> dict[int, str | None]:
        return {r: s.threads for r, s in self.ranks.items()}

    def __str__(self) -> str:
        return "\n".join(str(s) for _, s in sorted(self.ranks.items()))
