"""What a spec's tables publish: their columns, and the public grid of a quantile table.

Facts of the spec alone (no data, no plan), read by the reader's schema checks, the
engines and the writer alike.
"""

from __future__ import annotations

from fractions import Fraction

from dp_pipeline.query.quantile_grid import quantile_candidates
from dp_pipeline.release.spec.model import TableSpec

__all__ = ["RAW_COLUMN", "output_columns", "position_column", "quantile_grid"]

# The column of a post-processed table that keeps its noisy count (before consistency).
RAW_COLUMN = "raw_value"

_POSITION_PREFIX = "_dp_position_"


def position_column(index: int) -> str:
    """The derived grid-position column of table ``index`` of the spec (quantile / median)."""
    return f"{_POSITION_PREFIX}{index}"


def quantile_grid(table: TableSpec) -> list[Fraction]:
    """The public candidates ``lower + i·granularity <= upper`` of a quantile table."""
    return quantile_candidates((table.lower, table.upper), table.granularity)


def output_columns(table: TableSpec) -> list[str]:
    """Columns of the table's released Parquet file."""
    if table.statistic == "top_k":
        columns = ["rank", table.keys[0]]
        return [*columns, "count"] if table.method == "one_shot" else columns
    return [*table.keys, "value"]
