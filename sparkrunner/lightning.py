"""The public name of Lightning's strategy for sparkrunner's ranks: `Trainer(strategy=sparkrunner.lightning.ddp())`.

The code is rank code and lives with it, in `sparkrunner.ranks.lightning` (docs/frameworks.md).
"""

from sparkrunner.ranks.lightning import ddp, environment

__all__ = ["ddp", "environment"]
