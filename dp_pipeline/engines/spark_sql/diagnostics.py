"""Diagnostics of a Spark SQL aggregation from its per-reason-code sums (never published)."""

from __future__ import annotations

from pyspark.sql import functions as sf

from dp_pipeline.engines.spark_sql.coding import DEFERRED_COLUMN, reason_codes
from dp_pipeline.errors import InternalError
from dp_pipeline.query.diagnostics import Diagnostics, invalid_rows_error
from dp_pipeline.query.hierarchy import HIERARCHY_MISMATCH, HIERARCHY_RULE
from dp_pipeline.query.spec import QuerySpec
from dp_pipeline.udfs.noise import CELL_COLUMN, TABLE_COLUMN

DIAGNOSTIC_SUMS = ("n", "clamped", "removed_per_cell", "removed_cells", "pairs_removed")


def code_summary(aggregates) -> list[dict]:
    """Per (table, reason code or 0 for kept cells, deferred): the diagnostic totals."""
    group = sf.when(sf.col(CELL_COLUMN) < 0, sf.col(CELL_COLUMN)).otherwise(sf.lit(0).cast("long"))
    rows = (
        aggregates.groupBy(TABLE_COLUMN, group.alias("code"), DEFERRED_COLUMN)
        .agg(*[sf.sum(sf.col(name)).alias(name) for name in DIAGNOSTIC_SUMS])
        .collect()
    )
    return [row.asDict() for row in rows]


def collected_code_summary(table) -> list[dict]:
    """`code_summary` of collected aggregates without deferred rows (an Arrow table).

    ``table`` has ``_dp_table``, ``_cell``, ``n`` and ``clamped``; the bounding
    counters are zero (no unit had several rows).
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    cells = table.column(CELL_COLUMN)
    codes = pc.if_else(pc.less(cells, 0), cells, pa.scalar(0, pa.int64()))
    grouped = (
        pa.table(
            {
                TABLE_COLUMN: table.column(TABLE_COLUMN),
                "code": codes,
                "n": table.column("n"),
                "clamped": table.column("clamped"),
            }
        )
        .group_by([TABLE_COLUMN, "code"])
        .aggregate([("n", "sum"), ("clamped", "sum")])
    )
    zero = {name: 0 for name in DIAGNOSTIC_SUMS if name not in ("n", "clamped")}
    return [
        {
            TABLE_COLUMN: row[TABLE_COLUMN],
            "code": row["code"],
            DEFERRED_COLUMN: False,
            "n": row["n_sum"],
            "clamped": row["clamped_sum"],
            **zero,
        }
        for row in grouped.to_pylist()
    ]


def query_diagnostics(summary: list[dict], specs, coded) -> list[Diagnostics]:
    """Every query's `Diagnostics` from `code_summary` rows without deferred rows."""
    by_table: dict[int, dict[int, dict]] = {index: {} for index in range(len(specs))}
    for row in summary:
        if row[DEFERRED_COLUMN]:
            raise InternalError("diagnostics asked for before every unit was bounded")
        by_table[int(row[TABLE_COLUMN])][int(row["code"])] = row
    out = []
    for index, spec in enumerate(specs):
        diagnostics = table_diagnostics(by_table[index], spec)
        if spec.on_invalid == "error":
            raise_on_invalid(diagnostics, spec)
        out.append(diagnostics)
    return out


def table_diagnostics(by_code: dict[int, dict], spec: QuerySpec) -> Diagnostics:
    codes = reason_codes(spec)
    null_key = {c: 0 for c in spec.cells.columns}
    out_of_domain = {c: 0 for c in spec.cells.columns}
    other = {"null_unit": 0, "invalid_value": 0, HIERARCHY_MISMATCH: 0}
    for code, row in by_code.items():
        if code == 0:
            continue
        reason, column = codes[code]
        if reason == "null_key":
            null_key[column] = int(row["n"])
        elif reason == "out_of_domain":
            out_of_domain[column] = int(row["n"])
        else:
            other[reason] = int(row["n"])
    valid = by_code.get(0)
    used = int(valid["n"]) if valid else 0
    removed_per_cell = int(valid["removed_per_cell"]) if valid else 0
    removed_cells = int(valid["removed_cells"]) if valid else 0
    return Diagnostics(
        rows_in=sum(int(r["n"]) for r in by_code.values()) + removed_per_cell + removed_cells,
        rows_null_key=null_key,
        rows_out_of_domain=out_of_domain,
        rows_null_unit=other["null_unit"],
        rows_hierarchy_mismatch=other[HIERARCHY_MISMATCH],
        rows_invalid_value=other["invalid_value"],
        rows_clamped=int(valid["clamped"]) if valid else 0,
        rows_removed_max_per_cell=removed_per_cell,
        rows_removed_max_cells=removed_cells,
        unit_cells_removed_max_cells=int(valid["pairs_removed"]) if valid else 0,
        rows_used=used,
    )


def raise_on_invalid(diagnostics: Diagnostics, spec: QuerySpec) -> None:
    for domain in spec.cells.domains:
        column = domain.column
        if diagnostics.rows_null_key[column]:
            raise invalid_rows_error(column, "have a null key")
        if diagnostics.rows_out_of_domain[column]:
            raise invalid_rows_error(column, f"have a key outside the declared domain {domain!r}")
    if diagnostics.rows_hierarchy_mismatch:
        raise invalid_rows_error(spec.hierarchy.finest.column, HIERARCHY_RULE)
    if diagnostics.rows_null_unit:
        raise invalid_rows_error(spec.privacy_unit, "have a null privacy unit")
    if diagnostics.rows_invalid_value:
        raise invalid_rows_error(spec.column, "hold null, NaN or infinite values")
