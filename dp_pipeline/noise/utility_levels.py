"""Utilities to integer levels for the base-2 exponential sampler: exact rationals, rounding.

`exact_utilities` turns the caller's losses into integer numerators over one
common denominator (refusing empty, NaN, infinite or non-numeric input, naming
the position); `check_utility_denominator` and `check_divides` refuse a
public rounding precision the utilities do not fit; `utility_levels` clamps
them by the mechanism's bounds and randomly rounds them to the integer levels
``[0, L)`` that `dp_pipeline.noise.exponential` samples from. Integers only,
randomness from a `dp_pipeline.randomness.SecureStream` only.

Randomized rounding (Ilvento, Lemma 3.5). A non-integer utility ``u`` becomes
the integer level ``floor(u) + 1`` with probability ``frac(u)`` and
``floor(u)`` otherwise, independently for every outcome. Claim: for any
rational Δu, the mechanism on the rounded levels is ε-DP with
``ε = c·η·ln2·ceil(Δu)``. Proof: the rounding of outcome ``o`` has the law of
``R(u) = ceil(u - U_o)`` with ``U_o`` uniform on [0, 1), independent across
outcomes (``ceil(u - t) = floor(u) + 1`` exactly when ``t < frac(u)``).
Couple neighbours ``d, d'`` through the same ``U = (U_o)``. For reals ``a, b``
and any ``t``, ``ceil(a - t) - ceil(b - t)`` lies in ``[floor(a - b), ceil(a - b)]``,
so for every ``U`` the levels of ``d`` and ``d'`` differ by at most
``ceil(|u(d, o) - u(d', o)|) <= ceil(Δu)`` and in the direction of
``u(d, o) - u(d', o)`` (ceil is non-decreasing, so monotone utilities give
monotone levels). For each fixed ``U`` the sampler is therefore the
exponential mechanism on integer levels of sensitivity ``ceil(Δu)``, so
``P[o | d, U] <= e**ε · P[o | d', U]`` (Theorem 3.1); ``U`` has the same law
under ``d`` and ``d'``, and averaging over it gives ``P[o | d] <= e**ε · P[o | d']``.
For an integer Δu this is Lemma 3.5 (``ceil(Δu) = Δu``: rounding is free);
for a non-integer Δu it is not, and the bound ``c·η·ln2·Δu`` fails: monotone,
base ``1/16``, Δu = 1/2, utilities ``(0, 3/2)`` and ``(0, 2)`` give the
exact probability ratio ``137/17 ≈ 8.06`` for the second outcome, above
``2**(η·Δu) = 4`` and below ``2**(η·ceil(Δu)) = 16``. The rounding is applied to
the clamped utilities and the integer shift ``floor(m)`` (or ``lo``) commutes
with it, so the clamp argument (`dp_pipeline.mechanisms.exponential`) is
unchanged. A Δu below 1 wastes accuracy (ε is computed as if Δu were 1): pass ``u / Δu`` with
``utility_sensitivity=1`` instead, the same weights with the rounding on a grid
of step Δu.

The rounding is drawn with a fixed amount of keystream and work (Ilvento,
Section 3.3, applied to the rounding too). Every sample draws, for EVERY
outcome whether its utility is an integer or not, one uniform integer ``V``
below the public ``utility_denominator`` ``Q`` (an argument of `sample`,
default ``2**64``: one 64-bit keystream word per outcome, never rejected),
and rounds up exactly when ``V < frac(u)·Q``, which has probability
``frac(u)`` exactly because ``frac(u)·Q`` is an integer. Floors, remainders,
thresholds and comparisons run over all outcomes with the same vectorized
operations, so the bytes read and the work depend on ``|O|`` and ``Q`` only.
(A ``Q`` that is not a power of two is drawn by rejection: the bytes read then
vary with the keystream, never with the data, and are independent of the
accepted draws.) A utility whose denominator does not divide ``Q`` cannot be
rounded exactly this way and is refused: ``Q`` is meant to be a property of
the utility function (the quantile loss passes the denominator of ``q``;
integer counts pass 1, which draws nothing), so the refusal only catches a
wrong declaration. Doubles of magnitude at least ``2**-12`` are multiples of
``2**-64``; finer ones need a larger ``Q`` or rounding by the caller (rounding
down to a grid of step ``1/Q`` keeps an integer Δu).
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from dp_pipeline.errors import DPTypeError, DPValueError, InternalError
from dp_pipeline.noise.uniform import uniform_below_each

__all__ = [
    "DEFAULT_UTILITY_DENOMINATOR",
    "MAX_WEIGHT_BITS",
    "check_divides",
    "check_integer_at_least",
    "check_utility_denominator",
    "exact_utilities",
    "round_ups",
    "utility_levels",
    "weight_shift",
]

# The public precision of the randomized rounding: every utility must be a
# multiple of 1/DEFAULT_UTILITY_DENOMINATOR unless the sampler is told otherwise.
# A power of two up to 2**64 costs one 64-bit keystream word per outcome.
DEFAULT_UTILITY_DENOMINATOR = 1 << 64

# Precision cap for the exact weights: y·z·L bits per number. Past it the
# tree (about log2(L) numbers of this size per level) no longer fits memory.
MAX_WEIGHT_BITS = 1 << 25


def weight_shift(mechanism) -> int:
    """``y·z``: the bits per level by which the weights ``base**j`` are scaled to integers."""
    return mechanism.base_denominator_bits * mechanism.base_power


def utility_levels(
    mechanism, numerators: np.ndarray, denominator: int, denominator_bound: int, stream
) -> tuple[np.ndarray, int]:
    """Clamp, randomly round and shift the utilities to integer levels in ``[0, L)``.

    ``denominator`` (the data's common denominator) divides ``denominator_bound``
    (the public one, checked by the caller); only the latter decides what is drawn.
    """
    if numerators.dtype != object and _clamp_limit(mechanism, numerators, denominator) >= 2**62:
        numerators = numerators.astype(object)  # exact Python ints instead of overflowing
    if mechanism.utility_bounds is not None:
        low, high = mechanism.utility_bounds
        clamped = np.minimum(np.maximum(numerators, low * denominator), high * denominator)
        shift = low
        level_count = high - low + 1
    else:
        smallest = numerators.min()
        gap = mechanism.relative_gap(numerators.size)
        clamped = np.minimum(numerators, smallest + gap * denominator)
        shift = int(smallest) // denominator
        level_count = gap + 2
    if level_count * weight_shift(mechanism) > MAX_WEIGHT_BITS:
        raise DPValueError(
            f"utility range of {level_count} levels needs "
            f"{level_count * weight_shift(mechanism)} bits "
            f"per weight (more than {MAX_WEIGHT_BITS}); narrow utility_bounds or lower "
            f"base_bits"
        )
    # Every outcome goes through the same floor, remainder and comparison,
    # integer or not: which utilities are integers is data.
    floors = clamped // denominator
    remainders = clamped - floors * denominator
    rounded = floors + round_ups(remainders, denominator, denominator_bound, stream)
    if rounded.dtype == object:
        levels = np.asarray([int(v) - shift for v in rounded], dtype=np.int64)
    else:
        levels = (rounded - shift).astype(np.int64)
    if levels.size and (levels.min() < 0 or levels.max() >= level_count):
        raise InternalError(f"levels outside [0, {level_count}) after clamping")
    return levels, level_count


def _clamp_limit(mechanism, numerators: np.ndarray, denominator: int) -> int:
    if mechanism.utility_bounds is not None:
        return max(abs(b) for b in mechanism.utility_bounds) * denominator
    smallest = abs(int(numerators.min()))
    return smallest + (mechanism.relative_gap(numerators.size) + 1) * denominator


def round_ups(remainders: np.ndarray, denominator: int, bound: int, stream) -> np.ndarray:
    """0/1 per outcome: 1 with probability ``remainder/denominator``, exactly.

    One uniform ``V`` below the public ``bound`` per outcome (``denominator``
    divides ``bound``), up iff ``V < remainder·(bound/denominator)``. For a
    power of two up to 2**64 (the default) that is one 64-bit word per outcome,
    compared through its top ``log2(denominator)`` bits: the same shifts and
    comparisons whatever ``denominator`` is. Otherwise rejection draws, whose
    keystream use depends on the keystream only. ``bound = 1`` draws nothing.
    """
    size = remainders.size
    if bound == 1:
        return np.zeros(size, dtype=np.int64)
    if bound & (bound - 1) == 0 and bound <= 1 << 64:
        words = stream.random_uint64(size)
        # floor(V / 2**(64-d)) with d = log2(denominator) <= 64, as two shifts
        # below 64 bits each (a 64-bit shift of a uint64 is undefined in numpy).
        drop = 64 - (denominator.bit_length() - 1)
        top = (words >> np.uint64(drop // 2)) >> np.uint64(drop - drop // 2)
        if remainders.dtype == object:
            remainders = np.array([int(r) for r in remainders], dtype=np.uint64)
        return (top < remainders.astype(np.uint64)).astype(np.int64)
    scale = bound // denominator
    if bound <= 1 << 63:
        draws = uniform_below_each(stream, np.full(size, bound, dtype=np.int64))
        if remainders.dtype != object:
            return (draws < remainders * scale).astype(np.int64)
    else:
        draws = uniform_below_each(stream, np.full(size, bound, dtype=object))
    return np.array(
        [int(d) < int(r) * scale for d, r in zip(draws, remainders, strict=True)],
        dtype=np.int64,
    )


def check_utility_denominator(value) -> int:
    """The public rounding precision ``utility_denominator`` as an int.

    Refuses a non-integer (or bool) and a value below 1.
    """
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise DPTypeError(f"utility_denominator must be a positive integer, got {value!r}")
    if value < 1:
        raise DPValueError(f"utility_denominator must be >= 1, got {value}")
    return int(value)


def check_divides(numerators: np.ndarray, denominator: int, bound: int) -> None:
    """Refuse utilities the fixed-precision rounding cannot round exactly.

    Names the first utility whose reduced denominator does not divide ``bound``.
    """
    if bound % denominator == 0:
        return
    for i, numerator in enumerate(numerators):
        own = denominator // math.gcd(int(numerator), denominator)
        if bound % own:
            raise DPValueError(
                f"utilities[{i}] has denominator {own}, which does not divide "
                f"utility_denominator={bound}: the randomized rounding draws one uniform "
                f"integer below utility_denominator per outcome, so every utility must be "
                f"a multiple of 1/utility_denominator; pass a utility_denominator that is a "
                f"multiple of {own} (e.g. {math.lcm(bound, own)}) or round the utilities to "
                f"multiples of 1/{bound} first"
            )
    raise InternalError(f"common denominator {denominator} does not divide {bound}")


def check_integer_at_least(value, name: str, minimum: int) -> None:
    """Refuse a non-integer (or bool) ``value``, or one below ``minimum``, naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise DPTypeError(f"{name} must be an integer, got {value!r}")
    if value < minimum:
        raise DPValueError(f"{name} must be >= {minimum}, got {value}")


def exact_utilities(utilities) -> tuple[np.ndarray, int]:
    """Utilities as exact integer numerators over one positive common denominator.

    Integer arrays pass through; floats and Fractions become exact rationals
    (a float is its exact binary value). Raises for empty input, NaN or
    infinite values and non-numeric types, naming the first bad position.
    """
    array = np.asarray(utilities)
    if array.ndim != 1:
        raise DPValueError(f"utilities must be a 1-D array, got shape {array.shape}")
    if array.size == 0:
        raise DPValueError(
            "utilities is empty: the exponential mechanism needs at least one outcome"
        )
    if array.dtype == bool:
        raise DPTypeError("utilities must be numbers, got a boolean array")
    if np.issubdtype(array.dtype, np.integer):
        return array.astype(np.int64) if array.dtype != np.uint64 else array.astype(object), 1
    if np.issubdtype(array.dtype, np.floating):
        bad = np.flatnonzero(~np.isfinite(array))
        if bad.size:
            raise DPValueError(
                f"utilities[{bad[0]}] is {array[bad[0]]}; utilities must be finite numbers "
                f"(no NaN or infinity)"
            )
        if np.all(array == np.floor(array)) and np.all(np.abs(array) < 2**53):
            return array.astype(np.int64), 1
        return _from_fractions([Fraction(float(v)) for v in array])
    if array.dtype == object:
        fractions = []
        for i, value in enumerate(array):
            if isinstance(value, bool) or not isinstance(value, int | float | Fraction | np.number):
                raise DPTypeError(f"utilities[{i}] must be a number, got {value!r}")
            if isinstance(value, float | np.floating) and not math.isfinite(value):
                raise DPValueError(
                    f"utilities[{i}] is {value}; utilities must be finite numbers "
                    f"(no NaN or infinity)"
                )
            fractions.append(Fraction(value))
        return _from_fractions(fractions)
    raise DPTypeError(f"utilities must be numbers, got dtype {array.dtype}")


def _from_fractions(values: list[Fraction]) -> tuple[np.ndarray, int]:
    denominator = 1
    for value in values:
        denominator = math.lcm(denominator, value.denominator)
    numerators = [v.numerator * (denominator // v.denominator) for v in values]
    if denominator < 2**62 and max(abs(n) for n in numerators) < 2**62:
        return np.array(numerators, dtype=np.int64), denominator
    return np.array(numerators, dtype=object), denominator
