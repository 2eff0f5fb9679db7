"""Code that runs inside a rank process: the bootstrap (``python -m sparkrunner.ranks.bootstrap``), the output
relay, thread dumps, fast exit, and the rank-side API. Never imports driver-side code."""
