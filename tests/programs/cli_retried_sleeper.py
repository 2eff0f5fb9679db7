"""A script for `sparkrunner run --max-failures`: every rank of the first attempt exits 3, the second attempt's
ranks print "rank started" and sleep (for Ctrl-C tests of a retried run from the command line)."""

import sys
import time

import sparkrunner

if sparkrunner.rank_context().attempt == 0:
    sys.exit(3)
print("rank started", flush=True)
time.sleep(600)
