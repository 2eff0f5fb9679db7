"""One `local[2]` session for every ml test module, with a driver result limit small enough that collecting a
training DataFrame would fail (so a fit that works proves nothing went through the driver)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.conftest import LOCAL_MASTER, spark_session

MAX_RESULT = "1m"


@pytest.fixture(scope="module")
def spark_ml() -> Any:
    return spark_session(LOCAL_MASTER, **{"spark.driver.maxResultSize": MAX_RESULT})


@pytest.fixture(scope="module")
def tracking_uri(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A real MLflow sqlite store of the module's own."""
    return f"sqlite:///{tmp_path_factory.mktemp('ml-mlflow')}/mlflow.db"
