"""A plan checked against the ledger: what the population spent, what it costs, what is left.

``dp-release plan --ledger`` answers, before any data is read, the question
``dp-release run`` answers by reserving: does this release fit what is left of its
population's cap? The answer is computed as `Ledger.reserve` computes it: the
same composition (`dp_pipeline.release.ledger.budget.compose_accountants`), the same
upper-bound check (`within_cap`), the same release-id rules
(`dp_pipeline.release.ledger.records.check_reuse`), on a read-only view of the
ledger (`dp_pipeline.release.ledger.view.read_ledger`), so the file is never changed.
The run's input fingerprint is not known to a plan: a release id already recorded is
compared on every other part of its identity, and counted as the same release if those
match (``run`` also checks the input and key). The rows summed are verified under the
ledger's master key when the plan has it, as a run verifies them; otherwise the answer
says they are unverified (`dp_pipeline.release.ledger.verification`).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from fractions import Fraction

from dp_pipeline.digest import digest_of
from dp_pipeline.randomness import MasterKey
from dp_pipeline.release.ledger.budget import (
    Spend,
    cap_dict,
    compose_accountants,
    describe_cap,
    left_text,
    measure_spend,
    within_cap,
)
from dp_pipeline.release.ledger.identity import ReleaseIdentity, release_identity
from dp_pipeline.release.ledger.records import ReleaseIdReuseError, canonical_json, check_reuse
from dp_pipeline.release.ledger.verification import RowsCheck
from dp_pipeline.release.ledger.view import read_ledger
from dp_pipeline.release.plan.release_plan import ReleasePlan, fitting_budget_text
from dp_pipeline.release.spec.model import ReleaseSpec

__all__ = ["LedgerCheck", "check_against_ledger"]

# Parts of a release's identity that only a run knows (it reads the input and the key).
_RUN_ONLY_PARTS = ("input data", "master key")


@dataclass(frozen=True)
class LedgerCheck:
    """A release measured against its population's cap in a ledger (read only).

    ``outcome``: "new" (charged if run), "already_committed" or "resumed" (the id
    is recorded with this spec: no new spend), or "refused" (``refusal`` says why,
    in the words of ``run``). ``spent`` / ``cost`` / ``after`` are the accountant's
    brackets at the cap (None: nothing). ``largest`` names the largest budget that
    fits when a new release does not.
    """

    path: str
    population: str
    cap: dict
    committed: int
    reserved: int
    spent: Spend | None
    cost: Spend | None
    after: Spend | None
    outcome: str
    fits: bool
    refusal: str | None = None
    largest: str | None = None
    rows: RowsCheck | None = None  # whether the rows summed were verified under the key

    def to_dict(self) -> dict:
        return {
            "path": self.path,
            "population": self.population,
            "cap": dict(self.cap),
            "committed": self.committed,
            "reserved": self.reserved,
            "spent": None if self.spent is None else self.spent.to_dict(),
            "cost": None if self.cost is None else self.cost.to_dict(),
            "after": None if self.after is None else self.after.to_dict(),
            "left_before": left_text(self.spent, self.cap),
            "outcome": self.outcome,
            "fits": self.fits,
            "refusal": self.refusal,
            "largest": self.largest,
            "rows": None if self.rows is None else self.rows.to_dict(),
        }

    def text(self) -> str:
        """The lines ``dp-release plan`` prints below the plan."""
        lines = [
            f"ledger {self.path}, population {self.population} (cap {describe_cap(self.cap)}):",
            f"  spent ({self.committed} committed, {self.reserved} reserved): "
            f"{_bounds(self.spent, self.cap)}",
            f"  left before this release: {left_text(self.spent, self.cap)}",
        ]
        if self.rows is not None:
            lines.append(f"  {self.rows.text}")
        if self.outcome == "refused":
            lines.append(f"  refused, as dp-release run would refuse it: {self.refusal}")
            return "\n".join(lines)
        if self.outcome in ("already_committed", "resumed"):
            recorded = "committed" if self.outcome == "already_committed" else "reserved"
            lines.append(
                f"  this release: costs nothing (release id already {recorded} with this "
                "spec; run on the same input with the same key, it spends nothing new)"
            )
            lines.append("  fits: yes (no new spend)")
            return "\n".join(lines)
        lines.append(f"  this release: {_bounds(self.cost, self.cap)}")
        lines.append(f"  after it: {_bounds(self.after, self.cap)}")
        if self.fits:
            lines.append(f"  fits: yes; after it: {left_text(self.after, self.cap)}")
        else:
            lines.append(f"  fits: no, dp-release run would refuse it. {self.largest}")
        return "\n".join(lines)


def _bounds(spend: Spend | None, cap: dict) -> str:
    """A spend as the accountant's (lower, upper) bounds at the cap's delta, or its rho."""
    if spend is None:
        return "nothing"
    if cap["rho"] is not None:
        return "no finite rho" if spend.rho is None else f"rho {float(spend.rho):.6g}"
    epsilon, delta = Fraction(cap["epsilon"]), Fraction(cap["delta"])
    parts = []
    if spend.epsilon is not None:
        parts.append(
            f"epsilon at delta={float(delta):.3g} in "
            f"({spend.epsilon_lower:.6g}, {spend.epsilon:.6g})"
        )
    parts.append(
        f"delta at epsilon={float(epsilon):.6g} in ({spend.delta_lower:.3g}, {spend.delta:.3g})"
    )
    return "; ".join(parts)


def _identity_as_recorded(spec: ReleaseSpec, state: dict, existing: dict) -> ReleaseIdentity:
    """The identity ``run`` would give ``spec``, with the recorded input and key parts.

    A plan knows neither: taking them from the ledger compares every other part.
    """
    identity = release_identity(spec, state, "", "")
    try:
        recorded = ReleaseIdentity.from_dict(json.loads(existing["identity"]))
    except (TypeError, ValueError, KeyError, AttributeError):
        return identity  # check_reuse refuses a missing or corrupt identity itself
    parts = dict(identity.parts)
    for part in _RUN_ONLY_PARTS:
        if part in recorded.parts:
            parts[part] = recorded.parts[part]
    version = identity.to_dict()["version"]
    return ReleaseIdentity(spec.release_id, parts, digest_of([version, parts]))


def check_against_ledger(
    spec: ReleaseSpec,
    plan: ReleasePlan,
    path: str | os.PathLike[str],
    key: MasterKey | None = None,
) -> LedgerCheck:
    """Whether ``plan`` fits what is left of its population's cap in the ledger at ``path``.

    Guarantee: the verdict is `Ledger.reserve`'s on the ledger as it is now (same
    composition, same upper-bound check, same release-id and cap rules), except
    that the input and key parts of a recorded identity are taken as equal. The
    ledger file is opened read-only and left byte for byte unchanged. Raises
    `LedgerError` if there is no ledger file at ``path``, and `LedgerTamperedError` if
    ``key`` is the ledger's and the rows do not match their codes.
    """
    view = read_ledger(path, spec.population, spec.release_id, key)
    cap = cap_dict(spec.cap)
    state = plan.accountant.to_dict()
    spent_states = list(view.states)
    committed, reserved = view.committed, view.reserved
    existing = view.existing
    counted = existing is not None and existing["population"] == spec.population
    if counted and existing["status"] != "aborted":  # part of the population's spend
        spent_states.append(json.loads(existing["accountant"]))
        committed += existing["status"] == "committed"
        reserved += existing["status"] == "reserved"
    spent = measure_spend(compose_accountants(spent_states), cap) if spent_states else None
    common = {
        "path": view.path,  # credentials masked
        "population": spec.population,
        "cap": cap,
        "committed": committed,
        "reserved": reserved,
        "spent": spent,
        "rows": view.rows,
    }
    refusal = None
    outcome = "new"
    if view.cap is not None and view.cap != cap:
        refusal = (
            f"population {spec.population!r}: the spec's cap {describe_cap(cap)} differs "
            f"from the ledger's cap {describe_cap(view.cap)}; a population's cap cannot "
            "change once releases are recorded"
        )
    elif existing is not None:
        identity = _identity_as_recorded(spec, state, existing)
        try:
            outcome = (
                check_reuse(
                    existing,
                    spec.population,
                    existing["fingerprint"],
                    canonical_json(state),
                    identity,
                )
                or "new"
            )
        except ReleaseIdReuseError as error:
            refusal = str(error)
    if refusal is not None:
        return LedgerCheck(
            **common, cost=None, after=None, outcome="refused", fits=False, refusal=refusal
        )
    if outcome != "new":
        return LedgerCheck(**common, cost=None, after=spent, outcome=outcome, fits=True)
    cost = measure_spend(compose_accountants([state]), cap)
    after = measure_spend(compose_accountants([*spent_states, state]), cap)
    fits = within_cap(after, cap)
    largest = None if fits else fitting_budget_text(spec, spent_states, cap)
    return LedgerCheck(**common, cost=cost, after=after, outcome="new", fits=fits, largest=largest)
