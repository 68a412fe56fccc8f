"""What a DP aggregation costs and how precise it is: the accountant's view of a `QuerySpec`.

Both engines attach the same `ReleaseInfo` to their results (pandas:
``result.attrs["dp"]``; Spark: ``query.info``). The privacy numbers come from
`dp_pipeline.accounting` (upper bounds); the margins of error from
`dp_pipeline.accounting.margin_of_error`, computed from the exact discrete
Gaussian / Laplace CDF, never a normal approximation.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from fractions import Fraction

from dp_pipeline.accounting import PrivacyAccountant, PrivacyEvent, margin_of_error
from dp_pipeline.errors import InternalError
from dp_pipeline.mechanisms import DiscreteGaussian, DiscreteLaplace
from dp_pipeline.query.diagnostics import Diagnostics
from dp_pipeline.query.info_repr import info_details, info_line
from dp_pipeline.query.key_selection import KeySelectionInfo
from dp_pipeline.query.spec import QuerySpec
from dp_pipeline.query.variance import VarianceSpec

__all__ = ["MeasureInfo", "ReleaseInfo", "release_info", "with_key_selection"]


@dataclass(frozen=True)
class MeasureInfo:
    """One noised vector of a release.

    ``sensitivity`` is per coordinate in the noised integer units (granularity
    units for sums); ``margin_of_error`` is in the released column's units: the
    half-width m with P[|noise| <= m] >= confidence.
    """

    value: str
    event: PrivacyEvent  # the mechanism, its sensitivity vector, one run
    margin_of_error: int | Fraction

    @property
    def rho(self) -> Fraction:
        """This vector's exact zCDP ρ, the accountant's reading of `event`."""
        return PrivacyAccountant().add_event(self.event).rho()

    @property
    def mechanism(self) -> DiscreteGaussian | DiscreteLaplace:
        mechanism = self.event.mechanism
        if not isinstance(mechanism, DiscreteGaussian | DiscreteLaplace):
            raise InternalError(f"a {self.value} vector noised by {type(mechanism).__name__}")
        return mechanism

    @property
    def sensitivity(self) -> tuple[int, ...]:
        return self.event.sensitivity


@dataclass(frozen=True, repr=False)
class ReleaseInfo:
    """Mechanisms, privacy cost (upper bounds) and margins of one DP aggregation.

    ``budget_split`` gives each noised vector's share of the total ρ (mean
    spends on a sum and a count). ``privacy_unit`` is what the guarantee protects
    (None: each row alone, a per-record guarantee) and ``contribution_bounds`` the
    rows a unit may keep (``max_cells``, ``max_per_cell``; 1 and 1 per record).
    ``diagnostics`` describe the input rows and are NOT differentially private:
    never publish them.

    With a key selected from the data (``key_selection``, a `KeySelectionInfo`: its
    threshold, its own (ε, δ) and, after a run, the keys kept), ``events`` include the
    selection's, ``epsilon`` is the accountant's bound of the whole query at ``delta``
    (the statistic's δ plus the selection's), and ``rho`` and ``budget_split`` are those of
    the noised statistics alone (the selection has no finite ρ).
    """

    statistic: str
    measures: tuple[MeasureInfo, ...]
    rho: Fraction
    epsilon: float  # the accountant's upper bound at delta: the guarantee
    delta: Fraction
    confidence: Fraction
    budget_split: dict[str, Fraction]
    diagnostics: Diagnostics | None = None
    privacy_unit: str | None = None
    contribution_bounds: dict[str, int] = field(default_factory=dict)
    key_selection: KeySelectionInfo | None = None

    def __repr__(self) -> str:  # one line for notebooks and logs; no diagnostics
        return info_line(self)

    def details(self) -> str:
        """Every field, one per line (diagnostics included: never publish them)."""
        return info_details(self)

    @property
    def mechanism(self) -> str:
        return ", ".join(f"{m.value}: {m.mechanism.name}" for m in self.measures)

    @property
    def events(self) -> tuple[PrivacyEvent, ...]:
        """What this aggregation costs, one `PrivacyEvent` per noised vector (and the key
        selection's, when a key is selected from the data)."""
        noised = tuple(m.event for m in self.measures)
        if self.key_selection is None:
            return noised
        return (*noised, self.key_selection.event)

    @property
    def margin_of_error(self) -> dict[str, int | Fraction]:
        """{released column: m}: each noisy column's margin of error at ``confidence``.

        In the column's units (a sum's in its value units): P[|noise| <= m] >=
        confidence, from the exact noise distribution. A mean has one for its
        ``sum`` and one for its ``count``.
        """
        return {m.value: m.margin_of_error for m in self.measures}

    def with_diagnostics(self, diagnostics: Diagnostics | None) -> ReleaseInfo:
        """This info with the run's ``diagnostics`` (None: the public info alone)."""
        return replace(self, diagnostics=diagnostics)

    def public_summary(self) -> dict[str, object]:
        """JSON-friendly public facts (no diagnostics): safe to publish with the table."""
        return {
            "statistic": self.statistic,
            "measures": [
                {
                    "value": m.value,
                    "mechanism": m.mechanism.name,
                    "sigma2" if isinstance(m.mechanism, DiscreteGaussian) else "scale": str(
                        m.mechanism.sigma2
                        if isinstance(m.mechanism, DiscreteGaussian)
                        else m.mechanism.scale
                    ),
                    "sensitivity": list(m.sensitivity),
                    "margin_of_error": str(m.margin_of_error),
                }
                for m in self.measures
            ],
            "rho": str(self.rho),
            "epsilon": str(self.epsilon),
            "delta": str(self.delta),
            "confidence": str(self.confidence),
            "budget_split": {k: str(v) for k, v in self.budget_split.items()},
            "privacy_unit": self.privacy_unit,
            "contribution_bounds": dict(self.contribution_bounds),
            **(
                {}
                if self.key_selection is None
                else {"key_selection": self.key_selection.public_summary()}
            ),
        }


def release_info(spec: QuerySpec | VarianceSpec) -> ReleaseInfo:
    """Ask the accountant for the cost of ``spec`` (before any data is touched): one event per
    noised vector, a variance's three (`dp_pipeline.query.variance`) included."""
    measures = []
    accountant = PrivacyAccountant()
    for (value, _, _), event in zip(spec.measures(), spec.events(), strict=True):
        accountant.add_event(event)
        measure = MeasureInfo(value=value, event=event, margin_of_error=0)
        margin: int | Fraction = margin_of_error(measure.mechanism, confidence=spec.confidence)
        unit = spec.measure_unit(value)  # a sum's margin in its value units
        if unit != 1:
            margin = margin * unit
            if margin.denominator == 1:
                margin = int(margin)
        measure = replace(measure, margin_of_error=margin)
        measures.append(measure)
    total_rho = accountant.rho()
    split: dict[str, Fraction] = {}
    for measure in measures:
        try:
            split[measure.value] = measure.rho / total_rho
        except (TypeError, ZeroDivisionError, ArithmeticError):
            split[measure.value] = measure.rho
    return ReleaseInfo(
        statistic=spec.statistic,
        measures=tuple(measures),
        rho=total_rho,
        epsilon=accountant.epsilon(spec.delta).upper,
        delta=spec.delta,
        confidence=spec.confidence,
        budget_split=split,
        privacy_unit=spec.privacy_unit,
        contribution_bounds={
            "max_cells": spec.effective_max_cells,
            "max_per_cell": spec.effective_max_per_cell,
        },
    )


def with_key_selection(info: ReleaseInfo, selection: KeySelectionInfo) -> ReleaseInfo:
    """``info`` with a key selection composed in: the accountant's ε upper bound of the
    statistic's events and the selection's event (`SelectionPlan.event`: its count noise
    and its infinite-loss atom) at δ = the statistic's δ + the selection's δ."""
    accountant = PrivacyAccountant()
    for event in (*(m.event for m in info.measures), selection.event):
        accountant.add_event(event)
    delta = info.delta + selection.delta
    return replace(
        info, key_selection=selection, delta=delta, epsilon=accountant.epsilon(delta).upper
    )
