"""`sparkrunner.driver.zygotes`: which modules a run's zygotes import, and when. The first attempt's zygotes import
the modules ranks load on first use only once idle (its ranks do not wait for them); a later attempt's new zygote
imports them before its first fork. Oracle: `WARM_LATER` and the modules the function itself imports."""

from __future__ import annotations

from sparkrunner.driver.zygotes import ZygoteLease
from sparkrunner.options import RunOptions
from sparkrunner.system.zygote_link import WARM_LATER


def trains_with_torch() -> None:
    import torch

    torch.ones(1)


def test_a_later_attempts_new_zygote_imports_before_its_first_fork_what_the_first_imports_once_idle() -> None:
    lease = ZygoteLease("zygote-lease-test", trains_with_torch)
    options = RunOptions(np=2)
    try:
        first, later = (lease.spec("127.0.0.1", "127.0.0.1", options) for _ in range(2))
    finally:
        lease.close()
    assert first.modules == ("torch",) and first.warm == WARM_LATER["torch"]
    assert later.modules == ("torch", *WARM_LATER["torch"]) and later.warm == ()
    assert later.lease == first.lease and later.key == first.key, "one lease and key for the run's zygotes"
