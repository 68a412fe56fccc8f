"""Keys selected from the data in release specs: the ``from_data`` domain, its
``[key_selection]`` settings, every refusal before anything is read, and the plan
(the selection's event composed with the tables by the accountant).
"""

from __future__ import annotations

import copy
from decimal import Decimal
from fractions import Fraction
from pathlib import Path

import pytest

from dp_pipeline.accounting.events import KeySelection
from dp_pipeline.errors import PlanError
from dp_pipeline.keyselect import plan_selection
from dp_pipeline.release.cli import main
from dp_pipeline.release.plan.key_selections import selection_plans
from dp_pipeline.release.plan.release_plan import plan_release
from dp_pipeline.release.plan.text import format_plan
from dp_pipeline.release.spec.load import load_spec, parse_spec
from dp_pipeline.release.spec.model import SpecError

ROOT = Path(__file__).resolve().parents[4]

BASE = {
    "release": {"id": "pay-1"},
    "population": {"name": "payers", "cap": {"epsilon": 8, "delta": Decimal("1e-7")}},
    "privacy_unit": {"column": "payer_id"},
    "budget": {"epsilon": 2, "delta": Decimal("1e-8")},
    "domains": {"merchant": "from_data", "channel": ["web", "shop"]},
    "key_selection": {"merchant": {"share": "1/4", "max_cells": 2}},
    "tables": [
        {"name": "by_merchant", "keys": ["merchant"], "share": "1/2"},
        {"name": "by_merchant_channel", "keys": ["merchant", "channel"], "share": "1/4"},
    ],
}


def spec_of(**changes) -> dict:
    raw = copy.deepcopy(BASE)
    for section, value in changes.items():
        if value is None:
            raw.pop(section, None)
        else:
            raw[section] = value
    return raw


def problems_of(raw: dict) -> list[str]:
    with pytest.raises(SpecError) as caught:
        parse_spec(raw)
    return caught.value.problems


def test_from_data_key_is_read_with_its_settings():
    spec = parse_spec(spec_of())
    (selection,) = spec.key_selections.values()
    assert (selection.column, selection.type, selection.max_cells) == ("merchant", "string", 2)
    assert selection.share == Fraction(1, 4) and selection.noise == "gaussian"
    assert "merchant" not in spec.domains  # no declared values
    assert spec.table("by_merchant_channel").cells == 2  # cells per released merchant


def test_selection_without_settings_is_refused():
    assert problems_of(spec_of(key_selection=None)) == [
        'key_selection.merchant: required for a key whose domain is "from_data" (at least its '
        'share of the budget, e.g. [key_selection.merchant] share = "1/4", or its own epsilon '
        "and delta)"
    ]


def test_settings_for_a_declared_column_are_refused():
    raw = spec_of(key_selection={"merchant": {"share": "1/4"}, "channel": {"share": "1/4"}})
    assert (
        "key_selection.channel: column 'channel' has a declared domain under [domains]; a key's "
        "values are declared or selected from the data, not both: remove "
        '[key_selection.channel] or write channel = "from_data"'
    ) in problems_of(raw)
    raw["key_selection"] = {"merchant": {"share": "1/4"}, "shop": {"share": "1/4"}}
    assert (
        "key_selection.shop: column 'shop' is not selected from the data; write shop = "
        '"from_data" under [domains], or remove this section'
    ) in problems_of(raw)


def test_max_cells_above_the_certified_limit_is_refused():
    raw = spec_of(key_selection={"merchant": {"share": "1/4", "max_cells": 1001}})
    assert problems_of(raw) == [
        "key_selection.merchant.max_cells = 1001: must be between 1 and 1000, the largest for "
        "which the selection's delta is certified (the keyed bounding keeps each unit's first "
        "max_cells keys)"
    ]


def test_share_and_own_budget_together_are_refused():
    raw = spec_of(
        key_selection={"merchant": {"share": "1/4", "epsilon": 1, "delta": Decimal("1e-9")}}
    )
    assert problems_of(raw) == [
        "key_selection.merchant: give share (of the release's budget) or epsilon and delta "
        "(its own), not both"
    ]


def test_selection_shares_count_in_the_sum_of_shares():
    raw = spec_of(key_selection={"merchant": {"share": "1/2"}})
    assert problems_of(raw) == [
        "tables[*].share: shares sum to 5/4 (1/2 + 1/4 + 1/2); the shares of all tables and "
        "key_selection shares must sum to exactly 1"
    ]


def test_unknown_selection_field_is_refused():
    raw = spec_of(key_selection={"merchant": {"share": "1/4", "threshold": 5}})
    assert problems_of(raw) == [
        "key_selection.merchant.threshold: unknown field; allowed fields are type, max_cells, "
        "share, epsilon, delta, noise, max_units"
    ]


