"""What an aggregation did to the rows (kept, dropped, clamped): never published.

Every engine fills the same `Diagnostics`, and refuses invalid rows under
``on_invalid="error"`` with the same `invalid_rows_error` text.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from dp_pipeline.errors import DPValueError

__all__ = ["Diagnostics", "invalid_rows_error"]


@dataclass(frozen=True)
class Diagnostics:
    """What the engine did to the input rows. Returned to the caller, NEVER released.

    These counts are exact functions of the private data (not noised), so they
    must not be published; they exist to debug a pipeline.

    - ``rows_in``: rows read.
    - ``rows_null_key`` / ``rows_out_of_domain``: rows dropped, per key column
      (a row is attributed to the first key column, in ``by`` order, that fails).
    - ``rows_hierarchy_mismatch``: rows dropped because they break the public hierarchy
      of a set of consistent tables (`dp_pipeline.query.hierarchy`): every table of the
      set drops them, after the key checks.
    - ``rows_null_unit``: rows dropped because the privacy unit is null.
    - ``rows_invalid_value``: rows dropped because the summed value is null, NaN or ±inf.
    - ``rows_clamped``: kept rows whose value lay outside ``[lower, upper]`` (before bounding).
    - ``rows_removed_max_per_cell``: rows over a unit's ``max_per_cell`` in a cell.
    - ``rows_removed_max_cells`` / ``unit_cells_removed_max_cells``: rows and
      (unit, cell) pairs removed because a unit touched more than ``max_cells`` cells.
    - ``rows_used``: rows that entered the aggregates.
    - ``rows_malformed``: CSV rows whose field count differs from the header, dropped
      by the reader before any table (not in ``rows_in``). A Spark release aggregating
      a large CSV input on the executors counts them under ``on_invalid="error"`` only.
    """

    rows_in: int
    rows_null_key: dict[str, int] = field(default_factory=dict)
    rows_out_of_domain: dict[str, int] = field(default_factory=dict)
    rows_null_unit: int = 0
    rows_hierarchy_mismatch: int = 0
    rows_invalid_value: int = 0
    rows_clamped: int = 0
    rows_removed_max_per_cell: int = 0
    rows_removed_max_cells: int = 0
    unit_cells_removed_max_cells: int = 0
    rows_used: int = 0
    rows_malformed: int = 0

    @property
    def rows_dropped(self) -> int:
        """Rows dropped before bounding (null key, out of domain, hierarchy, null unit, value)."""
        return (
            sum(self.rows_null_key.values())
            + sum(self.rows_out_of_domain.values())
            + self.rows_hierarchy_mismatch
            + self.rows_null_unit
            + self.rows_invalid_value
        )


def invalid_rows_error(column: str, rule: str) -> ValueError:
    """The error of ``on_invalid="error"`` (every engine): column and rule, nothing of the data.

    Exceptions reach logs, so the message carries no row count and no value
    read from the input; the non-private diagnostics of ``on_invalid="drop"``
    have the counts for whoever may see them.
    """
    return DPValueError(
        f"column {column!r}: some rows {rule} (on_invalid='error'; the message quotes no "
        f"count or value from the data; use on_invalid='drop' to drop such rows and count "
        f"them in the non-private diagnostics)"
    )
