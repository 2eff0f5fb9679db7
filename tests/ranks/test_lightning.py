"""Lightning's strategy (`sparkrunner/ranks/lightning.py`, public as `sparkrunner.lightning`): what it refuses
before Lightning is touched. Training with it, on every launcher and placement: tests/frameworks/test_lightning.py."""

from __future__ import annotations

import pytest

import sparkrunner.lightning
from sparkrunner.errors import InvalidArgumentError
from sparkrunner.ranks import lightning


def test_the_public_name_gives_the_rank_code() -> None:
    assert (
        sparkrunner.lightning.ddp is lightning.ddp
        and sparkrunner.lightning.environment is lightning.environment
    )


@pytest.mark.parametrize("call", [lightning.ddp, lightning.environment])
def test_an_unknown_lightning_package_is_refused_by_name(call: object) -> None:
    with pytest.raises(
        InvalidArgumentError,
        match=r"package must be one of \['lightning.pytorch', 'pytorch_lightning'\], not 'lightning'",
    ):
        call(package="lightning")  # type: ignore[operator]
