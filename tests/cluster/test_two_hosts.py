"""Runs across two hosts with two task slots each (the multi-host fixture), on every launcher."""

from __future__ import annotations

import pytest

from sparkrunner import Runner
from tests.cluster.fixtures import TwoHosts
from tests.core.test_outliving_rank import assert_rank_zero_outlived

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def test_rank_zero_outlives_its_peers_on_two_hosts(two_hosts: TwoHosts, launcher: str) -> None:
    runner = Runner(
        np=two_hosts.slots, spark=two_hosts.spark, launcher=launcher, start_timeout=180, timeout=300
    )
    assert_rank_zero_outlived(runner)
