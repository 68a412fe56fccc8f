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
from decimal import Decimal
from fractions import Fraction
from pathlib import Path
from typing import Any

from dp_pipeline.release.locations import default_key_file, default_ledger
from dp_pipeline.release.spec import selection
from dp_pipeline.release.spec.budget_fields import check_gaussian_delta, read_budget
from dp_pipeline.release.spec.fields import (
    BUDGET_FIELDS,
    check_column,
    check_token,
    read_choice,
    read_domains,
    read_integer,
    read_string,
    show_value,
)
from dp_pipeline.release.spec.hierarchy import (
    HIERARCHY_FIELDS,
    POSTPROCESS_FIELDS,
    PostprocessSpec,
    check_combined_tables,
    read_hierarchy,
    read_postprocess,
)
from dp_pipeline.release.spec.invalid import INVALID_FIELDS, read_invalid_rows
from dp_pipeline.release.spec.limits import (
    MAX_DOMAIN_VALUES,
    MAX_SYNTHETIC_PERSONS,
)
from dp_pipeline.release.spec.model import (
    DEFAULT_RELEASE_CELL_LIMIT,
    ENGINES,
    INPUT_FORMATS,
    MAX_NOISE_PARTITIONS,
    NEIGHBOURING_RELATIONS,
    NOISE_FAMILIES,
    ON_INVALID_RULES,
    ReleaseSpec,
    SpecError,
    format_of_path,
    output_name_clash,
)
from dp_pipeline.release.spec.run_locations import operator_location
from dp_pipeline.release.spec.spark_conf import read_spark_conf
from dp_pipeline.release.spec.tables import read_tables

# read_budget: also imported from here by the session layer.
__all__ = ["load_spec", "parse_spec", "read_budget"]


def load_spec(
    path: str | Path, *, ledger: str | None = None, key_file: str | None = None
) -> ReleaseSpec:
    """Read and validate a TOML release spec (floats are read as exact decimals).

    ``ledger`` / ``key_file``: the operator's (``--ledger`` / ``--key-file``), else the
    dp_pipeline home's; the spec's ``run.ledger`` / ``run.key_file`` must agree.
    """
    path = Path(path)
    try:
        with path.open("rb") as handle:
            document = tomllib.load(handle, parse_float=Decimal)
    except FileNotFoundError:
        raise SpecError([f"spec file {str(path)!r} does not exist"], str(path)) from None
    except tomllib.TOMLDecodeError as error:
        raise SpecError([f"not valid TOML: {error}"], str(path)) from None
    return parse_spec(
        document, source=str(path), base_dir=path.parent, ledger=ledger, key_file=key_file
    )


_SECTIONS: dict[str, tuple[str, ...]] = {
    "release": (
        "id",
        "description",
        "noise",
        "noise_partitions",
        "neighbouring",
        "max_cells",
    ),
    "population": ("name", "cap", "shares_input_with"),
    "privacy_unit": ("column", "each_row", "max_cells_per_table", "max_per_cell"),
    "budget": BUDGET_FIELDS,
    "input": (
        "path",
        "table",
        "format",
        "synthetic_persons",
        "synthetic_seed",
        "on_invalid",
        *INVALID_FIELDS,
    ),
    "output": ("dir",),
    "run": ("engine", "master", "ledger", "key_file", "spark_conf"),
    "domains": (),  # free-form: one entry per key column
    "key_selection": (),  # one sub-table per "from_data" column (spec.selection)
    "hierarchy": HIERARCHY_FIELDS,
    "postprocess": POSTPROCESS_FIELDS,
    "tables": (),  # array of tables, checked below
}
_REQUIRED_SECTIONS = ("release", "population", "privacy_unit", "domains", "tables")


