"""Script mode (tests/toplevel/test_script_mode.py): runs as __main__ with its argv and a helper module that
travels with ``code_dir``."""

import os
import sys

import helpers  # shipped in code_dir, not beside this file


def main() -> None:
    rank = os.environ["RANK"]
    print(f"script name={__name__} rank={rank} world={os.environ['WORLD_SIZE']} argv={sys.argv[1:]}")
    print(f"helper {helpers.double(int(rank))} from {helpers.__file__}")


if __name__ == "__main__":
    main()
