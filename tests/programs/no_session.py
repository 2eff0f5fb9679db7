"""A fresh driver with no SparkSession asks for np > 0 (tests/runner/test_validation.py)."""

from sparkrunner import Runner
from sparkrunner.errors import InvalidArgumentError

try:
    Runner(np=2).run(print)
except InvalidArgumentError as exc:
    print("REFUSED:", exc)
