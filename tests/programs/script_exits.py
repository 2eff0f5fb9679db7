"""Script mode: rank 1 calls sys.exit(3) after a line of output; rank 0 exits with 0."""

import os
import sys

print("about to exit", flush=True)
sys.exit(3 if os.environ["RANK"] == "1" else 0)
