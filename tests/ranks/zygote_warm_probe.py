"""A module for tests/ranks/test_zygote.py to have a zygote import once idle (`ZygoteSpec.warm`): importing it
writes the importing process's pid to ``$ZYGOTE_TEST_WARMED``, and starts a thread when ``$ZYGOTE_TEST_THREAD``
is set (as a module that is not fork-safe would)."""

from __future__ import annotations

import os
import threading
import time

with open(os.environ["ZYGOTE_TEST_WARMED"], "w") as f:
    f.write(str(os.getpid()))

if os.environ.get("ZYGOTE_TEST_THREAD"):
    threading.Thread(target=time.sleep, args=(600,), daemon=True).start()
