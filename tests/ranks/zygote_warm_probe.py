"""A module for tests/ranks/test_zygote.py to have a zygote import once idle (`ZygoteSpec.warm`): importing it
writes the importing process's pid to ``$ZYGOTE_TEST_WARMED``, and does what a module that is not fork-safe would
when ``$ZYGOTE_TEST_HAZARD`` says: starts a thread (``thread``), opens a socket (``socket``), or loads the CUDA
driver's library (a path ending in ``libcuda.so.1``: the library a CUDA runtime loads when first called)."""

from __future__ import annotations

import ctypes
import os
import socket
import threading
import time

with open(os.environ["ZYGOTE_TEST_WARMED"], "w") as f:
    f.write(str(os.getpid()))

HAZARD = os.environ.get("ZYGOTE_TEST_HAZARD", "")
if HAZARD == "thread":
    threading.Thread(target=time.sleep, args=(600,), daemon=True).start()
elif HAZARD == "socket":
    held = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
elif HAZARD.endswith("libcuda.so.1"):
    driver = ctypes.CDLL(HAZARD)
