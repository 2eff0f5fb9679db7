"""The Connect tests' shared Spark Connect server (tests/scenarios/connect/server.py's ConnectServer starts it):
`connect_server.py LOG`. Prints `URL sc://localhost:PORT` once it serves, then answers each `jobs` line on stdin
with `JOBS [ids]` (its active Spark jobs) until stdin closes; its Spark driver's output goes to LOG."""

import json
import os
import sys

from tests.scenarios.connect.server import serve

answers = os.fdopen(os.dup(sys.stdout.fileno()), "w", buffering=1)
with open(sys.argv[1], "w") as log:  # the JVM started below inherits these descriptors
    os.dup2(log.fileno(), sys.stdout.fileno())
    os.dup2(log.fileno(), sys.stderr.fileno())
server, url = serve()
print("URL", url, file=answers)
for line in sys.stdin:
    if line.strip() == "jobs":
        print("JOBS", json.dumps(list(server.sparkContext.statusTracker().getActiveJobsIds())), file=answers)
