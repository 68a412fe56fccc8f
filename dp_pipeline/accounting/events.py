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
    "KeySelection",
    "LossPmfMechanism",
    "PmfPair",
    "PrivacyEvent",
    "PureDP",
    "PureEpsilonMechanism",
    "event_mechanism_from_dict",
    "event_mechanism_to_dict",
    "fraction_string",
    "key_selection",
    "pure_epsilon_of",
    "randomized_response_masses",
    "sensitivity_tuple",
]


# A private key selection as one event: its count noise plus an infinite-loss atom.
#
# A selection releases key k iff c_k + Z_k >= τ (`dp_pipeline.keyselect.plan`). Between
# neighbours, the keys both hold see counts shifted by at most the plan's count
# sensitivity s (the count noise's privacy loss), and a key held only by the neighbour's
# unit(s) is released with probability at most q: on that outcome the privacy loss is
# +∞. `KeySelection` is that dominating pair: the loss of ``noise`` with shifts
# ``sensitivity``, plus a mass ``release_probability`` = q at +∞, so that
# δ(ε) <= 1 - (1 - q)(1 - δ_noise(ε)) (the plan's theorem), composed with every other
# event by the accountant (`atoms`), not added on the side.


@dataclass(frozen=True)
class KeySelection:
    """One key selection: count noise ``noise`` with per-coordinate ``sensitivity`` and
    an infinite-loss atom of mass ``release_probability`` (an upper bound of q).

    Guarantee: its privacy loss is dominated by the noise's loss plus the atom; it has
    no finite zCDP ρ and no finite pure ε when q > 0."""

    noise: DiscreteGaussian | DiscreteLaplace
    sensitivity: tuple[int, ...]
    release_probability: Fraction

    def __post_init__(self) -> None:
        if not isinstance(self.noise, (DiscreteGaussian, DiscreteLaplace)):
            raise DPTypeError(
                f"KeySelection.noise must be a DiscreteGaussian or a DiscreteLaplace, "
                f"got {type(self.noise).__name__}"
            )
        object.__setattr__(self, "sensitivity", sensitivity_tuple(self.sensitivity))
        q = exact_rational(self.release_probability, "release_probability")
        if not 0 <= q < 1:
            raise DPValueError(
                f"KeySelection.release_probability must be in [0, 1) (the chance a key "
                f"held only by the neighbour is released), got {q}"
            )
        object.__setattr__(self, "release_probability", q)


def key_selection(
    noise: DiscreteGaussian | DiscreteLaplace,
    sensitivity: int | tuple[int, ...],
    release_probability: Fraction | int | float | str,
) -> KeySelection:
    """The `KeySelection` of a selection's count noise, count sensitivity and q."""
    q = exact_rational(release_probability, "release_probability")
    return KeySelection(noise, sensitivity_tuple(sensitivity), q)


class PureEpsilonMechanism(Protocol):
    """A mechanism whose pure ε is a stored parameter (`BaseTwoExponential`, `PureDP`)."""

    @property
    def pure_epsilon(self) -> Fraction: ...


class LossPmfMechanism(Protocol):
    """A mechanism known by its dominating pair of privacy-loss pmfs (`PmfPair`)."""

    def privacy_loss_pmfs(self) -> tuple[np.ndarray, np.ndarray]: ...


# What the accountant composes: the additive mechanisms (with a sensitivity), or one whose
# privacy loss does not depend on a sensitivity.
AccountedMechanism = (
    DiscreteGaussian | DiscreteLaplace | KeySelection | PureEpsilonMechanism | LossPmfMechanism
)


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
    if isinstance(mechanism, KeySelection):
        return {
            "type": "key_selection",
            "noise": mechanism_to_dict(mechanism.noise),
            "sensitivity": list(mechanism.sensitivity),
            "release_probability": fraction_string(mechanism.release_probability),
        }
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
    if kind == "key_selection":
        return KeySelection(
            mechanism_from_dict(data["noise"]),
            tuple(data["sensitivity"]),
            exact_rational(data["release_probability"], "release_probability"),
        )
    if kind == "pure_dp":
        return PureDP(exact_rational(data["epsilon"], "epsilon"))
    return mechanism_from_dict(data)
