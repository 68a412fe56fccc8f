"""Exact totals over a composition's recorded events: zCDP ρ, pure ε, and their split.

Every total is an exact `Fraction`: ρ of a discrete Gaussian is Σμ²/(2σ²)
(Canonne, Kamath & Steinke 2020), of a pure ε-DP mechanism (a discrete Laplace:
ε = μ/scale per coordinate) ε²/2 (Bun & Steinke 2016), and zCDP composes by
addition; pure ε is summed by basic composition. `PrivacyAccountant` reads these;
they hold no state.
"""

from __future__ import annotations

from fractions import Fraction

from dp_pipeline.accounting.events import KeySelection, PrivacyEvent, pure_epsilon_of
from dp_pipeline.errors import DPValueError
from dp_pipeline.mechanisms import DiscreteGaussian, DiscreteLaplace

__all__ = ["event_rho", "pure_dp_split", "total_pure_epsilon", "total_rho"]


def event_rho(event: PrivacyEvent) -> Fraction:
    """Exact zCDP ρ of one run of ``event`` (summed over its coordinates).

    Raises ValueError for a mechanism described only by ``privacy_loss_pmfs()``.
    """
    mechanism = event.mechanism
    if isinstance(mechanism, KeySelection):
        if mechanism.release_probability:
            # an atom of loss +∞ has E[e^{(α-1)L}] = ∞ for every α > 1: no finite ρ
            raise DPValueError(
                "a key selection has no finite zCDP ρ (a key held only by the neighbour "
                "is released with probability q > 0); use delta()/epsilon()"
            )
        return event_rho(PrivacyEvent(mechanism.noise, mechanism.sensitivity, 1))
    if isinstance(mechanism, DiscreteGaussian):
        return sum((Fraction(m * m) for m in event.sensitivity), Fraction(0)) / (
            2 * mechanism.sigma2
        )
    if isinstance(mechanism, DiscreteLaplace):
        return sum((Fraction(m, 1) / mechanism.scale) ** 2 / 2 for m in event.sensitivity)
    exact_rho = getattr(mechanism, "zcdp_rho", None)
    if callable(exact_rho):  # the mechanism states its own exact ρ (a Fraction)
        return Fraction(exact_rho())
    pure = pure_epsilon_of(mechanism)
    if pure is not None and not hasattr(mechanism, "privacy_loss_pmfs"):
        pure_exact = pure if isinstance(pure, Fraction) else Fraction(pure)
        return pure_exact**2 / 2
    raise DPValueError(
        f"{type(mechanism).__name__} has no finite zCDP ρ known to the accountant "
        f"(it is described only by privacy_loss_pmfs()); use delta()/epsilon()"
    )


def total_rho(events) -> Fraction:
    """Exact zCDP ρ of the composition of ``events`` (zCDP composes by addition)."""
    total = Fraction(0)
    for event in events:
        total += event.count * event_rho(event)
    return total


def pure_dp_split(events) -> tuple[Fraction, Fraction] | None:
    """(Σ pure ε of the pure-DP events, ρ of the others), or None if an event has
    neither: basic composition of the two parts gives δ(ε) <= δ_ρ(ε - Σ ε)."""
    pure_total, rho_rest = Fraction(0), Fraction(0)
    for event in events:
        mechanism = event.mechanism
        if isinstance(mechanism, DiscreteLaplace):
            pure_total += (
                event.count * sum(Fraction(m) for m in event.sensitivity) / (mechanism.scale)
            )
            continue
        pure = None if isinstance(mechanism, DiscreteGaussian) else pure_epsilon_of(mechanism)
        if pure is not None:
            pure_total += event.count * (pure if isinstance(pure, Fraction) else Fraction(pure))
            continue
        try:
            rho_rest += event.count * event_rho(event)
        except ValueError:
            return None
    return pure_total, rho_rest


def total_pure_epsilon(events) -> Fraction:
    """Exact total pure ε of ``events`` by basic composition; raises ValueError if any
    event is not pure DP."""
    total = Fraction(0)
    for event in events:
        mechanism = event.mechanism
        if isinstance(mechanism, KeySelection):
            raise DPValueError(
                "a key selection's pure ε is infinite (a key held only by the neighbour is "
                "released with probability q > 0, an infinite privacy loss); use "
                "delta()/epsilon()"
            )
        if isinstance(mechanism, DiscreteLaplace):
            total += event.count * sum(Fraction(m) for m in event.sensitivity) / mechanism.scale
            continue
        pure = None if isinstance(mechanism, DiscreteGaussian) else pure_epsilon_of(mechanism)
        if pure is None:
            raise DPValueError(
                f"{type(mechanism).__name__} is not pure ε-DP; pure_epsilon() needs every "
                f"mechanism to be pure DP"
            )
        total += event.count * (pure if isinstance(pure, Fraction) else Fraction(pure))
    return total
