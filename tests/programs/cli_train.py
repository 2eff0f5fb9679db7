"""A script for the `sparkrunner run` command (tests/toplevel/test_cli.py): prints its rank and argv; with
``--fail``, rank 1 exits with code 3."""

import os
import sys
import time

print(f"rank {os.environ['RANK']} of {os.environ['WORLD_SIZE']} argv={sys.argv[1:]}", flush=True)
if os.environ["RANK"] == "1" and "--fail" in sys.argv:
    time.sleep(2)  # rank 0 has printed by then: its line is asserted, not raced against the abort
    sys.exit(3)
