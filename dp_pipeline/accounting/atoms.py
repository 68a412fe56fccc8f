"""Infinite-loss atoms (key selections) composed with the finite part of a composition.

Each `KeySelection` splits into its count-noise event (finite loss, composed by the
strategy's paths like any other) and an atom of mass q at +∞. Independent atoms compose
to q_total = 1 - ∏(1 - q_i) (the chance that some loss is infinite), rounded UP, and for
any ε the privacy-loss tail gives δ(ε) = 1 - (1 - q_total)(1 - δ_finite(ε)): both ends of
δ_finite's bracket map through this increasing function, the upper end rounded up and the
lower end rounded down, so the bracket stays rigorous. The lower end is that of the
event as stated (an atom of mass exactly q); a plan whose q is itself an upper bound of
the release chance may lie below it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction

from dp_pipeline.accounting.bounds import DeltaBound, DeltaPath, Method
from dp_pipeline.accounting.events import KeySelection, PrivacyEvent

__all__ = ["atom_path", "compose_atoms", "finite_target", "split_atoms", "with_atom"]

# past this many bits of denominator, the product ∏(1 - q_i) is rounded down onto the
# grid 2^-_BITS (q_total then rounds up); exact below it
_BITS = 512


def _power_down(base: Fraction, count: int) -> Fraction:
    """A lower bound of base^count (0 <= base <= 1), exact while denominators stay small."""
    result = Fraction(1)
    for _ in range(count) if count <= 64 else ():
        result = _trim_down(result * base)
    if count > 64:  # binary powering, each product rounded down
        square, left = base, count
        while left:
            if left & 1:
                result = _trim_down(result * square)
            left >>= 1
            if left:
                square = _trim_down(square * square)
    return result


def _trim_down(value: Fraction) -> Fraction:
    if value.denominator.bit_length() <= _BITS:
        return value
    return Fraction(math.floor(value * (1 << _BITS)), 1 << _BITS)


def compose_atoms(atoms: Sequence[tuple[Fraction, int]]) -> Fraction:
    """q_total >= 1 - ∏(1 - q_i)^{count_i} over (q_i, count_i): the chance that one of
    independent infinite-loss atoms occurs (exact unless the product is rounded down)."""
    survive = Fraction(1)
    for q, count in atoms:
        survive = _trim_down(survive * _power_down(1 - q, count))
    return 1 - survive


def split_atoms(events: Sequence[PrivacyEvent]) -> tuple[list[PrivacyEvent], Fraction]:
    """(the finite events, q_total): each `KeySelection` gives its count-noise event and
    its atom; every other event is kept as it is."""
    finite: list[PrivacyEvent] = []
    atoms: list[tuple[Fraction, int]] = []
    for event in events:
        mechanism = event.mechanism
        if isinstance(mechanism, KeySelection):
            finite.append(PrivacyEvent(mechanism.noise, mechanism.sensitivity, event.count))
            if mechanism.release_probability:
                atoms.append((mechanism.release_probability, event.count))
        else:
            finite.append(event)
    return finite, compose_atoms(atoms)


def _up(value: Fraction) -> float:
    result = float(value)
    return math.nextafter(result, math.inf) if Fraction(result) < value else result


def _down(value: Fraction) -> float:
    result = float(value)
    return math.nextafter(result, -math.inf) if Fraction(result) > value else result


def with_atom(finite: DeltaBound, q: Fraction) -> DeltaBound:
    """The bracket of 1 - (1 - q)(1 - δ_finite) from δ_finite's bracket (outward)."""
    upper = _up(1 - (1 - q) * (1 - Fraction(finite.upper)))
    lower = _down(1 - (1 - q) * (1 - Fraction(finite.lower)))
    return DeltaBound.clipped(
        max(lower, 0.0), min(upper, 1.0), f"{finite.method} + {Method.KEY_SELECTION}", finite.capped
    )


def atom_path(delta_of: DeltaPath, q: Fraction) -> DeltaPath:
    """``delta_of`` (the finite part's path) with the atom q composed in. ``decide`` is
    not passed on: the finite part answers with its full bracket."""

    def path(epsilon: float, decide: float | None = None) -> DeltaBound:
        return with_atom(delta_of(epsilon), q)

    return path


def finite_target(delta: float, q: Fraction) -> Fraction:
    """δ' = (δ - q)/(1 - q): the finite part's δ at which the whole is (ε, δ)-DP."""
    return (Fraction(delta) - q) / (1 - q)
