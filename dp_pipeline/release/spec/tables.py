"""Reading and checking the ``[[tables]]`` of a release spec (keys, statistic, bounds, shares).

Appends every problem found to the caller's list (see `dp_pipeline.release.spec.load`).
"""

from __future__ import annotations

from fractions import Fraction

from dp_pipeline.query.quantile_grid import MAX_QUANTILE_CANDIDATES, quantile_candidate_count
from dp_pipeline.release.spec.fields import (
    check_column,
    check_token,
    read_choice,
    read_integer,
    read_positive,
    read_rational,
    read_share,
    read_string,
    show_value,
)
from dp_pipeline.release.spec.limits import SIGMA2_RANGE, check_range
from dp_pipeline.release.spec.model import SELECTIONS, STATISTICS, TOP_K_METHODS, TableSpec
from dp_pipeline.release.spec.statistics import (
    VALUE_STATISTICS,
    check_value_units,
    read_value_fields,
)

__all__ = ["TABLE_FIELDS", "read_quantile_fields", "read_tables"]

TABLE_FIELDS = (
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


def read_tables(
    raw_tables, domains, default_l0, default_linf, cell_limit, problems, declared=(), selected=()
) -> list[TableSpec]:
    """The sound tables (a table with a problem is reported and left out).

    ``declared``: every column written under ``[domains]``, including those whose
    domain had its own problem (a key naming one is not reported a second time).
    ``selected``: the columns whose domain is ``"from_data"``; a table's ``cells`` then
    counts the cells of its declared keys only (its selected keys' values are unknown).
    """
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
            if key not in TABLE_FIELDS:
                problems.append(
                    f"{path}.{key}: unknown field; allowed fields are {', '.join(TABLE_FIELDS)}"
                )
        name = read_string(raw, "name", path, problems, required=True)
        if name is not None:
            check_token(name, f"{path}.name", problems)
            if name in names:
                problems.append(
                    f"{path}.name = {name!r}: duplicated table name (also tables[{names[name]}])"
                )
            else:
                names[name] = index
        statistic = read_choice(raw, "statistic", path, STATISTICS, "count", problems)
        grouped_selection = statistic in ("quantile", "median")
        keys = raw.get("keys", [] if grouped_selection else None)
        if not isinstance(keys, list) or not all(isinstance(k, str) for k in keys):
            rule = (
                "must be a list of column names (the groups; [] or absent for one value)"
                if grouped_selection
                else "must be a non-empty list of column names"
            )
            problems.append(f"{path}.keys = {show_value(keys)}: {rule}")
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
        unread_domain = False  # a key whose domain has its own problem: no cell count
        for key in keys:
            if key in selected:
                continue  # released keys only: the table's size is known after selection
            if key not in domains and key in declared:
                unread_domain = True
            elif key not in domains:
                problems.append(
                    f"{path}.keys: column {key!r} has no domain; declare it under [domains] "
                    "(every released cell must be known before reading data)"
                )
            else:
                cells *= len(domains[key])
        if cell_limit is not None and cells > cell_limit:
            problems.append(
                f"{path}: {cells} cells exceed release.max_cells = {cell_limit}; "
                "coarsen a key or raise the limit"
            )
        value = lower = upper = q = granularity = k = method = None
        if statistic in VALUE_STATISTICS:
            value, lower, upper, granularity = read_value_fields(
                raw, path, statistic, keys, problems
            )
        elif grouped_selection:
            value, lower, upper, q, granularity = read_quantile_fields(
                raw, path, statistic, cells, cell_limit, problems
            )
        else:
            for key in ("value", "lower", "upper"):
                if key in raw:
                    problems.append(
                        f"{path}.{key} = {show_value(raw[key])}: only sum, mean, var, std, "
                        f"quantile and median tables take {key}"
                    )
        if not grouped_selection:
            for key in ("q", "granularity"):
                if key in raw and not (key == "granularity" and statistic in VALUE_STATISTICS):
                    takers = "quantile and median" if key == "q" else "sum, mean, var, std, "
                    takers += "" if key == "q" else "quantile and median"
                    problems.append(
                        f"{path}.{key} = {show_value(raw[key])}: only {takers} tables take {key}"
                    )
        if statistic == "top_k":
            k = read_integer(raw, "k", path, problems)
            if "k" not in raw:
                problems.append(f"{path}.k: required for a top_k table (how many to select)")
            elif k is not None and not unread_domain and not 1 <= k <= cells:
                problems.append(
                    f"{path}.k = {k}: must be between 1 and the number of candidates ({cells})"
                )
            method = read_choice(raw, "method", path, TOP_K_METHODS, "peeling", problems)
        else:
            for key in ("k", "method"):
                if key in raw:
                    problems.append(
                        f"{path}.{key} = {show_value(raw[key])}: only top_k tables take {key}"
                    )
        share = sigma2 = None
        if "share" in raw:
            share = read_share(raw["share"], f"{path}.share", problems)
        if "sigma2" in raw:
            if statistic in SELECTIONS:
                problems.append(
                    f"{path}.sigma2 = {show_value(raw['sigma2'])}: a {statistic} table is released "
                    "by DP selection, not Gaussian noise; give it a share of the budget"
                )
            else:
                sigma2 = read_positive(raw["sigma2"], f"{path}.sigma2", problems)
                problem = sigma2 and check_range(
                    sigma2,
                    show_value(raw["sigma2"]),
                    f"{path}.sigma2",
                    SIGMA2_RANGE,
                    "the discrete Gaussian's variance, in the range a release is planned in",
                )
                if problem:
                    problems.append(problem)
        if "share" in raw and "sigma2" in raw:
            problems.append(f"{path}: give share or sigma2, not both")
        if grouped_selection:
            # Each unit contributes one value to a quantile (bounded to one row), whatever
            # the privacy_unit defaults say: the rank loss then moves by at most 1.
            for key in ("max_cells", "max_per_cell"):
                if key in raw and raw[key] != 1:
                    problems.append(
                        f"{path}.{key} = {show_value(raw[key])}: a {statistic} table takes one "
                        "value per privacy unit; remove the field"
                    )
            l0 = linf = 1
        else:
            l0 = read_integer(raw, "max_cells", path, problems, default=default_l0)
            linf = read_integer(raw, "max_per_cell", path, problems, default=default_linf)
        for key, bound in (("max_cells", l0), ("max_per_cell", linf)):
            if bound is not None and bound < 1:
                problems.append(f"{path}.{key} = {bound}: must be >= 1")
        if (
            l0 is not None
            and not unread_domain
            and l0 > cells
            and not grouped_selection
            and not set(keys) & set(selected)
        ):
            problems.append(f"{path}.max_cells = {l0}: larger than the table's {cells} cells")
        if statistic in VALUE_STATISTICS and None not in (lower, upper):
            bounds = (lower, upper, granularity or Fraction(1))
            check_value_units(raw, path, statistic, bounds, linf, problems)
        if len(problems) == before and not unread_domain:
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


def read_quantile_fields(raw, path, statistic, groups, cell_limit, problems):
    """(value column, lower, upper, q, granularity) of a quantile or median table."""
    value = read_string(raw, "value", path, problems, required=True)
    if value is not None:
        check_column(value, f"{path}.value", problems)
    bounds = []
    for bound in ("lower", "upper"):
        if bound not in raw:
            problems.append(
                f"{path}.{bound}: required for a {statistic} (the candidate grid runs from "
                "lower to upper; bounds never come from the data)"
            )
            bounds.append(None)
        else:
            bounds.append(read_rational(raw[bound], f"{path}.{bound}", problems))
    lower, upper = bounds
    if lower is not None and upper is not None and not lower < upper:
        problems.append(f"{path}: lower = {lower} must be < upper = {upper}")
        lower = upper = None
    granularity = Fraction(1)
    if "granularity" in raw:
        granularity = read_positive(raw["granularity"], f"{path}.granularity", problems)
    q = Fraction(1, 2)
    if statistic == "median":
        if "q" in raw:
            problems.append(f"{path}.q = {show_value(raw['q'])}: a median is q = 1/2; remove q")
    elif "q" not in raw:
        problems.append(f"{path}.q: required for a quantile (a number in [0, 1])")
        q = None
    else:
        q = read_rational(raw["q"], f"{path}.q", problems)
        if q is not None and not 0 <= q <= 1:
            problems.append(f"{path}.q = {show_value(raw['q'])}: must be in [0, 1]")
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
        if candidates is not None and cell_limit is not None and groups * candidates > cell_limit:
            problems.append(
                f"{path}: {groups} group(s) x {candidates} grid positions = "
                f"{groups * candidates} cells to aggregate exceed release.max_cells = "
                f"{cell_limit}; use a coarser granularity or fewer groups"
            )
    return value, lower, upper, q, granularity
