"""TEMPORARY, CLEARLY-MARKED FALLBACK: to be deleted when `PrivacyAccountant` lands in main.

Until the real accountant (tight multivariate FFT bound, PLD, calibration) is
merged, the ledger and the release planner need something with the same
interface. This stand-in only adds zCDP ρ (CKS Prop. 5/Cor. 8: ρ = ||μ||²/(2σ²)
per discrete Gaussian; pure ε gives ρ = ε²/2) and converts with the loose
standard bound ε = ρ + 2√(ρ log(1/δ)). Every figure is an upper bound; it is
never tighter than the real accountant. Nothing in this module is imported
once ``dp_pipeline.accounting.PrivacyAccountant`` exists.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

from dp_pipeline.mechanisms import DiscreteGaussian, DiscreteLaplace


@dataclass(frozen=True)
class Bound:
    lower: float
    upper: float
    method: str


@dataclass(frozen=True)
class Event:
    mechanism: object
    sensitivity: tuple[int, ...]
    count: int


def _up(value: float) -> float:
    return math.nextafter(value, math.inf)


class InterimZcdpAccountant:
    """zCDP-sum stand-in with the agreed `PrivacyAccountant` interface (loose, upper bounds)."""

    def __init__(self) -> None:
        self.events: list[Event] = []

    def add(self, mechanism, sensitivity=1, count: int = 1) -> None:
        vector = (sensitivity,) if isinstance(sensitivity, int) else tuple(sensitivity)
        self.events.append(Event(mechanism, tuple(int(s) for s in vector), int(count)))

    def rho(self) -> Fraction:
        total = Fraction(0)
        for event in self.events:
            if isinstance(event.mechanism, DiscreteGaussian):
                norm2 = sum(s * s for s in event.sensitivity)
                total += event.count * Fraction(norm2) / (2 * event.mechanism.sigma2)
            elif isinstance(event.mechanism, DiscreteLaplace):
                epsilon = Fraction(sum(abs(s) for s in event.sensitivity)) / event.mechanism.scale
                total += event.count * epsilon * epsilon / 2
            else:
                raise TypeError(f"interim accountant cannot handle {event.mechanism!r}")
        return total

    def epsilon(self, delta) -> Bound:
        rho = float(self.rho())
        delta = float(delta)
        upper = _up(_up(rho) + _up(2 * math.sqrt(_up(rho * math.log(1 / delta)))))
        return Bound(0.0, upper, "interim-zcdp-standard")

    def delta(self, epsilon) -> Bound:
        rho = float(self.rho())
        epsilon = float(epsilon)
        if epsilon <= rho:
            return Bound(0.0, 1.0, "interim-zcdp-standard")
        exponent = (epsilon - rho) ** 2 / (4 * rho)
        return Bound(0.0, min(1.0, _up(math.exp(-exponent) * (1 + 1e-12))), "interim-zcdp-standard")

    def to_dict(self) -> dict:
        return {
            "accountant": "interim-zcdp",
            "events": [
                {
                    "mechanism": type(e.mechanism).__name__,
                    "parameter": str(
                        e.mechanism.sigma2
                        if isinstance(e.mechanism, DiscreteGaussian)
                        else e.mechanism.scale
                    ),
                    "sensitivity": list(e.sensitivity),
                    "count": e.count,
                }
                for e in self.events
            ],
        }

    @classmethod
    def from_dict(cls, data: dict) -> InterimZcdpAccountant:
        accountant = cls()
        for item in data["events"]:
            kind = {"DiscreteGaussian": DiscreteGaussian, "DiscreteLaplace": DiscreteLaplace}
            mechanism = kind[item["mechanism"]](Fraction(item["parameter"]))
            accountant.add(mechanism, item["sensitivity"], item["count"])
        return accountant


def interim_calibrate_discrete_gaussian(*, epsilon=None, delta=None, rho=None, queries):
    """TEMPORARY: σ² per query from a ρ budget split by shares (ρ_j = share_j · ρ).

    σ_j² = ||Δ_j||² / (2 ρ_j) exactly; an (ε, δ) budget is first turned into the
    largest ρ with ρ + 2√(ρ log(1/δ)) <= ε, rounded DOWN (so σ² only grows).
    """
    if rho is None:
        log_term = math.log(1 / float(delta))
        root = math.sqrt(log_term + float(epsilon)) - math.sqrt(log_term)
        rho = Fraction(root * root * (1 - 1e-9)).limit_denominator(10**12)
        while rho + 2 * math.sqrt(float(rho) * log_term) > float(epsilon):
            rho = rho * Fraction(999999, 1000000)
    rho = Fraction(rho)
    result = []
    for share, vector in queries:
        norm2 = sum(int(s) * int(s) for s in vector)
        result.append(Fraction(norm2) / (2 * Fraction(share) * rho))
    return result


def interim_margin_of_error(mechanism, confidence) -> int:
    """TEMPORARY: m with P[|Y| > m] <= 1 - confidence from the sub-Gaussian tail (CKS Prop. 23).

    P[|Y| >= t] <= 2 exp(-t²/(2σ²)) for Y ~ N_Z(0, σ²), so m = ceil(σ √(2 ln(2/(1-c)))).
    Conservative (rounded up), never smaller than the exact quantile.
    """
    alpha = 1 - float(confidence)
    if isinstance(mechanism, DiscreteGaussian):
        sigma = math.sqrt(float(mechanism.sigma2))
        return math.ceil(_up(sigma * math.sqrt(2 * math.log(2 / alpha))))
    if isinstance(mechanism, DiscreteLaplace):
        # P[|Y| >= t] <= 2 exp(-t/b) / (1 + exp(-1/b)) <= 2 exp(-t/b)
        return math.ceil(_up(float(mechanism.scale) * math.log(2 / alpha)))
    raise TypeError(f"no margin of error for {mechanism!r}")


def interim_zcdp_to_epsilon(rho, delta) -> float:
    """TEMPORARY: ε = ρ + 2√(ρ log(1/δ)) (CKS Cor. 13's loose form; an upper bound)."""
    rho = float(rho)
    return _up(_up(rho) + _up(2 * math.sqrt(_up(rho * math.log(1 / float(delta))))))
