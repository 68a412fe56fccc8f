"""What happened, as values: `PrivacyEvent` (mechanism, sensitivity, count) and its JSON form.

Accountants only interpret events. Mechanisms serialize through the closed
registry of `dp_pipeline.mechanisms.registry`; a mechanism known only by its
dominating pmf pair or its pure ε is restored as `PmfPair` or `PureDP`.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Protocol

import numpy as np

from dp_pipeline.errors import DPTypeError, DPValueError
from dp_pipeline.mechanisms import DiscreteGaussian, DiscreteLaplace
from dp_pipeline.mechanisms.registry import mechanism_from_dict, mechanism_to_dict
from dp_pipeline.rational import exact_rational

__all__ = [
    "AccountedMechanism",
    "LossPmfMechanism",
    "PmfPair",
    "PrivacyEvent",
    "PureDP",
    "PureEpsilonMechanism",
    "event_mechanism_from_dict",
    "event_mechanism_to_dict",
    "fraction_string",
    "pure_epsilon_of",
    "randomized_response_masses",
    "sensitivity_tuple",
]


class PureEpsilonMechanism(Protocol):
    """A mechanism whose pure ε is a stored parameter (`BaseTwoExponential`, `PureDP`)."""

    @property
    def pure_epsilon(self) -> Fraction: ...


class LossPmfMechanism(Protocol):
    """A mechanism known by its dominating pair of privacy-loss pmfs (`PmfPair`)."""

    def privacy_loss_pmfs(self) -> tuple[np.ndarray, np.ndarray]: ...


# What the accountant composes: the additive mechanisms (with a sensitivity), or one whose
# privacy loss does not depend on a sensitivity.
AccountedMechanism = DiscreteGaussian | DiscreteLaplace | PureEpsilonMechanism | LossPmfMechanism


@dataclass(frozen=True)
class PrivacyEvent:
    """One recorded use: ``count`` independent runs of ``mechanism`` with shifts ``sensitivity``."""

    mechanism: AccountedMechanism
    sensitivity: tuple[int, ...]
    count: int


def sensitivity_tuple(sensitivity: object) -> tuple[int, ...]:
    if isinstance(sensitivity, (str, bytes)):
        raise DPTypeError(
            f"sensitivity must be an integer or a sequence of integers, got {sensitivity!r}"
        )
    values = list(sensitivity) if isinstance(sensitivity, (Sequence, np.ndarray)) else [sensitivity]
    if not values:
        raise DPValueError("sensitivity must not be an empty sequence")
    result = []
    for index, value in enumerate(values):
        name = "sensitivity" if len(values) == 1 else f"sensitivity[{index}]"
        if isinstance(value, bool) or not isinstance(value, (numbers.Integral, Fraction)):
            raise DPTypeError(
                f"{name} must be an integer (a discrete mechanism's queries move by whole "
                f"units), got {value!r}"
            )
        if isinstance(value, Fraction) and value.denominator != 1:
            raise DPTypeError(f"{name} must be an integer, got {value!r}")
        if int(value) < 0:
            raise DPValueError(f"{name} must be >= 0, got {value!r}")
        result.append(int(value))
    if not any(result):
        raise DPValueError(
            f"sensitivity must have at least one non-zero shift, got {tuple(result)}"
        )
    return tuple(result)


def pure_epsilon_of(mechanism) -> Fraction | float | None:
    """The stored pure ε of a mechanism whose pure ε is a parameter, else None.

    ``pure_epsilon`` is one kind of thing everywhere: a stored value (an attribute or a
    property, e.g. `BaseTwoExponential.pure_epsilon`, `PureDP.pure_epsilon`) that bounds
    the mechanism's privacy loss for one run. A pure ε that depends on a sensitivity
    (discrete Laplace) is an accounting function, not a mechanism attribute; a
    ``pure_epsilon`` method is refused rather than called with a guessed sensitivity.
    """
    pure = getattr(mechanism, "pure_epsilon", None)
    if pure is None:
        return None
    if callable(pure):
        raise DPTypeError(
            f"{type(mechanism).__name__}.pure_epsilon must be a stored value (an attribute "
            f"or a property), not a method; give the mechanism its pure ε as a value"
        )
    if isinstance(pure, Fraction):
        return pure
    return float(pure)


def fraction_string(value: Fraction) -> str:
    return f"{value.numerator}/{value.denominator}"


def event_mechanism_to_dict(mechanism) -> dict:
    registered = mechanism_to_dict(mechanism)
    if registered is not None:
        return registered
    if hasattr(mechanism, "privacy_loss_pmfs"):
        p, q = mechanism.privacy_loss_pmfs()
        return {"type": "pmf_pair", "p": [float(x) for x in p], "q": [float(x) for x in q]}
    pure = pure_epsilon_of(mechanism)
    exact = pure if isinstance(pure, Fraction) else Fraction(pure)
    return {"type": "pure_dp", "epsilon": fraction_string(exact)}


@dataclass(frozen=True)
class PmfPair:
    """A mechanism given only by its dominating pair of pmfs (as restored from a ledger)."""

    p: tuple[float, ...]
    q: tuple[float, ...]

    def privacy_loss_pmfs(self):
        return np.asarray(self.p), np.asarray(self.q)


@dataclass(frozen=True)
class PureDP:
    """A pure ε-DP mechanism (dominating pair: randomized response)."""

    pure_epsilon: Fraction


def randomized_response_masses(epsilon0: float) -> tuple[float, float]:
    """(P[loss = -ε₀], P[loss = ε₀]) of the randomized response, each within 2u of itself
    (1 - p in floats would lose the small mass to cancellation); past ε₀ = 700 the small
    mass (< e^{-700}) moves onto the large loss, which only raises δ."""
    if epsilon0 > 700:
        return 0.0, 1.0
    return 1 / (1 + math.exp(epsilon0)), 1 / (1 + math.exp(-epsilon0))


def event_mechanism_from_dict(data: dict):
    kind = data["type"]
    if kind == "pmf_pair":
        return PmfPair(tuple(data["p"]), tuple(data["q"]))
    if kind == "pure_dp":
        return PureDP(exact_rational(data["epsilon"], "epsilon"))
    return mechanism_from_dict(data)
