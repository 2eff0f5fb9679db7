"""One run, from payload to result: the pipeline that `Runner`, a warm session and a session pool each hold.

`RunPipeline` is built from the checked `RunOptions`, the run's observers and a placement factory (where an
attempt's ranks start: this machine, a Spark barrier stage, or a warm session's live ranks). It turns each call
(a function, a script, a module) into a `RunCall` for its `RunController` (`sparkrunner.driver.controller`, which
owns the run's states and attempts), and keeps what a caller reads afterwards (`last_run`, `received_files`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

from sparkrunner.driver.controller import RunCall, RunController, RunOutputs
from sparkrunner.driver.in_flight import InFlight, InFlightWatch
from sparkrunner.errors import InvalidArgumentError, SparkRunnerError
from sparkrunner.observe.observers import RunObserver, RunRecord
from sparkrunner.options import RunOptions
from sparkrunner.placement.factory import PlacementFactory
from sparkrunner.script import module_call, script_call
from sparkrunner.stack_report import StackReport

CodeDir = str | os.PathLike[str] | None


class RunPipeline:
    """Runs calls on ranks placed by `placements`, one at a time or from several threads (each run its own
    record); its `RunController` owns each run."""

    def __init__(
        self,
        options: RunOptions,
        observers: Sequence[RunObserver],
        placements: PlacementFactory,
        in_flight: InFlightWatch | None = None,
    ) -> None:
        self.in_flight = in_flight or InFlightWatch()
        self._outputs = RunOutputs()
        self.controller = RunController(options, observers, placements, self.in_flight)
        self.recovery = self.controller.recovery

    @property
    def last_run(self) -> RunRecord | None:
        return self._outputs.last_run

    @property
    def received_files(self) -> dict[str, str]:
        return self._outputs.received_files

    def run(
        self, main: Callable[..., Any] | str | os.PathLike[str], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        """``main(*args, **kwargs)`` on every rank: rank 0's value. A path runs that script with `args` as its
        command line (`code_dir` the one keyword it takes)."""
        if isinstance(main, (str, os.PathLike)):
            code_dir = kwargs.pop("code_dir", None)
            if kwargs:
                raise InvalidArgumentError(
                    f"a script takes command-line arguments, not keyword arguments ({', '.join(kwargs)}): "
                    f"run('train.py', '--lr', '0.1')"
                )
            return self.run_script(main, args, code_dir)
        return self.execute(main, args, kwargs, _name_of(main), every_rank=False)[0]

    def run_all(self, main: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[Any]:
        """``main(*args, **kwargs)`` on every rank: every rank's value, in rank order."""
        return self.execute(main, args, kwargs, _name_of(main), every_rank=True)

    def run_script(self, path: str | os.PathLike[str], argv: tuple[Any, ...], code_dir: CodeDir) -> None:
        """The script at `path` as ``__main__`` on every rank, ``sys.argv = [path, *argv]``."""
        call = script_call(path, argv, code_dir)
        self.execute(call, (), {}, call.name, every_rank=False)

    def run_module(self, module: str, argv: tuple[Any, ...], code_dir: CodeDir) -> None:
        """``python -m module argv...`` on every rank; `code_dir` ships its package along."""
        call = module_call(module, argv, code_dir)
        self.execute(call, (), {}, call.name, every_rank=False)

    def execute(
        self, main: Any, args: tuple[Any, ...], kwargs: dict[str, Any], name: str, every_rank: bool
    ) -> list[Any]:
        """One run of `main` on every rank; rank 0's value (or every rank's) in a list."""
        return self.controller.run(RunCall(main, args, kwargs, name, every_rank), self._outputs)

    def dump_stacks(self) -> StackReport:
        """Every live rank's Python stacks (all threads) and last output lines, while a run is in flight."""
        channel = self.in_flight.channel
        if channel is None:
            raise SparkRunnerError(
                "dump_stacks() needs a run in flight: no run of this Runner is running now"
            )
        return channel.collect_stacks()

    def ask_to_stop(self, reason: str) -> bool:
        """Ask the ranks of the run in flight to stop gracefully; False when no run is in flight."""
        return self.controller.ask_to_stop(reason)

    def in_flight_view(self) -> InFlight | None:
        """The connected ranks of the run in flight, or None between runs."""
        return self.in_flight.view()


def _name_of(main: Callable[..., Any]) -> str:
    return str(getattr(main, "__qualname__", None) or getattr(main, "__name__", None) or type(main).__name__)
