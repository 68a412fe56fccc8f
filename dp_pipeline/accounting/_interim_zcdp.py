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
