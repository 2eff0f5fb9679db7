"""A driver program for test_log_handler: one local rank (np=-1, direct) sends a file, so the driver logs a line.

``python log_handler_driver.py user`` configures logging first (a user handler); without it sparkrunner's default
handler is the only one.
"""

from __future__ import annotations

import logging
import os
import sys
import tempfile

import sparkrunner
from sparkrunner.ranks.api import send_file_to_driver


def send_a_file() -> None:
    path = os.path.join(tempfile.mkdtemp(prefix="voice-"), "note.txt")
    with open(path, "w") as f:
        f.write("hello")
    send_file_to_driver(path)


if __name__ == "__main__":
    if sys.argv[1:] == ["user"]:
        logging.basicConfig(format="USER %(name)s: %(message)s", level=logging.INFO)
    runner = sparkrunner.Runner(np=-1, launcher="direct", tracking=False, progress=False)
    runner.run(send_a_file)
    print(runner.received_files["rank 0/note.txt"])