def test_from_data_on_a_hierarchy_level_is_refused(tmp_path):
    (tmp_path / "map.csv").write_text("merchant,region\n")
    raw = spec_of(
        hierarchy={"levels": ["region", "merchant"], "mapping": "map.csv"},
        postprocess={"consistent": True},
    )
    raw["domains"]["region"] = ["north", "south"]
    problems = problems_of(raw)
    assert (
        "domains.merchant = \"from_data\": column 'merchant' is a level of [hierarchy] (its "
        "mapping needs the declared values); declare its domain"
    ) in problems


def test_from_data_in_a_consistent_release_is_refused():
    problems = problems_of(spec_of(postprocess={"consistent": True}))
    assert (
        "tables[0].keys: column 'merchant' is selected from the data (\"from_data\"); "
        "[postprocess] makes count tables consistent over declared domains only; declare the "
        "column's domain or remove [postprocess]"
    ) in problems


def test_from_data_in_a_top_k_table_is_refused():
    raw = spec_of()
    raw["tables"][1] = {
        "name": "top",
        "keys": ["merchant"],
        "statistic": "top_k",
        "k": 3,
        "share": "1/4",
    }
    assert (
        "tables[1].keys: column 'merchant' is selected from the data (\"from_data\"); a "
        "'top_k' table needs its candidates declared; only count and sum tables group by a "
        "selected key"
    ) in problems_of(raw)


def test_selection_needs_an_epsilon_delta_budget():
    raw = spec_of(budget={"rho": Decimal("0.5")})
    assert (
        "budget.rho = 1/2: a key selection has no zCDP rho (a key held by one unit is released "
        "with a small probability); give epsilon and delta"
    ) in problems_of(raw)


def test_selection_refuses_on_invalid_error():
    raw = spec_of()
    raw["input"] = {"on_invalid": "error", "invalid_share": "1/8", "invalid_threshold": 10}
    assert (
        'input.on_invalid = "error": not available with keys selected from the data (rows of '
        'keys the selection does not release are not invalid); use "drop"'
    ) in problems_of(raw)


def test_unused_selection_is_refused():
    raw = spec_of()
    raw["domains"]["shop"] = "from_data"
    raw["key_selection"]["shop"] = {"share": "1/8"}
    assert (
        "domains.shop = \"from_data\": no count or sum table groups by 'shop'; remove it (a "
        "selection nobody uses would still spend budget)"
    ) in problems_of(raw)


def test_laplace_release_keeps_laplace_selection():
    raw = spec_of()
    raw["release"]["noise"] = "discrete_laplace"
    raw["key_selection"]["merchant"]["noise"] = "gaussian"
    assert problems_of(raw) == [
        "key_selection.merchant.noise = 'gaussian': a discrete_laplace release selects keys "
        'with laplace noise (its tables are pure epsilon); write noise = "laplace"'
    ]


# ----------------------------------------------------------------------------- the plan


def test_plan_composes_the_selection_with_the_tables():
    plan = plan_release(parse_spec(spec_of()), input_present=False)
    (selection,) = selection_plans(plan)
    # Its share of the budget: (2/4, 1e-8/4), planned by the selection core itself.
    expected = plan_selection(
        noise="gaussian",
        epsilon=Fraction(1, 2),
        delta=Fraction(1, 4 * 10**8),
        max_cells=2,
        neighbouring="add_remove",
    )
    assert selection.selection == expected and selection.kept is None
    events = [event.mechanism for event in plan.accountant.events]
    assert sum(isinstance(m, KeySelection) for m in events) == 1 and len(events) == 3
    # The whole release, selection included, within the budget; the selection costs δ.
    assert plan.delta_tight.upper <= 1e-8
    tables_alone = plan_release(parse_spec(spec_of()), input_present=False).accountant.__class__()
    for table in plan.tables:
        tables_alone.add_event(table.event)
    assert plan.delta_tight.upper > tables_alone.delta(Fraction(2)).upper
    assert plan.rho is None  # a selection has no finite ρ
    report = plan.to_dict()["key_selections"][0]
    assert report["threshold"] == expected.threshold and report["keys_kept"] is None


def test_tables_spend_what_the_selection_leaves():
    """Laplace release: each table's scale is its share of ε, the selection's share apart."""
    raw = spec_of()
    raw["release"]["noise"] = "discrete_laplace"
    raw["key_selection"]["merchant"]["max_cells"] = 2
    plan = plan_release(parse_spec(raw), input_present=False)
    by_merchant = plan.table("by_merchant")
    # max_cells_per_table 1, one row: sensitivity 1, ε = 1/2 · 2 = 1, scale 1.
    assert by_merchant.mechanism.scale == 1
    assert selection_plans(plan)[0].selection.epsilon == Fraction(1, 2)
    assert plan.table("by_merchant").table.share == Fraction(1, 2)  # as written


