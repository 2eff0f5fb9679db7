"""Script mode: rank 1 raises in a function of the script, whose traceback the driver must show."""

import os


def load(column: str) -> None:
    raise KeyError(f"missing column {column!r}")


if os.environ["RANK"] == "1":
    load("label")
