"""When this process began importing sparkrunner (`time.monotonic()`), the package's first import: a rank's
`RankLaunch.interpreter_up`, which splits its process start from its imports."""

import time

AT = time.monotonic()
