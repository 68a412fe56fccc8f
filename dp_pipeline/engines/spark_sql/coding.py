"""Spark SQL rules of a query: schema checks, invalid-row reason codes, cell index, clamping.

The Spark SQL dialect of the rules `dp_pipeline.engines.numpy_rules` applies with
numpy; `tests/unit/engines/test_spark_engine.py` and the contract tests demand the same cells,
reason codes and clamped value units. No Python runs per row.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import functions as sf
from pyspark.sql.types import (
    ByteType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    NumericType,
    ShortType,
    StringType,
)

from dp_pipeline.engines.numpy_rules import KEY_LIMIT
from dp_pipeline.errors import DPTypeError, DPValueError, InternalError
from dp_pipeline.query.exact_sums import MAX_SUM_UNITS, SUM_LIMIT
from dp_pipeline.query.hierarchy import HIERARCHY_MISMATCH, HierarchyRule
from dp_pipeline.query.quantile_grid import quantile_candidate_count
from dp_pipeline.query.spec import QuerySpec
from dp_pipeline.udfs.noise import CELL_COLUMN

UNIT_COLUMN = "_dp_unit"
VALUE_UNITS_COLUMN = "_dp_value_units"
CLAMPED_COLUMN = "_dp_clamped"
UNIT_ROWS_COLUMN = "_dp_unit_rows"
DEFERRED_COLUMN = "_dp_deferred"
HIERARCHY_COLUMN = "_dp_breaks_hierarchy_"  # + the rule's key: true where a row breaks it


# Explicit domains up to this size are looked up with a CASE expression (no join).
CASE_LIST_LIMIT = 64


INTEGRAL_TYPES = (ByteType, ShortType, IntegerType, LongType)
# An integer key column with missing values often arrives as floating point (pandas, Parquet).
FRACTIONAL_TYPES = (FloatType, DoubleType)
# The decimal sums (`SumRule.decimal`) use DECIMAL(38,0): a bigint sum raises (ANSI) or wraps.
EXACT_TYPE = "decimal(38,0)"
S_HIGH_COLUMN = "_dp_s_high"
S_LOW_COLUMN = "_dp_s_low"
TRUE_S_HIGH_COLUMN = "_dp_true_s_high"
TRUE_S_LOW_COLUMN = "_dp_true_s_low"
AGGREGATE_COLUMNS = ("n", "s", "clamped", "removed_per_cell", "removed_cells", "pairs_removed")
TRUE_COLUMNS = ("true_n", "true_s")

# Value units v (|v| <= MAX_SUM_UNITS = 2**31) are summed as two long limbs,
# v = high * 2**LIMB_BITS + low with 0 <= low < 2**LIMB_BITS, so |high| <= 2**15.
LIMB_BITS = 16
# Limb sums of at most this many rows are exact: sum(low) <= 2**47 * (2**16 - 1) < 2**63
# and |sum(high)| <= 2**47 * 2**15 = 2**62. Every partial Spark forms sums a subset of
# one cell's rows, so no partial wraps or raises either.
LIMB_ROWS = 2**47
if not (MAX_SUM_UNITS >> LIMB_BITS <= 2**15 and LIMB_ROWS * (2**LIMB_BITS - 1) < 2**63):
    raise InternalError("the limb split no longer keeps every partial sum inside int64")


@dataclass(frozen=True)
class SumRule:
    """How the Spark SQL path sums value units exactly: two long limbs, or DECIMAL(38,0).

    Both give the exact integer total of every cell (then `clamped_sum`), so the
    choice changes speed, never results. A limb sum (`limbs`) is exact while a
    cell has at most `LIMB_ROWS` rows, and costs about half a DECIMAL(38,0) sum;
    `decimal` is exact for any row count (below ``2**63`` rows a total is under
    ``2**94 < 10**38``). Each sum is a pair of columns (high, low), the total
    ``high * scale + low``; the decimal rule keeps its sum in ``high`` and a null
    ``low``. Limb sums use ``try_sum`` so a cell beyond `LIMB_ROWS` rows yields a
    null instead of raising; the caller checks the row counts and then sums again
    with `decimal`.
    """

    high_type: str
    scale: int

    @classmethod
    def limbs(cls) -> SumRule:
        return cls("long", 2**LIMB_BITS)

    @classmethod
    def decimal(cls) -> SumRule:
        return cls(EXACT_TYPE, 1)

    @property
    def is_limbs(self) -> bool:
        return self.scale != 1

    def terms(self, value) -> tuple:
        """(high, low) row terms of a long column of value units (nulls stay null)."""
        if self.is_limbs:
            low_mask = sf.lit(2**LIMB_BITS - 1).cast("long")
            return sf.shiftright(value, LIMB_BITS), value.bitwiseAND(low_mask)
        return value.cast(EXACT_TYPE), sf.lit(None).cast("long")

    def zeros(self) -> tuple:
        """(high, low) of an empty sum."""
        return sf.lit(0).cast(self.high_type), sf.lit(0).cast("long")

    def sums(self, high, low) -> tuple:
        """(high, low) aggregate columns summing the terms (or partial sums) ``high``, ``low``."""
        total = sf.try_sum if self.is_limbs else sf.sum
        zero_high, zero_low = self.zeros()
        return (
            sf.coalesce(total(high), zero_high),
            sf.coalesce(total(low), zero_low),
        )

    def exact(self, high, low):
        """The exact DECIMAL(38,0) total ``high * scale + low`` of summed limbs (per cell)."""
        return high.cast(EXACT_TYPE) * sf.lit(self.scale).cast(EXACT_TYPE) + low.cast(EXACT_TYPE)


def table_tag(index: int) -> str:
    return f"_{index}"


def exact_sum(column):
    """The sum of an integer column as DECIMAL(38,0): exact, it never wraps or raises.

    The summed units are at most 2**31 in absolute value (`dp_pipeline.query.exact_sums`),
    so any sum of fewer than 2**63 rows is below 2**94 < 10**38, the type's range.
    """
    return sf.coalesce(sf.sum(column.cast(EXACT_TYPE)), sf.lit(0).cast(EXACT_TYPE))


def clamped_sum(column):
    """An exact DECIMAL(38,0) cell total clamped into [-2**62, 2**62], as a long.

    The public pre-noise clamp of `dp_pipeline.query.exact_sums`, applied to the final
    totals only (clamping partials would not be exact); the cast cannot fail.
    """
    low, high = sf.lit(-SUM_LIMIT).cast(EXACT_TYPE), sf.lit(SUM_LIMIT).cast(EXACT_TYPE)
    return sf.least(sf.greatest(column, low), high).cast("long")


def check_schema(df, spec: QuerySpec) -> None:
    fields = {f.name: f.dataType for f in df.schema.fields}

    def need(name: str, role: str):
        if name not in fields:
            raise DPValueError(
                f"{role} column {name!r} is not in the DataFrame; its columns are {df.columns}"
            )
        return fields[name]

    hierarchy = spec.hierarchy.domains if spec.hierarchy is not None else ()
    for domain in (*spec.cells.domains, *hierarchy):
        kind = need(domain.column, "key")
        if domain.kind == "int" and not isinstance(kind, (*INTEGRAL_TYPES, *FRACTIONAL_TYPES)):
            raise DPTypeError(
                f"key column {domain.column!r} has Spark type {kind.simpleString()} but its "
                f"domain holds integers; it must have an integer type (or a floating-point "
                f"type holding integers and NaN)"
            )
        if domain.kind == "str" and not isinstance(kind, StringType):
            raise DPTypeError(
                f"key column {domain.column!r} has Spark type {kind.simpleString()} but its "
                f"domain holds strings; it must have a string type"
            )
    if spec.privacy_unit is not None:
        kind = need(spec.privacy_unit, "privacy_unit")
        if not isinstance(kind, (*INTEGRAL_TYPES, StringType)):
            raise DPTypeError(
                f"privacy_unit column {spec.privacy_unit!r} has Spark type "
                f"{kind.simpleString()}; it must hold integers or strings"
            )
    if spec.column is not None:
        kind = need(spec.column, "summed")
        if not isinstance(kind, NumericType):
            raise DPTypeError(
                f"summed column {spec.column!r} has Spark type {kind.simpleString()}; "
                f"it must be numeric"
            )


def reason_codes(spec: QuerySpec) -> dict[int, tuple[str, str]]:
    """Negative cell codes of dropped rows -> (reason, column)."""
    codes = {}
    for i, column in enumerate(spec.cells.columns):
        codes[-(2 * i + 1)] = ("null_key", column)
        codes[-(2 * i + 2)] = ("out_of_domain", column)
    k = len(spec.cells.columns)
    codes[-(2 * k + 1)] = ("null_unit", spec.privacy_unit or "")
    codes[-(2 * k + 2)] = ("invalid_value", spec.column or "")
    if spec.hierarchy is not None:
        codes[-(2 * k + 3)] = (HIERARCHY_MISMATCH, spec.hierarchy.finest.column)
    return codes


def key_position(df, domain, tag: str, index: int):
    """(df, null condition, position column: null where null or outside ``domain``).

    `dp_pipeline.engines.numpy_rules.integral_keys` for a floating-point integer key:
    NaN is a null key, a non-integer (or ±inf, or beyond ±2**62) is outside the domain.
    """
    column = sf.col(domain.column)
    missing = column.isNull()
    if domain.kind == "int" and isinstance(df.schema[domain.column].dataType, FRACTIONAL_TYPES):
        missing = missing | sf.isnan(column)
        integral = (sf.rint(column) == column) & (sf.abs(column) <= sf.lit(KEY_LIMIT))
        column = sf.when(integral, column.cast("long"))
    if domain.is_range:
        pos = sf.when(
            (column >= sf.lit(domain.start)) & (column < sf.lit(domain.stop)),
            column.cast("long") - sf.lit(domain.start).cast("long"),
        )
    else:
        df, pos = list_position(df, domain, column, tag, index)
    return df, missing, pos


def hierarchy_broken(df, rule: HierarchyRule, tag: str):
    """(df, condition: the row breaks ``rule``), the Spark SQL dialect of
    `dp_pipeline.engines.numpy_rules.hierarchy_breaks`.

    The finest position (null where null or outside its domain) indexes one array
    literal of ancestor positions per coarser level: a lookup, no join or shuffle
    (an explicit domain of more than `CASE_LIST_LIMIT` values is a broadcast join).
    """
    positions = []
    for j, domain in enumerate(rule.domains):
        df, _, pos = key_position(df, domain, tag, j)
        positions.append(pos)
    finest, *coarser = positions
    broken = finest.isNull()
    for ancestors, pos in zip(rule.ancestors, coarser, strict=True):
        # One string literal, folded into one array literal by the optimizer: sf.lit of a
        # list costs a py4j call per element, and an array(...) expression of thousands of
        # children slows the analysis of every later step of the plan.
        text = f"[{','.join(str(int(a)) for a in ancestors.tolist())}]"
        table = sf.from_json(sf.lit(text), "array<int>")
        broken = broken | pos.isNull() | (sf.get(table, finest.cast("int")) != pos)
    return df, broken


def list_position(df, domain, column, tag: str, index: int):
    """(df, position column) of an explicit-list domain: CASE for short lists, else a join."""
    cast = (lambda c: c.cast("long")) if domain.kind == "int" else (lambda c: c)
    values = (
        [int(v) for v in domain.values] if domain.kind == "int" else [str(v) for v in domain.values]
    )
    if len(values) <= CASE_LIST_LIMIT:
        position = None
        for j, value in enumerate(values):
            condition = cast(column) == sf.lit(value)
            branch = sf.lit(j).cast("long")
            position = (
                sf.when(condition, branch) if position is None else position.when(condition, branch)
            )
        return df, position
    value_name, pos_name = f"_dp_domain{tag}_{index}_value", f"_dp_domain{tag}_{index}_pos"
    kind = "long" if domain.kind == "int" else "string"
    lookup = df.sparkSession.createDataFrame(
        [(v, j) for j, v in enumerate(values)], f"{value_name} {kind}, {pos_name} long"
    )
    df = df.join(sf.broadcast(lookup), cast(column) == sf.col(value_name), "left").drop(value_name)
    return df, sf.col(pos_name)


def invalid_number(column: str):
    """(``column`` as double, a condition: null, NaN or infinite): rows no aggregate takes."""
    value = sf.col(column).cast("double")
    infinite = (value == sf.lit(float("inf"))) | (value == sf.lit(float("-inf")))
    return value, value.isNull() | sf.isnan(value) | infinite


def quantile_position(column: str, bounds, granularity):
    """Spark column: the grid position of ``column`` (null where null, NaN or infinite).

    The same IEEE operations as `dp_pipeline.query.quantile_grid.quantile_positions`, so both
    engines bin every value identically.
    """

    value, invalid = invalid_number(column)
    low, high = (float(b) for b in bounds)
    last = quantile_candidate_count(bounds, granularity) - 1
    clamped = sf.least(sf.greatest(value, sf.lit(low)), sf.lit(high))
    raw = sf.floor((clamped - sf.lit(low)) / sf.lit(float(granularity)))
    position = sf.least(sf.greatest(raw, sf.lit(0).cast("long")), sf.lit(last).cast("long"))
    return sf.when(~invalid, position)


def with_derived(df, derived):
    """``df`` with the ``derived`` grid-position columns (``{name: GridPosition}``) added."""
    for name, grid in (derived or {}).items():
        df = df.withColumn(name, quantile_position(grid.column, grid.bounds, grid.granularity))
    return df


def coded_rows(df, spec: QuerySpec, tag: str = "", *, null_units: bool = True):
    """df plus the cell column ``_cell<tag>``: the cell index, or a negative reason code.

    Sums also get ``_dp_value_units<tag>`` (clamped value in granularity units)
    and ``_dp_clamped<tag>`` (1 if clamping changed it). ``tag`` keeps the
    columns of several queries over one DataFrame apart. ``null_units=False``
    (the caller has checked that the privacy unit is never null) leaves out the
    null-unit test, so the coding does not read the unit column.
    """
    cell = sf.lit(0).cast("long")
    code = None
    k = len(spec.cells.columns)
    for i, (domain, stride) in enumerate(zip(spec.cells.domains, spec.cells.strides, strict=True)):
        df, missing, pos = key_position(df, domain, tag, i)
        cell = cell + pos * sf.lit(stride).cast("long")
        null_branch = (missing, sf.lit(-(2 * i + 1)).cast("long"))
        ood_branch = (pos.isNull(), sf.lit(-(2 * i + 2)).cast("long"))
        for condition, value in (null_branch, ood_branch):
            code = sf.when(condition, value) if code is None else code.when(condition, value)
    if spec.hierarchy is not None:
        # One column per rule, shared by the tables of a consistent set (each row is
        # looked up once); after the key checks, before the unit and value checks.
        name = HIERARCHY_COLUMN + spec.hierarchy.key[:16]
        if name not in df.columns:
            df, broken = hierarchy_broken(df, spec.hierarchy, name)
            df = df.withColumn(name, broken)
        code = code.when(sf.col(name), sf.lit(-(2 * k + 3)).cast("long"))
    if spec.privacy_unit is not None and null_units:
        code = code.when(sf.col(spec.privacy_unit).isNull(), sf.lit(-(2 * k + 1)).cast("long"))
    if spec.column is not None:
        value, invalid = invalid_number(spec.column)
        code = code.when(invalid, sf.lit(-(2 * k + 2)).cast("long"))
        bounds = spec.value_bounds
        # The same IEEE operations as dp_pipeline.engines.pandas.aggregate._value_units.
        raw = sf.rint(
            value * sf.lit(float(bounds.scale_denominator)) / sf.lit(float(bounds.scale_numerator))
        )
        lower, upper = float(bounds.lower_units), float(bounds.upper_units)
        df = df.withColumn(
            VALUE_UNITS_COLUMN + tag,
            sf.when(
                ~invalid, sf.least(sf.greatest(raw, sf.lit(lower)), sf.lit(upper)).cast("long")
            ),
        ).withColumn(
            CLAMPED_COLUMN + tag,
            sf.when(~invalid & ((raw < sf.lit(lower)) | (raw > sf.lit(upper))), 1).otherwise(0),
        )
    return df.withColumn(CELL_COLUMN + tag, code.otherwise(cell))
