"""What selections cost in a release: the bounded-range curve against their pure ε.

    PYTHONPATH=. python bench/bench_selections.py [conf/census_selections.toml]

Plans the spec (calibration included), then certifies ε at several δ for the plan's
mechanisms twice: with its selections composed by their exact bounded-range privacy curve
(what the accountant does) and as they were composed before: by randomized response at
their pure ε, capped with the rest by the zCDP conversion of ρ = ε²/8 per run. Then k
identical selections alone, against the zCDP conversion of ρ = kε²/8. CPU seconds.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from fractions import Fraction

from dp_pipeline import BaseTwoExponential
from dp_pipeline.accounting import PrivacyAccountant, PrivacyEvent, zcdp_to_epsilon
from dp_pipeline.release.plan.release_plan import plan_release
from dp_pipeline.release.spec.load import load_spec

DELTAS = (1e-10, 1e-8, 1e-6)


@dataclass(frozen=True)
class _AsBefore:
    """A selection known by its pure ε and its ρ = ε²/8 only (no bounded-range curve)."""

    pure_epsilon: Fraction

    def zcdp_rho(self) -> Fraction:
        return self.pure_epsilon**2 / 8


def _as_before(events) -> PrivacyAccountant:
    accountant = PrivacyAccountant()
    for event in events:
        mechanism = event.mechanism
        if isinstance(mechanism, BaseTwoExponential):
            before = _AsBefore(mechanism.pure_epsilon)
            event = PrivacyEvent(before, event.sensitivity, event.count)
        accountant.add_event(event)
    return accountant


def main() -> None:
    path = sys.argv[1] if len(sys.argv) > 1 else "conf/census_selections.toml"
    start = time.process_time()
    plan = plan_release(load_spec(path))
    seconds = time.process_time() - start
    print(f"{path}: planned in {seconds:.3f} s CPU")
    for table in plan.to_dict()["tables"]:
        noise = table.get("sigma2") or table.get("scale") or table.get("epsilon")
        print(f"  {table['name']}: {table['mechanism']} {noise} (runs {table.get('runs', 1)})")
    events = plan.accountant.events
    print("\n| δ | ε, selections by bounded range | ε, selections as before | saving |")
    print("|---|---|---|---|")
    for delta in DELTAS:
        new = PrivacyAccountant.from_dict(plan.accountant.to_dict()).epsilon(delta)
        old = _as_before(events).epsilon(delta)
        saving = 1 - new.upper / old.upper
        print(
            f"| {delta:g} | {new.upper:.6g} ({new.method}) | {old.upper:.6g} ({old.method}) "
            f"| {saving:.1%} |"
        )
    print("\n| k selections at ε = 0.1, alone | ε(1e-6) bounded range | as before | zCDP kε²/8 |")
    print("|---|---|---|---|")
    mechanism = BaseTwoExponential(Fraction(1, 10))
    for k in (1, 5, 20, 100):
        new = PrivacyAccountant().add(mechanism, count=k).epsilon(1e-6)
        old = PrivacyAccountant().add(_AsBefore(mechanism.pure_epsilon), count=k).epsilon(1e-6)
        zcdp = zcdp_to_epsilon(k * float(mechanism.pure_epsilon) ** 2 / 8, 1e-6)
        print(f"| {k} | {new.upper:.5g} ({new.method}) | {old.upper:.5g} | {zcdp:.5g} |")


if __name__ == "__main__":
    main()
