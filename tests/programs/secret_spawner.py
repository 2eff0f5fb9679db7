"""A spawner that made a secret folder (with a secret nobody took), printed its path, and keeps running until
killed (tests/channel/test_secrets.py)."""

import time

from sparkrunner.system.secret_files import SecretDrop

drop = SecretDrop()
drop.put_run_secret(bytes(32), [0])
print(drop.path, flush=True)
time.sleep(300)  # the test kills it
