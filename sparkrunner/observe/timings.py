"""Per-rank step timings: what the progress reports say about each rank's speed."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd


def rank_throughput(timings: pd.DataFrame) -> pd.DataFrame:
    """Per rank: steps reported, median and mean seconds per step, steps/s, samples/s; slowest rank first."""
    import pandas as pd

    timed = timings.dropna(subset=["step_s"])
    grouped = timed.groupby("rank")
    table = pd.DataFrame(
        {
            "steps": timings.groupby("rank")["step"].count(),
            "median_step_s": grouped["step_s"].median(),
            "mean_step_s": grouped["step_s"].mean(),
        }
    )
    table["steps_per_s"] = 1.0 / table["mean_step_s"]
    if timed["samples"].notna().any():
        table["samples_per_s"] = grouped["samples"].sum() / grouped["step_s"].sum()
    return table.sort_values("median_step_s", ascending=False)
