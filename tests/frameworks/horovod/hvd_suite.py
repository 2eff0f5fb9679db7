"""A user's module in the shape of Horovod's own test/parallel/test_torch.py: Horovod imported at module level,
`hvd.init()` called inside a test case's method; the function the run ships never names Horovod."""

from __future__ import annotations

import unittest

import horovod.torch as hvd
import torch


class AllreduceTests(unittest.TestCase):
    """As Horovod's TorchTests: each test starts Horovod itself."""

    def test_allreduce(self) -> None:
        hvd.init()
        summed = hvd.allreduce(torch.tensor([float(hvd.rank() + 1)]), op=hvd.Sum)
        self.assertEqual(summed.item(), hvd.size() * (hvd.size() + 1) / 2)


def run_suite() -> tuple[int, int, int]:
    """Run the suite as a rank would under ``pytest.main``: (tests run, failures + errors, Horovod size)."""
    result = unittest.TextTestRunner(verbosity=0).run(
        unittest.defaultTestLoader.loadTestsFromTestCase(AllreduceTests)
    )
    return result.testsRun, len(result.failures) + len(result.errors), int(hvd.size())
