"""Keys selected from the data: ``[domains] merchant = "from_data"`` and its ``[key_selection]``.

A key column whose domain is ``"from_data"`` has no declared values: the release
publishes only the keys that pass a private key selection (`dp_pipeline.keyselect`:
each privacy unit keeps at most ``max_cells`` of its keys, each key's count of distinct
units gets exact discrete noise, and a key is released when its noisy count clears an
exact threshold). The selection is one event of the release's plan, composed by the
accountant with every table. Its settings, one sub-table per column::

    [domains]
    merchant = "from_data"

    [key_selection.merchant]
    type = "string"        # or "integer": how the column is read and published
    max_cells = 1          # keys one privacy unit may hold (the keyed bounding keeps its first)
    share = "1/4"          # of the release budget (epsilon and delta), or:
    # epsilon = 0.5        # its own (epsilon, delta), taken off [budget]
    # delta = 1e-10
    noise = "laplace"      # or "gaussian"; default: the release's noise family
    max_units = 50000      # optional, public: the most distinct units a key can have
                           # (default for synthetic input: its persons); a plan whose
                           # threshold is above it could release no key and is refused

Rules checked here, before anything is read: a selected key is a key of count or sum
tables only (the other statistics need their candidates declared), never a level of
the ``[hierarchy]`` nor a key of tables ``[postprocess]`` makes consistent (both need
the declared domain), and not with ``input.on_invalid = "error"`` (its decision counts
out-of-domain rows). Rows whose selected key is null (or not of the column's type) are
invalid rows: dropped, never a key of their own.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from fractions import Fraction

from dp_pipeline.keyselect.plan import MAX_CELLS_LIMIT, MAX_EPSILON, MIN_DELTA
from dp_pipeline.release.spec.fields import (
    check_column,
    read_choice,
    read_integer,
    read_positive,
    read_rational,
    read_share,
    show_value,
)

__all__ = [
    "FROM_DATA",
    "KEY_SELECTION_FIELDS",
    "KEY_TYPES",
    "SELECTION_NOISES",
    "KeySelectionSpec",
    "check_selected_tables",
    "check_tables",
    "from_data_columns",
    "read",
    "read_key_selections",
    "selection_budget_problems",
    "shares",
]

FROM_DATA = "from_data"
KEY_SELECTION_FIELDS = ("type", "max_cells", "share", "epsilon", "delta", "noise", "max_units")
KEY_TYPES = ("string", "integer")
SELECTION_NOISES = ("laplace", "gaussian")
# The release's noise family -> the selection's default noise.
_DEFAULT_NOISE = {"discrete_laplace": "laplace", "discrete_gaussian": "gaussian"}
# Statistics whose tables may group by a selected key.
SELECTABLE_STATISTICS = ("count", "sum")


@dataclass(frozen=True)
class KeySelectionSpec:
    """The settings of one key column selected from the data (exact rationals).

    Exactly one of ``share`` (of the release's (ε, δ) budget) and (``epsilon``,
    ``delta``) (its own) is set.
    """

    column: str
    type: str  # "string" or "integer"
    max_cells: int
    noise: str  # "laplace" or "gaussian"
    share: Fraction | None
    epsilon: Fraction | None
    delta: Fraction | None
    max_units: int | None = None

    def to_dict(self) -> dict:
        return {
            "column": self.column,
            "type": self.type,
            "max_cells": self.max_cells,
            "noise": self.noise,
            "share": None if self.share is None else str(self.share),
            "epsilon": None if self.epsilon is None else str(self.epsilon),
            "delta": None if self.delta is None else str(self.delta),
            "max_units": self.max_units,
        }


def from_data_columns(domains_section: dict) -> set[str]:
    """The columns written ``"from_data"`` under ``[domains]``."""
    return {column for column, raw in domains_section.items() if raw == FROM_DATA}


def read_key_selections(
    section: object,
    selected: set[str],
    release_noise: str,
    problems: list[str],
    declared: Collection[str] = (),
) -> dict[str, KeySelectionSpec]:
    """``[key_selection.<column>]`` of every ``"from_data"`` column (problems appended);
    ``declared``: the columns with declared values (settings for one are refused)."""
    if not isinstance(section, dict):
        problems.append(
            f"key_selection = {show_value(section)}: must be a table of one sub-table per "
            'column whose domain is "from_data" ([key_selection.<column>])'
        )
        return {}
    for column in section:
        if column in declared:
            problems.append(
                f"key_selection.{column}: column {column!r} has a declared domain under "
                "[domains]; a key's values are declared or selected from the data, not both: "
                f'remove [key_selection.{column}] or write {column} = "from_data"'
            )
        elif column not in selected:
            problems.append(
                f"key_selection.{column}: column {column!r} is not selected from the data; "
                f'write {column} = "from_data" under [domains], or remove this section'
            )
    result = {}
    for column in sorted(selected):
        path = f"key_selection.{column}"
        check_column(column, f"domains.{column}", problems)
        raw = section.get(column)
        if raw is None:
            problems.append(
                f'{path}: required for a key whose domain is "from_data" (at least its share '
                "of the budget, e.g. [key_selection." + column + '] share = "1/4", or its own '
                "epsilon and delta)"
            )
            continue
        if not isinstance(raw, dict):
            problems.append(
                f"{path} = {show_value(raw)}: must be a table of the selection's fields"
            )
            continue
        before = len(problems)
        selection = _read_one(raw, column, path, release_noise, problems)
        if len(problems) == before:
            result[column] = selection
    return result


def _read_one(raw: dict, column: str, path: str, release_noise: str, problems: list[str]):
    for key in raw:
        if key not in KEY_SELECTION_FIELDS:
            problems.append(
                f"{path}.{key}: unknown field; allowed fields are {', '.join(KEY_SELECTION_FIELDS)}"
            )
    kind = read_choice(raw, "type", path, KEY_TYPES, "string", problems)
    max_cells = read_integer(raw, "max_cells", path, problems, default=1)
    if max_cells is not None and not 1 <= max_cells <= MAX_CELLS_LIMIT:
        problems.append(
            f"{path}.max_cells = {max_cells}: must be between 1 and {MAX_CELLS_LIMIT}, the "
            "largest for which the selection's delta is certified (the keyed bounding keeps "
            "each unit's first max_cells keys)"
        )
    noise = read_choice(
        raw, "noise", path, SELECTION_NOISES, _DEFAULT_NOISE.get(release_noise, "laplace"), problems
    )
    if release_noise == "discrete_laplace" and noise != "laplace":
        problems.append(
            f"{path}.noise = {show_value(noise)}: a discrete_laplace release selects keys with "
            'laplace noise (its tables are pure epsilon); write noise = "laplace"'
        )
    share = epsilon = delta = None
    if "share" in raw:
        share = read_share(raw["share"], f"{path}.share", problems)
    own = [name for name in ("epsilon", "delta") if name in raw]
    if "share" in raw and own:
        problems.append(
            f"{path}: give share (of the release's budget) or epsilon and delta (its own), not both"
        )
    elif "share" not in raw and len(own) != 2:
        problems.append(
            f"{path}: give share (of the release's budget) or both epsilon and delta (its own)"
        )
    if "epsilon" in raw:
        epsilon = read_positive(raw["epsilon"], f"{path}.epsilon", problems)
        if epsilon is not None and epsilon > MAX_EPSILON:
            problems.append(
                f"{path}.epsilon = {show_value(raw['epsilon'])}: must be at most {MAX_EPSILON} "
                "(the selection's certified exponentials stop there)"
            )
    if "delta" in raw:
        delta = read_rational(raw["delta"], f"{path}.delta", problems)
        if delta is not None and not MIN_DELTA <= delta < 1:
            problems.append(
                f"{path}.delta = {show_value(raw['delta'])}: must be at least 2**-100 and below "
                "1 (a key held by one unit is released with probability about delta)"
            )
    max_units = read_integer(raw, "max_units", path, problems)
    if max_units is not None and max_units < 1:
        problems.append(
            f"{path}.max_units = {max_units}: must be >= 1 (the most distinct units a key "
            "can have, e.g. the population's size)"
        )
    return KeySelectionSpec(column, kind, max_cells, noise, share, epsilon, delta, max_units)


def check_selected_tables(
    raw_tables: object,
    selected: set[str],
    *,
    hierarchy_levels: tuple[str, ...],
    postprocess: bool,
    on_invalid: str,
    budget,
    cap,
    problems: list[str],
) -> None:
    """The rules a release with selected keys must follow (module docstring)."""
    if not selected:
        return
    tables = raw_tables if isinstance(raw_tables, list) else []
    used: set[str] = set()
    for index, raw in enumerate(tables):
        if not isinstance(raw, dict) or not isinstance(raw.get("keys"), list):
            continue
        keys = [key for key in raw["keys"] if isinstance(key, str) and key in selected]
        if not keys:
            continue
        used.update(keys)
        statistic = raw.get("statistic", "count")
        if statistic not in SELECTABLE_STATISTICS:
            problems.append(
                f"tables[{index}].keys: column {keys[0]!r} is selected from the data "
                f'("from_data"); a {show_value(statistic)} table needs its candidates '
                "declared; only count and sum tables group by a selected key"
            )
        elif postprocess:
            problems.append(
                f"tables[{index}].keys: column {keys[0]!r} is selected from the data "
                '("from_data"); [postprocess] makes count tables consistent over declared '
                "domains only; declare the column's domain or remove [postprocess]"
            )
    for column in sorted(selected):
        if column in hierarchy_levels:
            problems.append(
                f'domains.{column} = "from_data": column {column!r} is a level of '
                "[hierarchy] (its mapping needs the declared values); declare its domain"
            )
        if column not in used:
            problems.append(
                f'domains.{column} = "from_data": no count or sum table groups by {column!r}; '
                "remove it (a selection nobody uses would still spend budget)"
            )
    if on_invalid == "error":
        problems.append(
            'input.on_invalid = "error": not available with keys selected from the data '
            '(rows of keys the selection does not release are not invalid); use "drop"'
        )
    for path, value in (("budget", budget), ("population.cap", cap)):
        if value is not None and value.rho is not None:
            problems.append(
                f"{path}.rho = {value.rho}: a key selection has no zCDP rho (a key held by one "
                "unit is released with a small probability); give epsilon and delta"
            )
        elif path == "budget" and value is not None and not value.delta:
            problems.append(
                f"{path}.delta = 0: a key selection needs delta > 0 (a key held by one unit "
                "is released with probability about delta)"
            )


def selection_budget_problems(selections: dict, budget, explicit_sigma2: bool) -> list[str]:
    """How the selections' budgets fit the release's: a share needs a [budget] to share
    (not tables with explicit sigma2); their own (epsilon, delta) must leave some budget
    to the tables, which share what is left."""
    problems = []
    own = [s for s in selections.values() if s.share is None and s.epsilon is not None]
    for selection in selections.values():
        if selection.share is not None and (explicit_sigma2 or budget is None):
            problems.append(
                f"key_selection.{selection.column}.share = {selection.share}: the release has "
                "no [budget] to share (its tables give sigma2); give the selection its own "
                "epsilon and delta"
            )
    if own and budget is not None and budget.epsilon is not None and not explicit_sigma2:
        epsilon = sum((s.epsilon for s in own), Fraction(0))
        delta = sum((s.delta for s in own if s.delta is not None), Fraction(0))
        if epsilon >= budget.epsilon or delta >= (budget.delta or 0):
            problems.append(
                f"key_selection: the selections' own epsilon = {epsilon} and delta = {delta} "
                f"leave nothing of budget.epsilon = {budget.epsilon}, budget.delta = "
                f"{budget.delta} for the tables; lower them or use shares"
            )
    return problems


def read(sections: dict, release_noise: str, problems: list[str]):
    """(the ``[domains]`` entries with declared values, the ``"from_data"`` columns, their
    `KeySelectionSpec` by column) of a spec's sections."""
    selected = from_data_columns(sections["domains"])
    declared = {k: v for k, v in sections["domains"].items() if k not in selected}
    selections = read_key_selections(
        sections["key_selection"], selected, release_noise, problems, declared
    )
    return declared, selected, selections


def check_tables(sections: dict, selected: set[str], budget, cap, problems: list[str]) -> bool:
    """`check_selected_tables` on a spec's sections; whether a table groups by a selected key."""
    levels = sections["hierarchy"].get("levels", [])
    check_selected_tables(
        sections["tables"],
        selected,
        hierarchy_levels=tuple(levels) if isinstance(levels, list) else (),
        postprocess=bool(sections["postprocess"]),
        on_invalid=sections["input"].get("on_invalid", "drop"),
        budget=budget,
        cap=cap,
        problems=problems,
    )
    tables = sections["tables"] if isinstance(sections["tables"], list) else []
    return any(
        isinstance(t, dict) and isinstance(t.get("keys"), list) and set(t["keys"]) & selected
        for t in tables
        if all(isinstance(k, str) for k in t.get("keys") or [])
    )


def shares(selections: dict, budget, explicit_sigma2: bool, problems: list[str]) -> list:
    """The selections with a share (they sum with the tables'), after
    `selection_budget_problems`."""
    problems += selection_budget_problems(selections, budget, explicit_sigma2)
    return [s for s in selections.values() if s.share is not None]
