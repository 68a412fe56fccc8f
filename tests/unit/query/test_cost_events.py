"""One cost record, `PrivacyEvent`, from the query through the plan and report into the ledger."""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path

import pytest
from release_specs import SMALL_SPEC

from dp_pipeline import MasterKey, PrivacyAccountant
from dp_pipeline.accounting import PrivacyEvent
from dp_pipeline.mechanisms import DiscreteGaussian, DiscreteLaplace
from dp_pipeline.release.ledger.store import Ledger
from dp_pipeline.release.plan.queries import table_query, table_spec
from dp_pipeline.release.plan.release_plan import plan_release
from dp_pipeline.release.run import Progress, run_release
from dp_pipeline.release.spec.load import load_spec

KEY_HEX = "b59163f6516e8ee81ecc2cfc05e6ebbc7d81b82a9ae660ea6820b535d9e12845"


def test_add_event_records_what_add_records():
    event = PrivacyEvent(DiscreteGaussian(Fraction(9, 2)), (2, 2, 1), 3)
    by_event = PrivacyAccountant().add_event(event)
    by_parts = PrivacyAccountant().add(DiscreteGaussian(Fraction(9, 2)), [2, 2, 1], count=3)
    assert by_event.events == (event,)
    assert by_event.to_dict() == by_parts.to_dict()
    assert by_event.rho() == 3 * Fraction(4 + 4 + 1) / (2 * Fraction(9, 2))


@pytest.mark.parametrize(
    ("event", "error", "message"),
    [
        ((DiscreteGaussian(2), (1,), 1), TypeError, "add_event takes a PrivacyEvent, got tuple"),
        (PrivacyEvent(DiscreteGaussian(2), (1,), 0), ValueError, "count must be an integer >= 1"),
        (
            PrivacyEvent(DiscreteGaussian(2), (0, 0), 1),
            ValueError,
            r"sensitivity must have at least one non-zero shift, got \(0, 0\)",
        ),
        (PrivacyEvent("laplace", (1,), 1), TypeError, "mechanism must be a DiscreteGaussian"),
    ],
)
def test_add_event_refuses_what_add_refuses(event, error, message):
    accountant = PrivacyAccountant()
    with pytest.raises(error, match=message):
        accountant.add_event(event)
    assert accountant.events == ()  # nothing half-recorded


def test_one_event_from_the_query_to_the_ledger_row(tmp_path: Path, monkeypatch):
    monkeypatch.setenv("DP_PIPELINE_MASTER_KEY", KEY_HEX)
    (tmp_path / "small.toml").write_text(SMALL_SPEC.format(tmp=tmp_path))
    spec = load_spec(tmp_path / "small.toml")
    plan = plan_release(spec)
    index = [t.name for t in spec.tables].index("state_income")
    table_plan = plan.tables[index]
    event = table_plan.event

    # The query: the key-free sum the planner costs, and the one the engines run.
    table = spec.table("state_income")
    assert table_query(spec, table).with_noise(event.mechanism).events() == (event,)
    engine_query = table_spec(spec, table, event.mechanism, MasterKey.from_hex(KEY_HEX))
    assert engine_query.events() == (event,)
    # The plan: its accountant holds exactly the tables' events, in table order.
    assert plan.accountant.events == tuple(t.event for t in plan.tables)
    assert table_plan.rho == PrivacyAccountant().add_event(event).rho()

    result = run_release(spec, progress=Progress(quiet=True))

    # The report: its accountant section is the events, its table row reads the event.
    report = json.loads((result.output / "privacy_report.json").read_text())
    recorded = PrivacyAccountant().add_event(event).to_dict()["events"][0]
    assert report["accountant"]["events"][index] == recorded
    row = report["tables"][index]
    assert row["sensitivity"] == list(event.sensitivity)
    assert row["sigma2"] == str(event.mechanism.sigma2)
    assert row["rho"] == str(table_plan.rho)
    # The ledger row: the same event, restored from SQLite.
    (entry,) = Ledger(spec.ledger_path).history(spec.population)
    assert entry.accountant["events"][index] == recorded
    assert PrivacyAccountant.from_dict(entry.accountant).events[index] == event


def test_selection_costs_are_read_from_their_event(tmp_path: Path):
    spec_text = Path(__file__).resolve().parents[3].joinpath("conf/census_selections.toml")
    plan = plan_release(load_spec(spec_text))
    selections = [t for t in plan.tables if t.table.is_selection]
    assert selections
    for table_plan in selections:
        event = table_plan.event
        assert table_plan.epsilon == PrivacyAccountant().add_event(event).pure_epsilon()
        if isinstance(event.mechanism, DiscreteLaplace):  # one-shot: Δ₁ / scale
            assert table_plan.epsilon == Fraction(sum(event.sensitivity)) / event.mechanism.scale
        else:  # r runs of the exponential mechanism
            assert table_plan.epsilon == event.count * event.mechanism.pure_epsilon
    noised = [t for t in plan.tables if not t.table.is_selection]
    assert all(t.epsilon is None for t in noised)