def test_own_budget_is_taken_off_the_top():
    raw = spec_of(
        key_selection={"merchant": {"epsilon": 1, "delta": Decimal("5e-9"), "max_cells": 2}}
    )
    raw["tables"][0]["share"] = "3/4"
    raw["release"]["noise"] = "discrete_laplace"
    raw["key_selection"]["merchant"]["noise"] = "laplace"
    plan = plan_release(parse_spec(raw), input_present=False)
    # The tables share ε - 1 = 1: 3/4 and 1/4 of it.
    assert plan.table("by_merchant").mechanism.scale == Fraction(4, 3)
    assert selection_plans(plan)[0].selection.delta == Fraction(5, 10**9)


def test_plan_text_prints_the_threshold():
    plan = plan_release(parse_spec(spec_of()), input_present=False)
    text = format_plan(plan)
    threshold = selection_plans(plan)[0].selection.threshold
    assert (
        f"key selection of 'merchant': a key is released when its noisy count of distinct "
        f"units reaches {threshold} (gaussian sigma2"
    ) in text
    assert "by_merchant_channel         2 x kept" in text


def test_budget_too_small_is_refused_at_plan_time():
    raw = spec_of(
        key_selection={"merchant": {"epsilon": Decimal("1e-6"), "delta": Decimal("1e-9")}}
    )
    raw["tables"][0]["share"] = "3/4"
    with pytest.raises(PlanError) as caught:
        plan_release(parse_spec(raw), input_present=False)
    assert str(caught.value).startswith(
        "key_selection.merchant: epsilon=1/1000000, delta=1e-09, max_cells=1: budget too small "
        "for key selection ("
    )
    assert str(caught.value).endswith(
        "so no key could be released; raise epsilon or delta, or lower max_cells"
    )


def test_threshold_above_max_units_is_refused_at_plan_time():
    raw = spec_of(key_selection={"merchant": {"share": "1/4", "max_cells": 2, "max_units": 40}})
    threshold = selection_plans(plan_release(parse_spec(spec_of()), input_present=False))[0]
    threshold = threshold.selection.threshold
    with pytest.raises(PlanError) as caught:
        plan_release(parse_spec(raw), input_present=False)
    least = str(caught.value).split("epsilon >= ")[1].split(" ")[0]
    assert str(caught.value) == (
        "key_selection.merchant: epsilon=1/2, delta=2.5e-09, max_cells=2: budget too small for "
        f"key selection: its threshold is {threshold} distinct units, above max_units=40, so no "
        f"key could be released; epsilon >= {least} would release a key held by 40 units with "
        "probability at least 1/2 (or raise delta, or lower max_cells)"
    )
    assert float(least) > 0.5


def test_synthetic_input_bounds_the_units_a_key_can_have():
    raw = spec_of()
    raw["input"] = {"synthetic_persons": 50}  # no key can be held by more than 50 persons
    with pytest.raises(PlanError, match="above max_units=50, so no key could be released"):
        plan_release(parse_spec(raw), input_present=False)


def test_cli_plan_prints_the_threshold_and_refuses_a_too_small_budget(tmp_path, capsys):
    spec = ROOT / "conf" / "merchant_payments.toml"
    assert main(["plan", str(spec)]) == 0
    shown = capsys.readouterr().out
    threshold = selection_plans(plan_release(load_spec(spec), input_present=False))[0]
    assert f"distinct units reaches {threshold.selection.threshold} (gaussian" in shown
    small = tmp_path / "small.toml"
    small.write_text(spec.read_text().replace('share = "1/4"', 'share = "1/4"\nmax_units = 60', 1))
    assert main(["plan", str(small)]) != 0
    refused = capsys.readouterr()
    shown = refused.err + refused.out
    assert "key_selection.merchant: epsilon=1/2, delta=2.5e-09, max_cells=2: budget too" in shown
    assert "above max_units=60, so no key could be released; epsilon >= " in shown


def test_a_release_without_selected_keys_reports_as_before():
    raw = spec_of(key_selection=None)
    raw["domains"]["merchant"] = ["a", "b"]
    raw["tables"][0]["share"] = "3/4"
    plan = plan_release(parse_spec(raw), input_present=False)
    assert "key_selections" not in plan.to_dict()
    assert selection_plans(plan) == () and "key selection" not in format_plan(plan)
