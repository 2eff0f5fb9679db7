"""``python -m sparkrunner``, and the file spark-submit runs (``spark-submit "$(sparkrunner entry-point)" ...``)."""

import os
import sys

if not __package__:
    # run as a file: Python put this package's folder first on sys.path, where its modules would shadow others
    _here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _here]

from sparkrunner.cli import main

if __name__ == "__main__":
    sys.exit(main())