def parse_spec(
    document: dict[str, Any],
    source: str = "spec",
    base_dir: str | Path | None = None,
    *,
    ledger: str | None = None,
    key_file: str | None = None,
) -> ReleaseSpec:
    """Validate a parsed TOML document; raise `SpecError` listing every problem.

    ``base_dir`` is the folder that files named by the spec (the hierarchy's
    mapping, ``run.ledger``, ``run.key_file``) are relative to: the spec file's
    folder (`load_spec`), else the working directory. The ledger and key file are
    the operator's: ``ledger`` / ``key_file`` (the command line's), else the
    dp_pipeline home's; a spec's ``run.ledger`` / ``run.key_file`` naming others is
    refused (`dp_pipeline.release.spec.run_locations`).
    """
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
    malformed: set[str] = set()  # sections that are not tables: their fields go unreported
    for name, allowed in _SECTIONS.items():
        raw = document.get(name, [] if name == "tables" else {})
        if name == "tables":
            sections[name] = raw
            continue
        if not isinstance(raw, dict):
            problems.append(f"{name} = {show_value(raw)}: must be a table ([{name}])")
            malformed.add(name)
            raw = {}
        if allowed:
            for key in raw:
                if key not in allowed:
                    problems.append(
                        f"{name}.{key}: unknown field; allowed fields are {', '.join(allowed)}"
                    )
        sections[name] = raw

    release = sections["release"]
    release_id = read_string(
        release, "id", "release", problems, required="release" not in malformed
    )
    if release_id is not None:
        check_token(release_id, "release.id", problems)
    description = read_string(release, "description", "release", problems) or ""
    noise = read_choice(release, "noise", "release", NOISE_FAMILIES, "discrete_gaussian", problems)
    partitions = read_integer(release, "noise_partitions", "release", problems, default=16)
    if partitions is not None and not 1 <= partitions <= MAX_NOISE_PARTITIONS:
        problems.append(
            f"release.noise_partitions = {partitions}: must be between 1 and {MAX_NOISE_PARTITIONS}"
        )
    neighbouring = read_choice(
        release, "neighbouring", "release", NEIGHBOURING_RELATIONS, "add_remove", problems
    )
    # release.max_cells limits how many cells a table may declare: the cell limit.
    cell_limit = read_integer(
        release, "max_cells", "release", problems, default=DEFAULT_RELEASE_CELL_LIMIT
    )
    if cell_limit is not None and not 1 <= cell_limit <= MAX_DOMAIN_VALUES:
        problems.append(
            f"release.max_cells = {show_value(cell_limit)}: must be between 1 and "
            f"{MAX_DOMAIN_VALUES:,} (2**40; cells are indexed by int64)"
        )
        cell_limit = None

    population_section = sections["population"]
    population = read_string(
        population_section, "name", "population", problems, required="population" not in malformed
    )
    if population is not None:
        check_token(population, "population.name", problems)
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
                f"population.cap = {show_value(raw_cap)}: must be a table such as "
                "{ epsilon = 4, delta = 1e-8 } or { rho = 1 }"
            )
        else:
            cap = read_budget(raw_cap, "population.cap", problems)

    shares_input_with: list[str] = []
    shared = population_section.get("shares_input_with", [])
    if not isinstance(shared, list) or not all(isinstance(name, str) for name in shared):
        problems.append(
            f"population.shares_input_with = {show_value(shared)}: must be a list of "
            'population names, e.g. ["households"]'
        )
    else:
        for name in shared:
            check_token(name, "population.shares_input_with", problems)
            if name == population:
                problems.append(
                    f"population.shares_input_with names {name!r}, this release's own "
                    "population; list only other populations"
                )
        shares_input_with = sorted(set(shared))

    unit = sections["privacy_unit"]
    each_row = unit.get("each_row", False)
    if not isinstance(each_row, bool):
        problems.append(f"privacy_unit.each_row = {show_value(each_row)}: must be true or false")
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
                    f"privacy_unit.{name} = {show_value(unit[name])}: with each_row = true a unit "
                    f"is one row, which lies in one cell of each table; remove the field"
                )
    elif "privacy_unit" in malformed:
        pass  # reported: the section is not a table
    elif "column" not in unit:
        problems.append(
            "privacy_unit.column: required (the column identifying a person or household), "
            "or each_row = true when every row is a different unit"
        )
    else:
        unit_column = read_string(unit, "column", "privacy_unit", problems, required=True)
        if unit_column is not None:
            check_column(unit_column, "privacy_unit.column", problems)
    default_l0 = read_integer(unit, "max_cells_per_table", "privacy_unit", problems, default=1)
    default_linf = read_integer(unit, "max_per_cell", "privacy_unit", problems, default=1)
    for name, value in (("max_cells_per_table", default_l0), ("max_per_cell", default_linf)):
        if value is not None and value < 1:
            problems.append(f"privacy_unit.{name} = {value}: must be >= 1")

    budget = None
    if sections["budget"]:
        budget = read_budget(sections["budget"], "budget", problems, check_fields=False)
    # A [budget] that is present but wrong has its own problem: no "budget: required" too.
    budget_written = "budget" in document

    # Columns written "from_data" have no declared values (`spec.selection`).
    declared_domains, selected, key_selections = selection.read(sections, noise, problems)
    domains = read_domains(declared_domains, problems)
    tables = read_tables(
        sections["tables"],
        domains,
        default_l0 or 1,
        default_linf or 1,
        cell_limit,
        problems,
        declared=set(sections["domains"]),
        selected=selected,
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
        if table.statistic == "sum" and table.value in table.keys:
            problems.append(
                f"tables[{index}].value = {table.value!r}: the summed column cannot also be "
                f"one of the table's keys {list(table.keys)!r} (a key is a category of the "
                "cells, the value the number added up in them); sum another column or "
                "drop it from keys"
            )
        problem = output_name_clash(table, index)
        if problem:
            problems.append(problem)
    raw_input = sections["input"].get("path")
    hierarchy = read_hierarchy(
        sections["hierarchy"],
        domains,
        Path(base_dir or "."),
        problems,
        input_path=raw_input if isinstance(raw_input, str) else "",
    )
    postprocess_flags = read_postprocess(sections["postprocess"], problems)
    grouped = selection.check_tables(sections, selected, budget, cap, problems)
    postprocess = None
    if sections["hierarchy"] and postprocess_flags is None:
        problems.append(
            "hierarchy: only post-processing uses the hierarchy; add a [postprocess] section "
            "(consistent = true) or remove [hierarchy]"
        )
    # Tables grouped by selected keys: [postprocess] was refused above.
    whole = len(tables) == len(sections["tables"]) and not grouped
    if postprocess_flags is not None and tables and whole:
        combined, sum_sets = check_combined_tables(
            tables, domains, hierarchy, unit_column, problems, sums=postprocess_flags["sums"]
        )
        postprocess = PostprocessSpec(**postprocess_flags, tables=combined, sum_sets=sum_sets)
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
    # Rows no table can use (null, unparsable or out-of-domain keys, null units, invalid
    # values, malformed CSV rows): dropped and counted, or under "error" a noisy count of
    # the units having any decides, after the reservation, whether the release publishes.
    on_invalid = read_choice(
        sections["input"], "on_invalid", "input", ON_INVALID_RULES, "drop", problems
    )
    invalid_rows = read_invalid_rows(
        sections["input"], on_invalid, not with_sigma2 or bool(with_share), problems
    )
    invalid_share = [] if invalid_rows is None or invalid_rows.share is None else [invalid_rows]
    # Selections' shares sum with the tables' (their own epsilon and delta come first).
    shared_selections = selection.shares(key_selections, budget, bool(with_sigma2), problems)
    invalid_share += shared_selections
    if tables and with_share and with_sigma2:
        problems.append(
            f"tables: {len(with_share)} table(s) give a share and {len(with_sigma2)} give "
            "sigma2; a release uses shares on every table or sigma2 on every table"
        )
    elif with_share and len(with_share) != len(tables):
        missing = [t.name for t in tables if t.share is None]
        problems.append(f"tables {missing}: share is missing (every table needs a share)")
    elif with_share and len(tables) == len(sections["tables"]):
        total = sum((t.share for t in [*with_share, *invalid_share]), Fraction(0))
        # A selection with its own problem is left out: its share is not judged.
        if total != 1 and len(key_selections) == len(selected):
            problems.append(
                f"tables[*].share: shares sum to {total} "
                f"({' + '.join(str(t.share) for t in [*with_share, *invalid_share])}); "
                "the shares of all tables"
                + (" and input.invalid_share" if invalid_rows and invalid_rows.share else "")
                + (" and key_selection shares" if shared_selections else "")
                + " must sum to exactly 1"
            )
        if not budget_written:
            problems.append(
                "budget: required when tables give shares (set rho, or epsilon and delta)"
            )
    elif tables and not with_sigma2 and len(tables) == len(sections["tables"]):
        # Only when every table was read: a table with its own problem is left out of
        # `tables`, and the split is judged on the tables that are sound.
        problems.append("tables: every table needs a share of the budget or an explicit sigma2")
    if noise == "discrete_gaussian":
        if isinstance(sections["budget"], dict):
            check_gaussian_delta(budget, sections["budget"], "budget", problems)
        if cap is not None:
            check_gaussian_delta(cap, population_section["cap"], "population.cap", problems)
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
    input_path = read_string(inputs, "path", "input", problems) or ""
    input_table = read_string(inputs, "table", "input", problems)
    if input_table is not None:
        input_table = _read_table_name(input_table, input_path, inputs, problems)
    input_format = read_choice(
        inputs, "format", "input", INPUT_FORMATS, format_of_path(input_path) or "parquet", problems
    )
    synthetic_persons = read_integer(
        inputs, "synthetic_persons", "input", problems, default=1_000_000
    )
    if synthetic_persons is not None and not 1 <= synthetic_persons <= MAX_SYNTHETIC_PERSONS:
        problems.append(
            f"input.synthetic_persons = {show_value(synthetic_persons)}: must be between 1 "
            f"and {MAX_SYNTHETIC_PERSONS:,}"
        )
    synthetic_seed = read_integer(inputs, "synthetic_seed", "input", problems, default=2026)
    if synthetic_seed is not None and not 0 <= synthetic_seed < 2**63:
        problems.append(
            f"input.synthetic_seed = {show_value(synthetic_seed)}: must be between 0 and 2**63 - 1"
        )

    output_dir = read_string(sections["output"], "dir", "output", problems) or "out"
    run = sections["run"]
    engine = read_choice(run, "engine", "run", ENGINES, "spark", problems)
    master = read_string(run, "master", "run", problems) or "local[2]"
    # The operator's ledger and key (a spec's own must agree with them): run_locations.
    ledger_path = operator_location(run, "ledger", ledger, default_ledger, base_dir, problems)
    key_file = operator_location(run, "key_file", key_file, default_key_file, base_dir, problems)
    spark_conf = read_spark_conf(run.get("spark_conf", {}), problems)
    if input_table is not None and engine != "spark":
        problems.append(
            f"input.table = {input_table!r}: a catalog table is read by the spark engine; "
            'set engine = "spark" under [run] (or --engine spark)'
        )

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
        on_invalid=on_invalid,
        invalid_rows=invalid_rows,
        output_dir=output_dir,
        engine=engine,
        master=master,
        ledger_path=ledger_path,
        key_file=key_file,
        cell_limit=cell_limit,
        source=source,
        hierarchy=hierarchy,
        postprocess=postprocess,
        shares_input_with=tuple(shares_input_with),
        input_table=input_table,
        spark_conf=spark_conf,
        key_selections=key_selections,
    )


_TABLE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*){0,2}$")


def _read_table_name(name: str, input_path: str, inputs: dict, problems: list[str]) -> str | None:
    """``input.table``: ``name``, ``db.name`` or ``catalog.db.name``, instead of input.path."""
    if not _TABLE_NAME.match(name):
        problems.append(
            f"input.table = {show_value(name)}: must be a table name of the session's "
            "catalog: table, database.table or catalog.database.table (letters, digits, '_')"
        )
        return None
    if input_path:
        problems.append(
            f"input.table = {name!r}: give input.path or input.table, not both (the table's "
            "files are where its catalog says)"
        )
    if "format" in inputs:
        problems.append(
            f"input.format = {show_value(inputs['format'])}: a catalog table has its own "
            "format; remove input.format"
        )
    return name
