"""The validated release spec as values: `ReleaseSpec`, `TableSpec`, `Budget`, `SpecError`.

Frozen and exact (rationals, never floats); `dp_pipeline.release.spec.load` builds
them from TOML and is the only place that checks the rules they satisfy.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from dp_pipeline.errors import DPKeyError, SpecError
from dp_pipeline.query.quantile_grid import TOP_K_METHODS, quantile_candidate_count
from dp_pipeline.query.sensitivity import sensitivity_vector
from dp_pipeline.release.spec.fields import check_token
from dp_pipeline.release.spec.hierarchy import HierarchySpec, PostprocessSpec
from dp_pipeline.release.spec.invalid import InvalidRowsSpec
from dp_pipeline.release.spec.selection import KeySelectionSpec
from dp_pipeline.release.spec.spark_conf import SparkConf

__all__ = [
    "DEFAULT_RELEASE_CELL_LIMIT",
    "ENGINES",
    "INPUT_FORMATS",
    "MAX_NOISE_PARTITIONS",
    "NEIGHBOURING_RELATIONS",
    "NOISE_FAMILIES",
    "RESERVED_COLUMNS",
    "SELECTIONS",
    "STATISTICS",
    "TOP_K_METHODS",
    "Budget",
    "ReleaseSpec",
    "SpecError",
    "TableSpec",
    "format_of_path",
    "fraction_text",
    "output_name_clash",
    "replaced",
]

NOISE_FAMILIES = ("discrete_gaussian", "discrete_laplace")
NEIGHBOURING_RELATIONS = ("add_remove", "replace")
STATISTICS = ("count", "sum", "mean", "var", "std", "quantile", "median", "top_k")
# Statistics released by DP selection (the exponential mechanism or one-shot noisy top-k):
# they take a share of the budget, never an explicit sigma2.
SELECTIONS = ("quantile", "median", "top_k")
ENGINES = ("spark", "pandas")
INPUT_FORMATS = ("parquet", "csv")
# input.on_invalid: "drop" invalid rows and count them in the non-private diagnostics,
# or ("error") refuse a release when a noisy, accounted count of the privacy units with
# an invalid row is above input.invalid_threshold (`dp_pipeline.release.tables.invalid_rows`).
ON_INVALID_RULES = ("drop", "error")


# Columns a release adds beside a table's keys (its published file, and the frames the
# engines and the report build): a key of the same name would be overwritten or clash.
# The engines' own helper columns start with INTERNAL_PREFIX.
RESERVED_COLUMNS = {
    "count": ("value", "raw_value", "true_value", "true_n"),
    "sum": ("value", "raw_value", "true_value", "true_n"),
    "mean": ("value", "true_value"),
    "var": ("value", "true_value"),
    "std": ("value", "true_value"),
    "quantile": ("value", "true_value", "rank_error"),
    "median": ("value", "true_value", "rank_error"),
    "top_k": ("rank", "count", "true_count", "in_true_top_k"),
}
INTERNAL_PREFIX = "_dp_"


def output_name_clash(table: TableSpec, index: int) -> str | None:
    """The problem of a key column named like a column the release adds (None: no clash)."""
    reserved = RESERVED_COLUMNS[table.statistic]
    clashes = [
        # Spark resolves column names without regard to case.
        key
        for key in table.keys
        if key.lower() in reserved or key.lower().startswith(INTERNAL_PREFIX)
    ]
    if not clashes:
        return None
    return (
        f"tables[{index}].keys: table {table.name!r} has key column {clashes[0]!r}, a name "
        f"the release uses for its own columns; a {table.statistic} table's key columns "
        f"cannot be named {', '.join(reserved)} or start with {INTERNAL_PREFIX!r}; rename "
        "the column in the input (and under [domains])"
    )


def format_of_path(path: str) -> str | None:
    """The input format a path's name says (``*.csv``, ``*.parquet``), or None."""
    name = str(path).lower()
    if name.endswith(".csv"):
        return "csv"
    if name.endswith(".parquet"):
        return "parquet"
    return None


# A release id names output directories and keys noise streams: keep it a plain token.


# Released cells are materialised on the driver for the report; beyond this a
# spec is almost certainly a mistake (a key with a continuous domain).
DEFAULT_RELEASE_CELL_LIMIT = 20_000_000
MAX_NOISE_PARTITIONS = 4096


@dataclass(frozen=True)
class Budget:
    """A privacy budget: ρ (zCDP) or (ε, δ) (δ = 0 means pure ε). Exact rationals."""

    rho: Fraction | None = None
    epsilon: Fraction | None = None
    delta: Fraction | None = None
    # δ above the large-δ limit accepted on purpose; not part of the canonical spec
    # (it changes no published number), read by the ledger when it records a new cap.
    allow_large_delta: bool = field(default=False, compare=False)

    def describe(self) -> str:
        if self.rho is not None:
            return f"rho={self.rho}"
        return f"epsilon={self.epsilon}, delta={self.delta}"

    def to_dict(self) -> dict[str, str | None]:
        return {
            "rho": fraction_text(self.rho),
            "epsilon": fraction_text(self.epsilon),
            "delta": fraction_text(self.delta),
        }


