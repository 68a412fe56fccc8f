"""Release specs: a TOML file in conf/ -> a frozen, fully validated `ReleaseSpec`.

The spec is read with the stdlib ``tomllib`` with ``parse_float=Decimal``, so a
budget written as ``1e-9`` or ``0.5`` is the exact decimal the author typed:
no binary float ever stands between the file and the privacy parameters.

Every problem found is reported at once in one `SpecError` (a ``ValueError``).
Each line names the field path (``tables[2].share``), the offending value and
the rule, e.g. ``tables[1].share = 7/10: shares of all tables must sum to 1,
they sum to 6/5``. Validation reads no data and touches no ledger, so a bad
spec never spends budget or writes a file.

See docs/spec_reference.md for every field, its default and its rule.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field
from decimal import Decimal
from fractions import Fraction
from pathlib import Path
from typing import Any

from dp_pipeline.query.bounds import sum_units_problem
from dp_pipeline.query.quantile_grid import MAX_QUANTILE_CANDIDATES, quantile_candidate_count
from dp_pipeline.rational import exact_rational

__all__ = [
    "NEIGHBOURING_RELATIONS",
    "NOISE_FAMILIES",
    "SELECTIONS",
    "STATISTICS",
    "Budget",
    "ReleaseSpec",
    "SpecError",
    "TableSpec",
    "load_spec",
    "parse_spec",
]

NOISE_FAMILIES = ("discrete_gaussian", "discrete_laplace")
NEIGHBOURING_RELATIONS = ("add_remove", "replace")
STATISTICS = ("count", "sum", "quantile", "median", "top_k")
# Statistics released by DP selection (the exponential mechanism or one-shot noisy top-k):
# they take a share of the budget, never an explicit sigma2.
SELECTIONS = ("quantile", "median", "top_k")
TOP_K_METHODS = ("peeling", "one_shot")
ENGINES = ("spark", "pandas")
INPUT_FORMATS = ("parquet", "csv")
# A release id names output directories and keys noise streams: keep it a plain token.
_TOKEN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
_COLUMN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
# Released cells are materialised on the driver for the report; beyond this a
# spec is almost certainly a mistake (a key with a continuous domain).
DEFAULT_MAX_CELLS = 20_000_000
MAX_NOISE_PARTITIONS = 4096


class SpecError(ValueError):
    """A release spec broke one or more rules; ``problems`` lists each one."""

    def __init__(self, problems: list[str], source: str = "spec") -> None:
        self.problems = list(problems)
        self.source = source
        lines = "\n".join(f"  - {p}" for p in self.problems)
        super().__init__(f"{source}: {len(self.problems)} problem(s):\n{lines}")


@dataclass(frozen=True)
class Budget:
    """A privacy budget: ρ (zCDP) or (ε, δ) (δ = 0 means pure ε). Exact rationals."""

    rho: Fraction | None = None
    epsilon: Fraction | None = None
    delta: Fraction | None = None

    def describe(self) -> str:
        if self.rho is not None:
            return f"rho={self.rho}"
        return f"epsilon={self.epsilon}, delta={self.delta}"

    def to_dict(self) -> dict[str, str | None]:
        return {
            "rho": _frac_str(self.rho),
            "epsilon": _frac_str(self.epsilon),
            "delta": _frac_str(self.delta),
        }


@dataclass(frozen=True)
class TableSpec:
    """One released table: its key columns (with their full domains) and its statistic.

    count / sum: one noisy value per cell of ``keys``. quantile / median: one
    selected value of ``value`` per cell of ``keys`` (the groups; none = one
    row), chosen from the grid ``lower, lower + granularity, ... <= upper``.
    top_k: the ``k`` most frequent values of the single key column among its
    domain (the candidates), by ``method``.
    """

    name: str
    keys: tuple[str, ...]
    statistic: str  # one of STATISTICS
    value: str | None  # summed column (sum) or the column of a quantile / median
    lower: int | Fraction | None  # sum: clamping bounds (integers); quantile: grid bounds
    upper: int | Fraction | None
    share: Fraction | None  # share of the release budget (all tables, or none)
    sigma2: Fraction | None  # explicit noise parameter instead of a share
    max_cells: int  # L0: cells of this table one privacy unit may touch
    max_per_cell: int  # L∞: rows one privacy unit may contribute to one cell
    cells: int  # product of the key domains' sizes (released rows; top_k: candidates)
    q: Fraction | None = None  # quantile level (median: 1/2)
    granularity: Fraction | None = None  # quantile grid step
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
        """Largest change one privacy unit can make to one cell (before the relation)."""
        if self.statistic == "sum":
            return self.max_per_cell * max(abs(self.lower), abs(self.upper))
        return self.max_per_cell


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
    max_cells: int
    source: str = "spec"

    def with_release_id(self, release_id: str) -> ReleaseSpec:
        """The same spec under another release id (scheduled releases reuse one spec)."""
        problems: list[str] = []
        _check_token(release_id, "release.id", problems)
        if problems:
            raise SpecError(problems, self.source)
        return _replace(self, release_id=release_id)

    def table(self, name: str) -> TableSpec:
        for table in self.tables:
            if table.name == name:
                return table
        raise KeyError(f"spec has no table named {name!r}")


def _replace(spec: ReleaseSpec, **changes: Any) -> ReleaseSpec:
    from dataclasses import replace

    return replace(spec, **changes)


def _frac_str(value: Fraction | None) -> str | None:
    return None if value is None else str(value)


# ----------------------------------------------------------------------------- reading


def load_spec(path: str | Path) -> ReleaseSpec:
    """Read and validate a TOML release spec (floats are read as exact decimals)."""
    path = Path(path)
    try:
        with path.open("rb") as handle:
            document = tomllib.load(handle, parse_float=Decimal)
    except FileNotFoundError:
        raise SpecError([f"spec file {str(path)!r} does not exist"], str(path)) from None
    except tomllib.TOMLDecodeError as error:
        raise SpecError([f"not valid TOML: {error}"], str(path)) from None
    return parse_spec(document, source=str(path))


_SECTIONS: dict[str, tuple[str, ...]] = {
    "release": (
        "id",
        "description",
        "noise",
        "noise_partitions",
        "neighbouring",
        "max_cells",
    ),
    "population": ("name", "cap"),
    "privacy_unit": ("column", "each_row", "max_cells_per_table", "max_per_cell"),
    "budget": ("rho", "epsilon", "delta"),
    "input": ("path", "format", "synthetic_persons", "synthetic_seed"),
    "output": ("dir",),
    "run": ("engine", "master", "ledger", "key_file"),
    "domains": (),  # free-form: one entry per key column
    "tables": (),  # array of tables, checked below
}
_TABLE_FIELDS = (
    "name",
    "keys",
    "statistic",
    "value",
    "lower",
    "upper",
    "share",
    "sigma2",
    "max_cells",
    "max_per_cell",
    "q",
    "granularity",
    "k",
    "method",
)
_REQUIRED_SECTIONS = ("release", "population", "privacy_unit", "domains", "tables")


def parse_spec(document: dict[str, Any], source: str = "spec") -> ReleaseSpec:
    """Validate a parsed TOML document; raise `SpecError` listing every problem."""
    problems: list[str] = []
    if not isinstance(document, dict):
        raise SpecError([f"the spec must be a TOML table, got {type(document).__name__}"], source)
    for key in document:
        if key not in _SECTIONS:
            problems.append(
                f"{key}: unknown field; top-level sections are {', '.join(sorted(_SECTIONS))}"
            )
    for key in _REQUIRED_SECTIONS:
        if key not in document:
            problems.append(f"{key}: required section is missing")
    sections = {}
    for name, allowed in _SECTIONS.items():
        raw = document.get(name, [] if name == "tables" else {})
        if name == "tables":
            sections[name] = raw
            continue
        if not isinstance(raw, dict):
            problems.append(f"{name} = {raw!r}: must be a table ([{name}])")
            raw = {}
        if allowed:
            for key in raw:
                if key not in allowed:
                    problems.append(
                        f"{name}.{key}: unknown field; allowed fields are {', '.join(allowed)}"
                    )
        sections[name] = raw

    release = sections["release"]
    release_id = _string(release, "id", "release", problems, required=True)
    if release_id is not None:
        _check_token(release_id, "release.id", problems)
    description = _string(release, "description", "release", problems) or ""
    noise = _choice(release, "noise", "release", NOISE_FAMILIES, "discrete_gaussian", problems)
    partitions = _integer(release, "noise_partitions", "release", problems, default=16)
    if partitions is not None and not 1 <= partitions <= MAX_NOISE_PARTITIONS:
        problems.append(
            f"release.noise_partitions = {partitions}: must be between 1 and {MAX_NOISE_PARTITIONS}"
        )
    neighbouring = _choice(
        release, "neighbouring", "release", NEIGHBOURING_RELATIONS, "add_remove", problems
    )
    max_cells = _integer(release, "max_cells", "release", problems, default=DEFAULT_MAX_CELLS)
    if max_cells is not None and max_cells < 1:
        problems.append(f"release.max_cells = {max_cells}: must be >= 1")

    population_section = sections["population"]
    population = _string(population_section, "name", "population", problems, required=True)
    if population is not None:
        _check_token(population, "population.name", problems)
    cap = None
    if population_section and "cap" not in population_section:
        problems.append(
            "population.cap: required field is missing (the ledger refuses releases that "
            "would exceed it), e.g. cap = { epsilon = 4, delta = 1e-8 } or cap = { rho = 1 }"
        )
    if "cap" in population_section:
        raw_cap = population_section["cap"]
        if not isinstance(raw_cap, dict):
            problems.append(
                f"population.cap = {raw_cap!r}: must be a table such as "
                "{ epsilon = 4, delta = 1e-8 } or { rho = 1 }"
            )
        else:
            cap = _budget(raw_cap, "population.cap", problems)

    unit = sections["privacy_unit"]
    each_row = unit.get("each_row", False)
    if not isinstance(each_row, bool):
        problems.append(f"privacy_unit.each_row = {_show(each_row)}: must be true or false")
        each_row = False
    unit_column = None
    if each_row:
        # Every row is a different unit (one row per person): nothing to bound.
        if "column" in unit:
            problems.append(
                "privacy_unit: give column (rows of one unit share it) or each_row = true "
                "(every row is a different unit), not both"
            )
        for name in ("max_cells_per_table", "max_per_cell"):
            if name in unit and unit[name] != 1:
                problems.append(
                    f"privacy_unit.{name} = {_show(unit[name])}: with each_row = true a unit "
                    f"is one row, which lies in one cell of each table; remove the field"
                )
    elif "column" not in unit:
        problems.append(
            "privacy_unit.column: required (the column identifying a person or household), "
            "or each_row = true when every row is a different unit"
        )
    else:
        unit_column = _string(unit, "column", "privacy_unit", problems, required=True)
        if unit_column is not None:
            _check_column(unit_column, "privacy_unit.column", problems)
    default_l0 = _integer(unit, "max_cells_per_table", "privacy_unit", problems, default=1)
    default_linf = _integer(unit, "max_per_cell", "privacy_unit", problems, default=1)
    for name, value in (("max_cells_per_table", default_l0), ("max_per_cell", default_linf)):
        if value is not None and value < 1:
            problems.append(f"privacy_unit.{name} = {value}: must be >= 1")

    budget = None
    if sections["budget"]:
        budget = _budget(sections["budget"], "budget", problems)

    domains = _domains(sections["domains"], problems)
    tables = _tables(
        sections["tables"], domains, default_l0 or 1, default_linf or 1, max_cells, problems
    )
    for index, table in enumerate(tables):
        if unit_column is not None and unit_column in (*table.keys, table.value):
            problems.append(
                f"tables[{index}]: column {unit_column!r} is the privacy unit; it cannot be "
                "a key or the value of a table"
            )
        if table.statistic in ("quantile", "median") and table.value in table.keys:
            problems.append(
                f"tables[{index}].value = {table.value!r}: the {table.statistic}'s column "
                "cannot also be one of its group keys"
            )
    if each_row:
        for index, table in enumerate(tables):
            for name in ("max_cells", "max_per_cell"):
                if getattr(table, name) != 1:
                    problems.append(
                        f"tables[{index}].{name} = {getattr(table, name)}: with "
                        f"privacy_unit.each_row = true a unit is one row; remove the field"
                    )

    # Budget split: every table has a share, or every table has an explicit sigma2.
    with_share = [t for t in tables if t.share is not None]
    with_sigma2 = [t for t in tables if t.sigma2 is not None]
    if tables and with_share and with_sigma2:
        problems.append(
            f"tables: {len(with_share)} table(s) give a share and {len(with_sigma2)} give "
            "sigma2; a release uses shares on every table or sigma2 on every table"
        )
    elif tables and with_share and len(with_share) != len(tables):
        missing = [t.name for t in tables if t.share is None]
        problems.append(f"tables {missing}: share is missing (every table needs a share)")
    elif with_share and len(tables) == len(sections["tables"]):
        total = sum((t.share for t in with_share), Fraction(0))
        if total != 1:
            problems.append(
                f"tables[*].share: shares sum to {total} "
                f"({' + '.join(str(t.share) for t in with_share)}); "
                "the shares of all tables must sum to exactly 1"
            )
        if budget is None:
            problems.append(
                "budget: required when tables give shares (set rho, or epsilon and delta)"
            )
    elif tables and not with_sigma2:
        problems.append("tables: every table needs a share of the budget or an explicit sigma2")
    if noise == "discrete_laplace" and budget is not None and budget.rho is not None:
        problems.append(
            f"budget.rho = {budget.rho}: discrete_laplace noise needs an epsilon budget "
            "(pure epsilon, optionally with delta), not rho"
        )
    if noise == "discrete_laplace" and with_sigma2:
        problems.append(
            "tables[*].sigma2: discrete_laplace noise is calibrated from shares of an "
            "epsilon budget; explicit sigma2 is for discrete_gaussian"
        )

    inputs = sections["input"]
    input_path = _string(inputs, "path", "input", problems) or ""
    input_format = _choice(inputs, "format", "input", INPUT_FORMATS, "parquet", problems)
    synthetic_persons = _integer(inputs, "synthetic_persons", "input", problems, default=1_000_000)
    if synthetic_persons is not None and synthetic_persons < 1:
        problems.append(f"input.synthetic_persons = {synthetic_persons}: must be >= 1")
    synthetic_seed = _integer(inputs, "synthetic_seed", "input", problems, default=2026)

    output_dir = _string(sections["output"], "dir", "output", problems) or "out"
    run = sections["run"]
    engine = _choice(run, "engine", "run", ENGINES, "spark", problems)
    master = _string(run, "master", "run", problems) or "local[2]"
    ledger_path = _string(run, "ledger", "run", problems) or ".dp_pipeline/ledger.sqlite"
    key_file = _string(run, "key_file", "run", problems) or ".dp_pipeline/master.key"

    if problems:
        raise SpecError(problems, source)
    return ReleaseSpec(
        release_id=release_id,
        population=population,
        description=description,
        noise=noise,
        noise_partitions=partitions,
        neighbouring=neighbouring,
        privacy_unit=unit_column,
        budget=budget,
        cap=cap,
        domains=domains,
        tables=tuple(tables),
        input_path=input_path,
        input_format=input_format,
        synthetic_persons=synthetic_persons,
        synthetic_seed=synthetic_seed,
        output_dir=output_dir,
        engine=engine,
        master=master,
        ledger_path=ledger_path,
        key_file=key_file,
        max_cells=max_cells,
        source=source,
    )


# ----------------------------------------------------------------------------- fields


def _string(section, key, path, problems, required=False) -> str | None:
    if key not in section:
        if required:
            problems.append(f"{path}.{key}: required field is missing")
        return None
    value = section[key]
    if not isinstance(value, str):
        problems.append(f"{path}.{key} = {value!r}: must be a string")
        return None
    if required and not value.strip():
        problems.append(f"{path}.{key} = {value!r}: must not be empty")
        return None
    return value


def _integer(section, key, path, problems, default=None) -> int | None:
    if key not in section:
        return default
    value = section[key]
    if isinstance(value, bool) or not isinstance(value, int):
        problems.append(f"{path}.{key} = {_show(value)}: must be an integer")
        return None
    return value


def _choice(section, key, path, choices, default, problems) -> str:
    value = section.get(key, default)
    if value not in choices:
        problems.append(f"{path}.{key} = {_show(value)}: must be one of {', '.join(choices)}")
        return default
    return value


def _show(value: Any) -> str:
    return str(value) if isinstance(value, Decimal) else repr(value)


def _rational(value: Any, path: str, problems: list[str]) -> Fraction | None:
    """An exact rational from a TOML int, decimal or 'p/q' string."""
    if isinstance(value, bool):
        problems.append(f"{path} = {value!r}: must be a number or a 'p/q' string")
        return None
    if isinstance(value, int):
        return Fraction(value)
    if isinstance(value, Decimal):
        if not value.is_finite():
            problems.append(f"{path} = {value}: must be finite")
            return None
        return Fraction(value)
    if isinstance(value, str):
        try:
            return exact_rational(value, path)
        except ValueError as error:
            problems.append(f"{path} = {value!r}: {error}")
            return None
    problems.append(f"{path} = {_show(value)}: must be a number or a 'p/q' string")
    return None


def _positive(value: Any, path: str, problems: list[str]) -> Fraction | None:
    exact = _rational(value, path, problems)
    if exact is not None and exact <= 0:
        problems.append(f"{path} = {_show(value)}: must be > 0")
        return None
    return exact


def _budget(section: dict, path: str, problems: list[str]) -> Budget | None:
    for key in section:
        if key not in ("rho", "epsilon", "delta"):
            problems.append(f"{path}.{key}: unknown field; allowed fields are rho, epsilon, delta")
    has_rho = "rho" in section
    has_eps = "epsilon" in section
    if has_rho and (has_eps or "delta" in section):
        problems.append(f"{path}: give rho, or epsilon with delta, not both")
        return None
    if has_rho:
        rho = _positive(section["rho"], f"{path}.rho", problems)
        return None if rho is None else Budget(rho=rho)
    if not has_eps:
        problems.append(f"{path}: needs rho, or epsilon with delta")
        return None
    epsilon = _positive(section["epsilon"], f"{path}.epsilon", problems)
    delta = Fraction(0)
    if "delta" in section:
        delta = _rational(section["delta"], f"{path}.delta", problems)
        if delta is not None and not 0 <= delta < 1:
            problems.append(f"{path}.delta = {_show(section['delta'])}: must be in [0, 1)")
            return None
    if epsilon is None or delta is None:
        return None
    return Budget(epsilon=epsilon, delta=delta)


def _check_token(value: str, path: str, problems: list[str]) -> None:
    if not _TOKEN.match(value):
        problems.append(
            f"{path} = {value!r}: must be 1-128 letters, digits, '.', '_' or '-', "
            "starting with a letter or digit"
        )


def _check_column(value: str, path: str, problems: list[str]) -> None:
    if not _COLUMN.match(value):
        problems.append(f"{path} = {value!r}: must be a column name (letters, digits, '_')")


def _domains(section: dict, problems: list[str]) -> dict[str, range | tuple[Any, ...]]:
    domains: dict[str, range | tuple[Any, ...]] = {}
    for column, raw in section.items():
        path = f"domains.{column}"
        _check_column(column, path, problems)
        if isinstance(raw, dict):
            unknown = [k for k in raw if k not in ("start", "stop")]
            if unknown:
                problems.append(
                    f"{path}.{unknown[0]}: unknown field; a range domain has start and stop"
                )
                continue
            start, stop = raw.get("start"), raw.get("stop")
            if any(isinstance(v, bool) or not isinstance(v, int) for v in (start, stop)):
                problems.append(
                    f"{path} = {raw!r}: a range domain needs integer start and stop (inclusive)"
                )
                continue
            if stop < start:
                problems.append(f"{path} = {raw!r}: empty domain (stop {stop} < start {start})")
                continue
            domains[column] = range(start, stop + 1)  # a Sequence; stays compact
        elif isinstance(raw, list):
            if not raw:
                problems.append(f"{path} = []: empty domain; list every value the column can take")
                continue
            kinds = {type(v) for v in raw}
            if kinds not in ({int}, {str}):
                problems.append(f"{path} = {raw!r}: values must be all integers or all strings")
                continue
            seen: set[Any] = set()
            duplicates = sorted({v for v in raw if v in seen or seen.add(v)}, key=str)
            if duplicates:
                problems.append(
                    f"{path}: value(s) {duplicates!r} appear more than once; "
                    "domain values must be distinct"
                )
                continue
            domains[column] = tuple(raw)
        else:
            problems.append(
                f"{path} = {_show(raw)}: a domain is a list of values or "
                "{ start = ..., stop = ... }"
            )
    return domains


def _tables(raw_tables, domains, default_l0, default_linf, max_cells, problems) -> list[TableSpec]:
    if not isinstance(raw_tables, list) or not all(isinstance(t, dict) for t in raw_tables):
        problems.append("tables: must be an array of tables ([[tables]] entries)")
        return []
    if not raw_tables:
        problems.append("tables: a release needs at least one [[tables]] entry")
        return []
    tables: list[TableSpec] = []
    names: dict[str, int] = {}
    for index, raw in enumerate(raw_tables):
        path = f"tables[{index}]"
        before = len(problems)
        for key in raw:
            if key not in _TABLE_FIELDS:
                problems.append(
                    f"{path}.{key}: unknown field; allowed fields are {', '.join(_TABLE_FIELDS)}"
                )
        name = _string(raw, "name", path, problems, required=True)
        if name is not None:
            _check_token(name, f"{path}.name", problems)
            if name in names:
                problems.append(
                    f"{path}.name = {name!r}: duplicated table name (also tables[{names[name]}])"
                )
            else:
                names[name] = index
        statistic = _choice(raw, "statistic", path, STATISTICS, "count", problems)
        grouped_selection = statistic in ("quantile", "median")
        keys = raw.get("keys", [] if grouped_selection else None)
        if not isinstance(keys, list) or not all(isinstance(k, str) for k in keys):
            rule = (
                "must be a list of column names (the groups; [] or absent for one value)"
                if grouped_selection
                else "must be a non-empty list of column names"
            )
            problems.append(f"{path}.keys = {keys!r}: {rule}")
            keys = []
        elif not keys and not grouped_selection:
            problems.append(f"{path}.keys = []: must be a non-empty list of column names")
        elif len(set(keys)) != len(keys):
            problems.append(f"{path}.keys = {keys!r}: a key column appears twice")
        if statistic == "top_k" and len(keys) > 1:
            problems.append(
                f"{path}.keys = {keys!r}: a top_k table has exactly one key column, whose "
                "domain lists the candidates"
            )
        cells = 1
        for key in keys:
            if key not in domains:
                problems.append(
                    f"{path}.keys: column {key!r} has no domain; declare it under [domains] "
                    "(every released cell must be known before reading data)"
                )
            else:
                cells *= len(domains[key])
        if max_cells is not None and cells > max_cells:
            problems.append(
                f"{path}: {cells} cells exceed release.max_cells = {max_cells}; "
                "coarsen a key or raise the limit"
            )
        value = lower = upper = q = granularity = k = method = None
        if statistic == "sum":
            value = _string(raw, "value", path, problems, required=True)
            if value is not None:
                _check_column(value, f"{path}.value", problems)
            for bound in ("lower", "upper"):
                if bound not in raw:
                    problems.append(
                        f"{path}.{bound}: required for a sum (values are clamped into "
                        "[lower, upper]; bounds never come from the data)"
                    )
                elif isinstance(raw[bound], bool) or not isinstance(raw[bound], int):
                    problems.append(
                        f"{path}.{bound} = {_show(raw[bound])}: must be an integer "
                        "(integer noise needs integer sums)"
                    )
            lower, upper = raw.get("lower"), raw.get("upper")
            if isinstance(lower, int) and isinstance(upper, int) and not lower < upper:
                problems.append(f"{path}: lower = {lower} must be < upper = {upper}")
        elif grouped_selection:
            value, lower, upper, q, granularity = _quantile_fields(
                raw, path, statistic, cells, max_cells, problems
            )
        else:
            for key in ("value", "lower", "upper"):
                if key in raw:
                    problems.append(
                        f"{path}.{key} = {_show(raw[key])}: only sum, quantile and median "
                        f"tables take {key}"
                    )
        if not grouped_selection:
            for key in ("q", "granularity"):
                if key in raw:
                    problems.append(
                        f"{path}.{key} = {_show(raw[key])}: only quantile and median tables "
                        f"take {key}"
                    )
        if statistic == "top_k":
            k = _integer(raw, "k", path, problems)
            if "k" not in raw:
                problems.append(f"{path}.k: required for a top_k table (how many to select)")
            elif k is not None and not 1 <= k <= cells:
                problems.append(
                    f"{path}.k = {k}: must be between 1 and the number of candidates ({cells})"
                )
            method = _choice(raw, "method", path, TOP_K_METHODS, "peeling", problems)
        else:
            for key in ("k", "method"):
                if key in raw:
                    problems.append(
                        f"{path}.{key} = {_show(raw[key])}: only top_k tables take {key}"
                    )
        share = sigma2 = None
        if "share" in raw:
            share = _positive(raw["share"], f"{path}.share", problems)
            if share is not None and share > 1:
                problems.append(f"{path}.share = {_show(raw['share'])}: must be <= 1")
        if "sigma2" in raw:
            if statistic in SELECTIONS:
                problems.append(
                    f"{path}.sigma2 = {_show(raw['sigma2'])}: a {statistic} table is released "
                    "by DP selection, not Gaussian noise; give it a share of the budget"
                )
            else:
                sigma2 = _positive(raw["sigma2"], f"{path}.sigma2", problems)
        if "share" in raw and "sigma2" in raw:
            problems.append(f"{path}: give share or sigma2, not both")
        if grouped_selection:
            # Each unit contributes one value to a quantile (bounded to one row), whatever
            # the privacy_unit defaults say: the rank loss then moves by at most 1.
            for key in ("max_cells", "max_per_cell"):
                if key in raw and raw[key] != 1:
                    problems.append(
                        f"{path}.{key} = {_show(raw[key])}: a {statistic} table takes one value "
                        "per privacy unit; remove the field"
                    )
            l0 = linf = 1
        else:
            l0 = _integer(raw, "max_cells", path, problems, default=default_l0)
            linf = _integer(raw, "max_per_cell", path, problems, default=default_linf)
        for key, bound in (("max_cells", l0), ("max_per_cell", linf)):
            if bound is not None and bound < 1:
                problems.append(f"{path}.{key} = {bound}: must be >= 1")
        if l0 is not None and cells and l0 > cells and not grouped_selection:
            problems.append(f"{path}.max_cells = {l0}: larger than the table's {cells} cells")
        if statistic == "sum" and isinstance(lower, int) and isinstance(upper, int):
            # The sum limits of dp_pipeline.query.exact_sums (granularity 1), as engines apply them.
            side, largest = max(("lower", abs(lower)), ("upper", abs(upper)), key=lambda p: p[1])
            if sum_units_problem(largest, None):
                problems.append(
                    f"{path}.{side} = {raw[side]}: {sum_units_problem(largest, None)}; use "
                    "tighter bounds or sum the column in coarser units (e.g. thousands)"
                )
            elif isinstance(linf, int) and sum_units_problem(largest, linf):
                problems.append(
                    f"{path}.max_per_cell = {linf} with |{side}| = {largest}: "
                    f"{sum_units_problem(largest, linf)}; lower max_per_cell or use tighter bounds"
                )
        if len(problems) == before:
            tables.append(
                TableSpec(
                    name=name,
                    keys=tuple(keys),
                    statistic=statistic,
                    value=value,
                    lower=lower,
                    upper=upper,
                    share=share,
                    sigma2=sigma2,
                    max_cells=l0,
                    max_per_cell=linf,
                    cells=cells,
                    q=q,
                    granularity=granularity,
                    k=k,
                    method=method,
                )
            )
    return tables


def _quantile_fields(raw, path, statistic, groups, max_cells, problems):
    """(value column, lower, upper, q, granularity) of a quantile or median table."""
    value = _string(raw, "value", path, problems, required=True)
    if value is not None:
        _check_column(value, f"{path}.value", problems)
    bounds = []
    for bound in ("lower", "upper"):
        if bound not in raw:
            problems.append(
                f"{path}.{bound}: required for a {statistic} (the candidate grid runs from "
                "lower to upper; bounds never come from the data)"
            )
            bounds.append(None)
        else:
            bounds.append(_rational(raw[bound], f"{path}.{bound}", problems))
    lower, upper = bounds
    if lower is not None and upper is not None and not lower < upper:
        problems.append(f"{path}: lower = {lower} must be < upper = {upper}")
        lower = upper = None
    granularity = Fraction(1)
    if "granularity" in raw:
        granularity = _positive(raw["granularity"], f"{path}.granularity", problems)
    q = Fraction(1, 2)
    if statistic == "median":
        if "q" in raw:
            problems.append(f"{path}.q = {_show(raw['q'])}: a median is q = 1/2; remove q")
    elif "q" not in raw:
        problems.append(f"{path}.q: required for a quantile (a number in [0, 1])")
        q = None
    else:
        q = _rational(raw["q"], f"{path}.q", problems)
        if q is not None and not 0 <= q <= 1:
            problems.append(f"{path}.q = {_show(raw['q'])}: must be in [0, 1]")
            q = None
    if None not in (lower, upper, granularity):
        try:
            candidates = quantile_candidate_count((lower, upper), granularity)
        except ValueError:  # the grid is too fine
            problems.append(
                f"{path}: lower = {lower}, upper = {upper} and granularity = {granularity} give "
                f"more than {MAX_QUANTILE_CANDIDATES} candidates; use a coarser granularity"
            )
            candidates = None
        if candidates is not None and max_cells is not None and groups * candidates > max_cells:
            problems.append(
                f"{path}: {groups} group(s) x {candidates} grid positions = "
                f"{groups * candidates} cells to aggregate exceed release.max_cells = "
                f"{max_cells}; use a coarser granularity or fewer groups"
            )
    return value, lower, upper, q, granularity
