"""Release decisions as exact Bernoulli draws, one per key, from the key's own stream.

Key k with count c is released iff c + Z_k >= τ, an event of probability
π(c) = P[Z >= τ - c]. Only the event is output (never c + Z_k), so drawing the event
itself with probability exactly π(c) is the same mechanism (the same law of the
released set) as drawing Z_k and comparing; it needs a few bytes per key instead of a
full noise draw. The draw: read the key's keystream as the binary expansion of a
uniform u in [0, 1) and release iff u < π(c), compared lazily and exactly:

- with the first b bits U of u (u in [U/2^b, (U+1)/2^b)) and integers lo <= 2^b·π(c)
  <= hi from certified brackets (`dp_pipeline.keyselect.tails`): U + 1 <= lo proves
  u < π(c); U >= hi proves u >= π(c);
- otherwise (probability about 2^-(b-2)) more bits of the same stream are read and π(c)
  bracketed finer, until decided. π(c) is not a dyadic rational (it involves e^{-1/b}
  or sums of e^{-y²/(2σ²)}), so the comparison ends with probability 1; past
  `MAX_BITS` bits (probability below 2^-2000) it raises `InternalError`.

So P[released] = π(c) exactly, and the decision depends on the key's value and count
only (`SelectionKey.prefix` / `SelectionKey.stream`).
"""

from __future__ import annotations

from fractions import Fraction
from functools import lru_cache
from typing import Protocol

import numpy as np

from dp_pipeline.errors import DPValueError, InternalError
from dp_pipeline.keyselect.key_streams import SelectionKey
from dp_pipeline.keyselect.tails import GaussianTails, laplace_tail, truncated_laplace_tail

__all__ = ["FIRST_BITS", "MAX_BITS", "NoisePlan", "release_decisions", "release_probability"]

FIRST_BITS = 128
MAX_BITS = 2048
# Each further round reads this many more bits of u.
_STEP_BITS = 256
# Brackets are computed this many bits finer than the comparison needs.
_SLACK_BITS = 64


class NoisePlan(Protocol):
    """What the decisions read of a plan (`SelectionPlan`, `weighted.WeightedPlan`)."""

    noise: str
    scale: Fraction | None
    sigma2: Fraction | None
    truncation: int | None
    threshold: int


@lru_cache(maxsize=16)
def _gaussian(sigma2: Fraction, bits: int) -> GaussianTails:
    return GaussianTails(sigma2, bits)


def release_probability(plan: NoisePlan, count: int, bits: int) -> tuple[Fraction, Fraction]:
    """Bracket of π(count) = P[count + Z >= τ], about 2^-bits wide or finer."""
    k = plan.threshold - count
    if plan.noise == "gaussian":
        return _gaussian(plan.sigma2, max(bits, 192)).tail(k)
    if plan.truncation is not None:
        return truncated_laplace_tail(plan.scale, plan.truncation, k, max(bits, 256))
    return laplace_tail(plan.scale, k, max(bits, 256))


def _scaled(plan: NoisePlan, count: int, bits: int) -> tuple[int, int]:
    """Integers lo <= 2^bits·π(count) <= hi."""
    low, high = release_probability(plan, count, bits + _SLACK_BITS)
    return (low * (1 << bits)).__floor__(), (high * (1 << bits)).__ceil__()


def _decide_slowly(plan: NoisePlan, selection_key: SelectionKey, value, count: int) -> bool:
    """The rare undecided comparison: more bits of u against finer brackets of π."""
    stream = selection_key.stream(value)
    prefix = int.from_bytes(stream.random_bytes(FIRST_BITS // 8), "big")
    bits = FIRST_BITS
    while bits < MAX_BITS:
        bits += _STEP_BITS
        prefix = (prefix << _STEP_BITS) | int.from_bytes(
            stream.random_bytes(_STEP_BITS // 8), "big"
        )
        low, high = _scaled(plan, count, bits)
        if prefix + 1 <= low:
            return True
        if prefix >= high:
            return False
    raise InternalError(f"a release comparison stayed undecided after {MAX_BITS} bits")


def release_decisions(
    plan: NoisePlan, selection_key: SelectionKey, keys: np.ndarray, counts: np.ndarray
) -> np.ndarray:
    """For each candidate key (count >= 1), whether it is released (module docstring)."""
    counts = np.asarray(counts, dtype=np.int64)
    if counts.size and counts.min() < 1:
        raise DPValueError(
            "counts: every candidate key needs a count of at least 1 distinct unit; "
            "drop keys whose units were all removed by bounding before selecting"
        )
    brackets = {c: _scaled(plan, c, FIRST_BITS) for c in np.unique(counts).tolist()}
    released = np.zeros(counts.size, dtype=bool)
    for index, (value, count) in enumerate(zip(keys, counts.tolist(), strict=True)):
        low, high = brackets[count]
        if low == 1 << FIRST_BITS:
            released[index] = True  # π = 1 (no draw can fail): skip the stream
            continue
        if high == 0:
            continue  # π = 0
        prefix = int.from_bytes(selection_key.prefix(value, FIRST_BITS // 8), "big")
        if prefix + 1 <= low:
            released[index] = True
        elif prefix < high:
            released[index] = _decide_slowly(plan, selection_key, value, count)
    return released