@dataclass(frozen=True)
class TableSpec:
    """One released table: its key columns (with their full domains) and its statistic.

    count / sum: one noisy value per cell of ``keys``. mean / var / std: one value per
    cell post-processed from a noisy count and noisy clamped sums (of the values, or of
    the centred values and their squares; `dp_pipeline.release.plan.moments`). Sums, means,
    variances: values clamped into ``[lower, upper]`` and rounded to ``granularity``
    (None for a sum: 1). quantile / median: one
    selected value of ``value`` per cell of ``keys`` (the groups; none = one
    row), chosen from the grid ``lower, lower + granularity, ... <= upper``.
    top_k: the ``k`` most frequent values of the single key column among its
    domain (the candidates), by ``method``.
    """

    name: str
    keys: tuple[str, ...]
    statistic: str  # one of STATISTICS
    value: str | None  # summed column (sum) or the column of a quantile / median
    lower: int | Fraction | None  # sum, mean, var, std: clamping bounds; quantile: grid bounds
    upper: int | Fraction | None
    share: Fraction | None  # share of the release budget (all tables, or none)
    sigma2: Fraction | None  # explicit noise parameter instead of a share
    max_cells: int  # L0: cells of this table one privacy unit may touch
    max_per_cell: int  # L∞: rows one privacy unit may contribute to one cell
    cells: int  # product of the key domains' sizes (released rows; top_k: candidates)
    q: Fraction | None = None  # quantile level (median: 1/2)
    granularity: Fraction | None = None  # quantile grid step; a sum's, mean's, var's rounding
    k: int | None = None  # top_k
    method: str | None = None  # top_k: "peeling" or "one_shot"

    @property
    def is_selection(self) -> bool:
        return self.statistic in SELECTIONS

    @property
    def candidates(self) -> int:
        """Outcomes the selection chooses from (quantile grid size; top_k: the domain)."""
        if self.statistic in ("quantile", "median"):
            return quantile_candidate_count((self.lower, self.upper), self.granularity)
        return self.cells

    @property
    def per_cell_bound(self) -> int:
        """Largest change adding or removing one privacy unit can make to one cell.

        An entry of `dp_pipeline.query.sensitivity.sensitivity_vector` under add/remove
        (the rule is written once there).
        """
        statistic = "sum" if self.statistic == "sum" else "count"
        # A sum's bounds in granularity units (the noised integers' unit).
        step = Fraction(1) if self.granularity is None else self.granularity
        return sensitivity_vector(
            statistic,
            max_cells=1,
            max_per_cell=self.max_per_cell,
            neighbouring="add_remove",
            cells=1,
            lower=int(self.lower / step) if statistic == "sum" else None,
            upper=int(self.upper / step) if statistic == "sum" else None,
        )[0]


@dataclass(frozen=True)
class ReleaseSpec:
    """A validated release spec. Construct with `load_spec` or `parse_spec`."""

    release_id: str
    population: str
    description: str
    noise: str
    noise_partitions: int
    neighbouring: str
    privacy_unit: str | None  # None: privacy_unit.each_row (every row its own unit)
    budget: Budget | None
    cap: Budget | None
    domains: dict[str, range | tuple[Any, ...]] = field(hash=False)
    tables: tuple[TableSpec, ...]
    input_path: str
    input_format: str
    synthetic_persons: int
    synthetic_seed: int
    output_dir: str
    engine: str
    master: str
    ledger_path: str
    key_file: str
    cell_limit: int  # release.max_cells: cells one table may declare (not an L0 bound)
    source: str = "spec"
    hierarchy: HierarchySpec | None = None  # [hierarchy]: public geography levels
    postprocess: PostprocessSpec | None = None  # [postprocess]: consistent count tables
    on_invalid: str = "drop"  # input.on_invalid: a gate on publication, never on the numbers
    # on_invalid = "error": the noisy invalid-row count's noise and threshold (else None).
    invalid_rows: InvalidRowsSpec | None = None
    # population.shares_input_with: populations this release's input may also be
    # recorded under in the ledger (an explicit, recorded override of its refusal).
    shares_input_with: tuple[str, ...] = ()
    # input.table: a table of the Spark session's catalog read instead of input_path.
    input_table: str | None = None
    # [run.spark_conf] (and --conf): settings of the Spark session; repr hides secrets.
    spark_conf: SparkConf = field(default_factory=SparkConf)
    # [domains] column = "from_data": each such column's selection settings
    # (`dp_pipeline.release.spec.selection`); its released keys replace a declared domain.
    key_selections: dict[str, KeySelectionSpec] = field(default_factory=dict, hash=False)

    def with_release_id(self, release_id: str) -> ReleaseSpec:
        """The same spec under another release id (scheduled releases reuse one spec)."""
        problems: list[str] = []
        check_token(release_id, "release.id", problems)
        if problems:
            raise SpecError(problems, self.source)
        return replaced(self, release_id=release_id)

    def typed_domain(self, column: str) -> range | tuple[Any, ...]:
        """The key column's declared domain, or for a key selected from the data a
        one-value stand-in of its ``key_selection`` type (what its kind is read from)."""
        if column in self.key_selections:
            return range(1) if self.key_selections[column].type == "integer" else ("",)
        return self.domains[column]

    def table(self, name: str) -> TableSpec:
        for table in self.tables:
            if table.name == name:
                return table
        raise DPKeyError(f"spec has no table named {name!r}")


def replaced(spec: ReleaseSpec, **changes: Any) -> ReleaseSpec:
    from dataclasses import replace

    return replace(spec, **changes)


def fraction_text(value: Fraction | None) -> str | None:
    return None if value is None else str(value)


# ----------------------------------------------------------------------------- reading
