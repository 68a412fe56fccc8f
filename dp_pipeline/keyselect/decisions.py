"""Release decisions as exact Bernoulli draws, one per key, from the key's own stream.

Key k with count c is released iff c + Z_k >= τ, an event of probability
π(c) = P[Z >= τ - c] (the optimal per-key policy gives π(c) directly, by its
recursion). Only the event is output (never c + Z_k), so drawing the event
itself with probability exactly π(c) is the same mechanism (the same law of the
released set) as drawing Z_k and comparing; it needs a few bytes per key instead of a
full noise draw. The draw: read the key's keystream as the binary expansion of a
uniform u in [0, 1) and release iff u < π(c), compared lazily and exactly:

- with the first b = `FIRST_BITS` (64) bits U of u (u in [U/2^b, (U+1)/2^b)) and
  integers lo <= 2^b·π(c) <= hi from certified brackets (`dp_pipeline.keyselect.tails`,
  one per distinct count): U + 1 <= lo proves u < π(c); U >= hi proves u >= π(c). This
  round runs for all keys at once in numpy (uint64 compares), after one keyed PRF call
  and one ChaCha20 context per key (`SelectionKey.digests`);
- otherwise (probability about 2^-(b-2)) more bits of the same u are read and π(c)
  bracketed finer, until decided, one key at a time. π(c) is not a dyadic rational
  (it involves e^{-1/b} or sums of e^{-y²/(2σ²)}), so the comparison ends with probability 1; past
  `MAX_BITS` bits (probability below 2^-2000) it raises `InternalError`.

So P[released] = π(c) exactly, and the decision depends on the key's value and count
only (`SelectionKey.digests` / `SelectionKey.uniform`).
"""

from __future__ import annotations

from fractions import Fraction
from functools import lru_cache
from typing import Protocol

import numpy as np

from dp_pipeline.errors import DPValueError, InternalError
from dp_pipeline.keyselect.key_streams import SelectionKey, UniformBits
from dp_pipeline.keyselect.optimal import optimal_table
from dp_pipeline.keyselect.tails import GaussianTails, laplace_tail, truncated_laplace_tail

__all__ = ["FIRST_BITS", "MAX_BITS", "NoisePlan", "release_decisions", "release_probability"]

# Bits of u of the vectorized first round (at most 64: one uint64 per key).
FIRST_BITS = 64
MAX_BITS = 2048
# Each further round reads this many more bits of u.
_STEP_BITS = 256
# Brackets are computed this many bits finer than the comparison needs.
_SLACK_BITS = 64
# Counts whose π is this close to 1 share one first-round bracket (`_first_round`).
_NEAR_ONE_BITS = 40


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
    """Bracket of π(count) = P[count + Z >= τ], about 2^-bits wide or finer (the optimal
    per-key policy: π(count) of its recursion, `dp_pipeline.keyselect.optimal`)."""
    if getattr(plan, "policy", None) == "optimal_per_key":
        per_key = getattr(plan, "single_unit_release")  # noqa: B009 (not in NoisePlan)
        return optimal_table(1 / plan.scale, per_key, max(bits, 64)).bracket(count)
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


def _decide_slowly(plan: NoisePlan, bits_of_u: UniformBits, count: int) -> bool:
    """The rare undecided comparison: more bits of u against finer brackets of π."""
    bits = FIRST_BITS  # whole bytes
    prefix = int.from_bytes(bits_of_u.read(bits // 8), "big")
    while bits < MAX_BITS:
        bits += _STEP_BITS
        prefix = (prefix << _STEP_BITS) | int.from_bytes(bits_of_u.read(_STEP_BITS // 8), "big")
        low, high = _scaled(plan, count, bits)
        if prefix + 1 <= low:
            return True
        if prefix >= high:
            return False
    raise InternalError(f"a release comparison stayed undecided after {MAX_BITS} bits")


def _first_round(plan: NoisePlan, counts: np.ndarray) -> tuple[np.ndarray, ...]:
    """Per key: (lo, hi) of 2^b·π(count) as uint64 (clipped), whether lo is 2^b (π = 1:
    released whatever U) and whether hi is 2^b (U >= hi can prove no reject).

    π(c) = P[Z >= τ - c] grows with c, so once a count's bracket puts π within
    2^-`_NEAR_ONE_BITS` of 1, every larger count reuses that count's lo (a lower bound of
    its π too) with hi = 2^b: a key whose U reaches that lo (probability below
    2^-`_NEAR_ONE_BITS`) goes to the exact comparison. Zipf data has thousands of
    distinct large counts; their brackets would cost more than the keys' hashes.
    """
    distinct, inverse = np.unique(counts, return_inverse=True)
    top = 1 << FIRST_BITS
    near_one = top - max(top >> _NEAR_ONE_BITS, 1)
    brackets = []
    for count in distinct.tolist():
        if brackets and brackets[-1][0] >= near_one:
            brackets.append((brackets[-1][0], top))
        else:
            brackets.append(_scaled(plan, count, FIRST_BITS))
    low = np.array([min(lo, top - 1) for lo, _ in brackets], dtype=np.uint64)
    high = np.array([min(hi, top - 1) for _, hi in brackets], dtype=np.uint64)
    certain = np.array([lo >= top for lo, _ in brackets], dtype=bool)
    open_top = np.array([hi >= top for _, hi in brackets], dtype=bool)
    return low[inverse], high[inverse], certain[inverse], open_top[inverse]


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
    if counts.size == 0:
        return np.zeros(0, dtype=bool)
    digests = selection_key.digests(keys)
    # U = the first FIRST_BITS bits of each u, as uint64 (big-endian: u's leading bits).
    first = np.frombuffer(b"".join(digests), dtype=">u8")[:: len(digests[0]) // 8]
    first = first.astype(np.uint64) >> np.uint64(64 - FIRST_BITS)
    low, high, certain, open_top = _first_round(plan, counts)
    # U + 1 <= lo, i.e. U < lo (lo clipped below 2^b is exact when not certain).
    released = certain | (first < low)
    rejected = ~released & ~open_top & (first >= high)
    for index in np.flatnonzero(~released & ~rejected).tolist():
        bits_of_u = UniformBits(digests[index])
        released[index] = _decide_slowly(plan, bits_of_u, int(counts[index]))
    return released
