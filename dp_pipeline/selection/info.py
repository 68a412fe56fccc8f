"""`SelectionInfo`: what a DP selection cost and how far its answer may be off, known before data.

The mechanism, the number of runs, the pure ε and zCDP ρ they compose to, and
the rank error bound at the stated confidence; the engine adds its
`Diagnostics` (not private: never publish them).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from fractions import Fraction

from dp_pipeline.accounting import PrivacyAccountant, PrivacyEvent
from dp_pipeline.errors import InternalError
from dp_pipeline.mechanisms import BaseTwoExponential, DiscreteLaplace
from dp_pipeline.query.diagnostics import Diagnostics
from dp_pipeline.query.info_repr import info_details, info_line

__all__ = ["SelectionInfo"]


@dataclass(frozen=True, repr=False)
class SelectionInfo:
    """What a DP selection spent and how precise it is (attached as ``result.attrs["dp"]``).

    ``mechanism`` ran ``runs`` times (peeling: k rounds at ε/k each) with
    ``sensitivity`` (1 for the exponential mechanism, whose utility
    sensitivity is inside it; the count sensitivity vector for one-shot
    discrete Laplace). ``epsilon`` is the total pure ε, an exact upper bound
    (never above the requested ε). ``margin_of_error``: for quantile/median
    the rank error t with P[rank loss >= OPT + t] <= 1 - confidence
    (`quantile_rank_error_bound`); for one-shot top-k the noise margin of
    each noisy count at ``confidence``; None for peeling.
    ``privacy_unit`` is what the guarantee protects (None: each row alone, a
    per-record guarantee) and ``contribution_bounds`` the rows a unit may keep.
    ``diagnostics`` are NOT private: never publish them.
    """

    statistic: str
    method: str
    event: PrivacyEvent  # mechanism, sensitivity and runs: what the selection costs
    candidates: int
    margin_of_error: int | None
    confidence: Fraction
    diagnostics: Diagnostics | None = None
    privacy_unit: str | None = None
    contribution_bounds: dict[str, int] = field(default_factory=dict)

    def __repr__(self) -> str:  # one line for notebooks and logs; no diagnostics
        return info_line(self)

    def details(self) -> str:
        """Every field, one per line (diagnostics included: never publish them)."""
        return info_details(self)

    @property
    def mechanism(self) -> BaseTwoExponential | DiscreteLaplace:
        mechanism = self.event.mechanism
        if not isinstance(mechanism, BaseTwoExponential | DiscreteLaplace):
            raise InternalError(f"a selection run by {type(mechanism).__name__}")
        return mechanism

    @property
    def epsilon(self) -> Fraction:
        """The total pure ε of all runs: the accountant's exact reading of `event`."""
        return self.accountant().pure_epsilon()

    @property
    def runs(self) -> int:
        return self.event.count

    @property
    def sensitivity(self) -> tuple[int, ...]:
        return self.event.sensitivity

    @property
    def events(self) -> tuple[PrivacyEvent, ...]:
        return (self.event,)

    def accountant(self):
        """A `PrivacyAccountant` holding this selection (compose it with the release's tables)."""
        return PrivacyAccountant().add_event(self.event)

    def with_diagnostics(self, diagnostics: Diagnostics | None) -> SelectionInfo:
        return dataclasses.replace(self, diagnostics=diagnostics)

    def public_summary(self) -> dict[str, object]:
        """JSON-friendly public facts (no diagnostics)."""
        mechanism = self.mechanism
        if isinstance(mechanism, BaseTwoExponential):
            parameters = {
                "base": str(mechanism.base),
                "utility_sensitivity": str(mechanism.utility_sensitivity),
                "monotone": mechanism.monotone,
                "min_passes": mechanism.min_passes,
            }
        else:
            parameters = {"scale": str(mechanism.scale)}
        return {
            "statistic": self.statistic,
            "method": self.method,
            "mechanism": mechanism.name,
            **parameters,
            "runs": self.runs,
            "sensitivity": list(self.sensitivity),
            "epsilon": str(self.epsilon),
            "delta": "0",
            "candidates": self.candidates,
            "margin_of_error": None if self.margin_of_error is None else str(self.margin_of_error),
            "confidence": str(self.confidence),
            "privacy_unit": self.privacy_unit,
            "contribution_bounds": dict(self.contribution_bounds),
        }
