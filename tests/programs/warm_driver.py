"""A driver that runs one np=-2 direct run (its ranks fork from the driver's import zygote), says "ran", and
waits: for the test that kills it and looks for its zygote in /proc."""

import time

from sparkrunner import Runner


def main() -> int:
    return 1


Runner(np=-2, launcher="direct", tracking=False, progress=False).run(main)
print("ran", flush=True)
time.sleep(600)
