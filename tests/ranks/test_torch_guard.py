"""`sparkrunner.ranks.torch_guard`: DDP over Gloo ends in ranks forked from the driver's zygote after it imported
torch._dynamo, the state in which a rank once hung at the end of its function (torch's Gloo worker dropping the
backward's stashed context while ``~ProcessGroupGloo`` joined it under the GIL).

The regression test runs what hung, many times over, in ranks forked from that state: each rank makes and drops a
Gloo process group and its DDP model a number of times (each drop is one chance of the deadlock), under a run
``timeout`` (a hang fails the test as a `RunTimeoutError`, never waits unbounded). Oracles: the ranks' own report of
what was imported before the function (torch._dynamo: the zygote's state), of torch's own thread-local store after a
backward (``torch._C._is_key_in_tls``: the main thread keeps the context the Gloo work captured) and of the gradients
(DDP's mean, computed here).

launcher="direct", np < 0: the cell with the driver's zygote; the guard is the same in every rank (cold ones too)."""

from __future__ import annotations

import os
import sys
import threading

from sparkrunner import Runner
from sparkrunner.timeouts import ZYGOTE_WARM_AFTER_S

LIFETIMES = 12
"""Process groups each rank makes and drops: unguarded, 1-3 of 5 loops of 30 hung in one process (torch 2.13)."""


def ddp_lifetimes(lifetimes: int) -> tuple[int, bool, bool, list[float]]:
    """In a rank: its parent, whether torch._dynamo was imported before this function, whether the main thread
    still holds the backward's context after a DDP backward, and the world's DDP gradient; in between, `lifetimes`
    process groups of its own, each with a DDP model that goes as the group does."""
    had_dynamo = "torch._dynamo" in sys.modules
    import torch
    import torch.distributed as dist

    for _ in range(lifetimes):
        store = dist.TCPStore("127.0.0.1", 0, 1, True)
        dist.init_process_group("gloo", store=store, rank=0, world_size=1)
        model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 1))
        for _ in range(3):
            model(torch.ones(8, 4)).sum().backward()
        dist.destroy_process_group()
        del model  # the reducer frees its process group here, holding the GIL: where the deadlock was
    dist.init_process_group("gloo")
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 1))
    model(torch.ones(8, 4) * (dist.get_rank() + 1)).sum().backward()
    kept = torch._C._is_key_in_tls("context")
    dist.destroy_process_group()
    return os.getppid(), had_dynamo, kept, model.module.weight.grad[0].tolist()


def _runner() -> Runner:
    return Runner(np=-2, launcher="direct", tracking=False, progress=False, timeout=120)


def test_ddp_ends_in_ranks_forked_after_the_zygote_imported_torch_dynamo() -> None:
    first = _runner().run_all(ddp_lifetimes, 0)
    (zygote,) = {ppid for ppid, *_ in first}
    # idle, the zygote imports torch._dynamo (a fork asked meanwhile waits for it: it serves one thing at a time)
    threading.Event().wait(ZYGOTE_WARM_AFTER_S + 0.5)
    later = _runner().run_all(ddp_lifetimes, LIFETIMES)
    # d(sum of outputs)/dw is the batch's column sum, 8 * (rank + 1): DDP's mean over the 2 ranks is 12
    assert later == [(zygote, True, True, [12.0] * 4)] * 2, later
