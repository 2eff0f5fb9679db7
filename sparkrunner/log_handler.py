"""How sparkrunner talks to the user: the ``sparkrunner`` logger hierarchy and its default driver handler.

Every module logs to ``logging.getLogger(__name__)`` (``sparkrunner.<area>.<module>``); warnings are
`SparkRunnerWarning`. On the driver, `install_default_handler` shows INFO and above as ``[sparkrunner] message``
on stderr, in a terminal and a notebook alike, but only while the user has configured no handler of their
own (on the ``sparkrunner`` loggers or the root logger): a handler of yours replaces it, with no doubled lines.

Which voice to use:
- ``warnings.warn(text, SparkRunnerWarning)`` (or a subclass such as `StragglerWarning`) for something about the
  user's code, data or setup that they may act on, silence or turn into an error with ``warnings.filterwarnings``:
  a setting that is ignored, GPUs that no task got, a straggling rank, a cache over its limit, an unreadable
  checkpoint that was skipped.
- ``log.warning`` for what happened during a run that sparkrunner handled itself: an attempt failed and is
  retried, leftover processes were killed, a background write or a shutdown step failed, a check was turned off.
  It is a record for the log, not a request to the user.
"""

from __future__ import annotations

import logging
import sys

ROOT = "sparkrunner"
PREFIX = "[sparkrunner] "


class DefaultHandler(logging.Handler):
    """``[sparkrunner] message`` on the current `sys.stderr` (a notebook swaps it per cell), unless the user
    configured a handler: then this one stays silent and theirs shows the record."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.setFormatter(logging.Formatter(PREFIX + "%(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        if _user_handlers(logging.getLogger(record.name)):
            return
        try:
            sys.stderr.write(self.format(record) + "\n")
            sys.stderr.flush()
        except Exception:
            self.handleError(record)


def _user_handlers(logger: logging.Logger) -> bool:
    """Whether a handler other than ours would receive `logger`'s records (walking up as logging does)."""
    current: logging.Logger | None = logger
    while current is not None:
        if any(not isinstance(h, DefaultHandler) for h in current.handlers):
            return True
        current = current.parent if current.propagate else None
    return False


def install_default_handler() -> None:
    """Give the ``sparkrunner`` logger its default handler (once, on the driver) and show INFO by default."""
    root = logging.getLogger(ROOT)
    if not any(isinstance(h, DefaultHandler) for h in root.handlers):
        root.addHandler(DefaultHandler())
    if root.level == logging.NOTSET:
        root.setLevel(logging.INFO)
