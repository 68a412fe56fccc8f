"""The exact sampler of the base-2 exponential mechanism (Ilvento 2020) over a keyed stream.

`exponential_sample(mechanism, utilities, stream)` draws from a
`dp_pipeline.mechanisms.BaseTwoExponential` value (its base ``(x/2**y)**z``,
clamp, ``min_passes`` and ``optimized`` fields); integers only, randomness from
a `dp_pipeline.randomness.SecureStream` only. The privacy proof of the
mechanism (levels, clamp, choice of the base) is in `dp_pipeline.mechanisms.exponential`;
what the sampler must do to keep it:

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
with it, so the clamp argument above is unchanged. A Δu below 1 wastes
accuracy (ε is computed as if Δu were 1): pass ``u / Δu`` with
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

Sampling (Ilvento, Algorithm 2 and Section 3.3). Outcomes are grouped by
their integer utility level ``j`` in ``[0, L)``; level ``j`` has count ``c_j``
and each of its outcomes has the integer weight ``x**(z·j)·2**(y·z·(L-1-j))``
(``base**j`` scaled by ``2**(y·z·(L-1))``). The exact cumulative weights
are built once per utility vector, laid out by the public ``L`` and ``y·z``
alone (`weight_tree.weights_for`): for a narrow range (``L²·y·z`` up to
`weight_tree.PREFIX_BITS`, e.g. a quantile grid of a few hundred candidates)
every cumulative sum, over per-level weights cached per ``(base, L)``, located
by a binary search of fixed depth; otherwise a complete binary tree over the
``L`` levels (a node stores the exact sum of its levels, in its own scale),
located by a root-to-leaf descent. Both map every draw to the same
``(level, offset)``. One *pass* draws a uniform integer ``s`` below ``2**p``,
the smallest power of two ``>= W`` (the exact total weight), rejects it when
``s >= W``, and locates it; inside the level, ``s`` is already a uniform index
among that level's outcomes.

Why a descent is as good as the paper's full scan (Ilvento Section 3.3: the
early-exit scan of Algorithm 2 leaks how concentrated the weights are,
because it stops sooner when the draw lands in a heavy early level). The
tree's shape depends only on the public number of levels ``L`` (fixed by
``utility_bounds``, or by the public outcome count through `relative_gap`),
every descent visits all ``ceil(log2 L)`` tree levels, and at each one it
computes BOTH branches (the left child's rescaling and the right child's
subtraction and division) before keeping one, so the sequence of integer
operations of a pass is the same for every data set and every draw, as in
the literal scan, at ``O(p·log L)`` instead of ``O(p·L)`` cost
(`weight_tree.locate_by_linear_scan` is the literal scan; the tests check both agree on
every draw). The fixed-depth search over the cumulative sums makes one
comparison and one addition per step whichever way it turns, then one
subtraction and one division, for every draw alike. What remains, as in any
implementation on Python integers, is that an operation's cost varies
slightly with its operands' magnitudes, which are bounded by public quantities
(``p`` bits) but not constant; this is not a cycle-exact constant-time implementation.

Timing defence (Ilvento, Section 3.3, Proposition 3.8): by default the
rejection loop runs at least ``min_passes`` (k = 20) passes whatever
happens, and a rejected pass also does a full descent (with ``s - W``, which
is below ``W``), so the number of passes is ``max(k, first accepted pass)``
and differs between data sets only with probability below ``2**-k``.
``optimized=True`` stops at the first accepted pass, skips the descent of
rejected passes and computes only the branch taken at each tree level:
faster (much faster for wide utility ranges: the division of the right
branch costs up to O(p²) on big integers, e.g. about 3.5 s CPU per pass at
|O| = 75,000 with 450,000-bit weights, while a left turn is a shift), but
the pass count then leaks the rejection rate and the work leaks where the
weight sits; use it only in batch jobs where no one can observe timing or
the amount of randomness consumed.

Randomness comes only from a `dp_pipeline.randomness.SecureStream`.
"""

from __future__ import annotations

import gc
import math
from fractions import Fraction

import numpy as np

from dp_pipeline.errors import InternalError
from dp_pipeline.noise.uniform import uniform_below_each
from dp_pipeline.noise.weight_tree import PrefixWeights, WeightTree, weights_for

__all__ = [
    "DEFAULT_UTILITY_DENOMINATOR",
    "MAX_WEIGHT_BITS",
    "check_utility_denominator",
    "exact_utilities",
    "exponential_sample",
    "exponential_sample_scaled",
    "exponential_sample_with_passes",
    "round_ups",
]

# The public precision of the randomized rounding: every utility must be a
# multiple of 1/DEFAULT_UTILITY_DENOMINATOR unless the sampler is told otherwise.
# A power of two up to 2**64 costs one 64-bit keystream word per outcome.
DEFAULT_UTILITY_DENOMINATOR = 1 << 64

# Precision cap for the exact weights: y·z·L bits per number. Past it the
# tree (about log2(L) numbers of this size per level) no longer fits memory.
MAX_WEIGHT_BITS = 1 << 25


def exponential_sample(
    mechanism,
    utilities,
    stream,
    size: int | None = None,
    *,
    utility_denominator: int = DEFAULT_UTILITY_DENOMINATOR,
):
    """Index of the selected outcome (or ``size`` independent indices as an int64 array).

    ``utilities`` is a 1-D array of losses (lower is better): integers,
    floats or Fractions, each a multiple of ``1/utility_denominator`` (a
    public bound, default ``2**64``; 1 declares integer utilities).
    Non-integers are randomly rounded (module docstring: ε uses ceil(Δu)),
    with one uniform draw below ``utility_denominator`` for every outcome
    and every sample, whatever the utilities, so the keystream read depends
    only on the number of outcomes, the bounds and ``utility_denominator``.
    Randomness from ``stream`` only.
    """
    denominator_bound = check_utility_denominator(utility_denominator)
    if size is None:
        return exponential_sample_with_passes(
            mechanism, utilities, stream, utility_denominator=denominator_bound
        )[0]
    _check_int(size, "size", 0)
    numerators, denominator = exact_utilities(utilities)
    _check_divides(numerators, denominator, denominator_bound)
    out = np.empty(size, dtype=np.int64)
    if denominator_bound != 1:
        # The rounding is redrawn for every sample, for integer utilities too:
        # whether a utility is an integer is data, so it must not change the
        # keystream read or the work.
        for i in range(size):
            out[i] = _sample_exact(mechanism, numerators, denominator, denominator_bound, stream)[0]
        return out
    levels, tree = _tree(mechanism, numerators, denominator, denominator_bound, stream)
    members_by_level: dict[int, np.ndarray] = {}
    for i in range(size):
        level, offset, _ = _select(mechanism, tree, stream, levels.size)
        members = members_by_level.get(level)
        if members is None:
            members = members_by_level[level] = np.flatnonzero(levels == level)
        out[i] = members[offset]
    return out


def exponential_sample_with_passes(
    mechanism, utilities, stream, *, utility_denominator: int = DEFAULT_UTILITY_DENOMINATOR
) -> tuple[int, int]:
    """``(index, passes)``: the selection and the number of rejection-loop passes run."""
    denominator_bound = check_utility_denominator(utility_denominator)
    numerators, denominator = exact_utilities(utilities)
    _check_divides(numerators, denominator, denominator_bound)
    return _sample_exact(mechanism, numerators, denominator, denominator_bound, stream)


def exponential_sample_scaled(
    mechanism,
    numerators: np.ndarray,
    denominator: int,
    stream,
    *,
    utility_denominator: int = DEFAULT_UTILITY_DENOMINATOR,
) -> int:
    """`exponential_sample` of the utilities ``numerators / denominator``, given exactly.

    For callers that hold their losses as integers over a known denominator (the
    quantile loss: over the denominator of ``q·n``): no Fraction per outcome. The
    sampled index is the one `exponential_sample` returns for the same rationals
    and stream: the levels depend only on the values (a remainder ``r/d`` and
    ``r·k/(d·k)`` round up on the same draws), and the keystream read only on the
    outcome count and ``utility_denominator``.
    """
    denominator_bound = check_utility_denominator(utility_denominator)
    numerators = np.asarray(numerators)
    if numerators.ndim != 1 or numerators.size == 0 or numerators.dtype != np.int64:
        raise InternalError(f"scaled utilities must be a non-empty 1-D int64 array: {numerators!r}")
    _check_int(denominator, "denominator", 1)
    _check_divides(numerators, denominator, denominator_bound)
    return _sample_exact(mechanism, numerators, denominator, denominator_bound, stream)[0]


def _sample_exact(
    mechanism, numerators: np.ndarray, denominator: int, denominator_bound: int, stream
) -> tuple[int, int]:
    levels, tree = _tree(mechanism, numerators, denominator, denominator_bound, stream)
    level, offset, passes = _select(mechanism, tree, stream, levels.size)
    members = np.flatnonzero(levels == level)
    if offset >= members.size:
        raise InternalError(f"offset {offset} outside level {level} of {members.size}")
    return int(members[offset]), passes


def _tree(
    mechanism, numerators, denominator, denominator_bound, stream
) -> tuple[np.ndarray, PrefixWeights | WeightTree]:
    levels, level_count = _levels(mechanism, numerators, denominator, denominator_bound, stream)
    counts = np.bincount(levels, minlength=level_count).tolist()
    # A tree is ~2L small tuples; generational GC passes over them cost
    # more than the arithmetic, and they hold no reference cycles.
    collecting = gc.isenabled()
    gc.disable()
    try:
        base = mechanism.base_numerator**mechanism.base_power
        tree = weights_for(counts, base, _shift(mechanism))
    finally:
        if collecting:
            gc.enable()
    return levels, tree


def _shift(mechanism) -> int:
    return mechanism.base_denominator_bits * mechanism.base_power


def _levels(
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
    if level_count * _shift(mechanism) > MAX_WEIGHT_BITS:
        raise ValueError(
            f"utility range of {level_count} levels needs {level_count * _shift(mechanism)} bits "
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


def _select(
    mechanism, tree: PrefixWeights | WeightTree, stream, outcomes: int
) -> tuple[int, int, int]:
    total = tree.total
    bits = (total - 1).bit_length()
    # Every pass reads the same number of keystream bytes, fixed by public
    # quantities (outcomes, level range): enough for the largest possible
    # total, outcomes·2**(shift·(L-1)). Only the top `bits` are used.
    public_bits = _shift(mechanism) * (tree.level_count - 1) + int(outcomes).bit_length()
    nbytes = (public_bits + 7) // 8
    excess = 8 * nbytes - bits
    chosen: tuple[int, int] | None = None
    passes = 0
    while True:
        # The k mandatory passes read their keystream in one call.
        batch = 1 if mechanism.optimized or passes >= mechanism.min_passes else mechanism.min_passes
        block = stream.random_bytes(batch * nbytes)
        for start in range(0, batch * nbytes, nbytes) if nbytes else [0] * batch:
            passes += 1
            draw = int.from_bytes(block[start : start + nbytes], "little") >> excess
            accepted = draw < total
            if chosen is None and accepted:
                chosen = tree.locate(draw, constant_work=not mechanism.optimized)
            elif not mechanism.optimized:
                # Same work as an accepted pass: 2**bits - total <= total - 1.
                tree.locate(draw if accepted else draw - total)
        if chosen is not None and (mechanism.optimized or passes >= mechanism.min_passes):
            return chosen[0], chosen[1], passes


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
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise TypeError(f"utility_denominator must be a positive integer, got {value!r}")
    if value < 1:
        raise ValueError(f"utility_denominator must be >= 1, got {value}")
    return int(value)


def _check_divides(numerators: np.ndarray, denominator: int, bound: int) -> None:
    """Refuse utilities the fixed-precision rounding cannot round exactly.

    Names the first utility whose reduced denominator does not divide ``bound``.
    """
    if bound % denominator == 0:
        return
    for i, numerator in enumerate(numerators):
        own = denominator // math.gcd(int(numerator), denominator)
        if bound % own:
            raise ValueError(
                f"utilities[{i}] has denominator {own}, which does not divide "
                f"utility_denominator={bound}: the randomized rounding draws one uniform "
                f"integer below utility_denominator per outcome, so every utility must be "
                f"a multiple of 1/utility_denominator; pass a utility_denominator that is a "
                f"multiple of {own} (e.g. {math.lcm(bound, own)}) or round the utilities to "
                f"multiples of 1/{bound} first"
            )
    raise InternalError(f"common denominator {denominator} does not divide {bound}")


def _check_int(value, name: str, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise TypeError(f"{name} must be an integer, got {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")


def exact_utilities(utilities) -> tuple[np.ndarray, int]:
    """Utilities as exact integer numerators over one positive common denominator.

    Integer arrays pass through; floats and Fractions become exact rationals
    (a float is its exact binary value). Raises for empty input, NaN or
    infinite values and non-numeric types, naming the first bad position.
    """
    array = np.asarray(utilities)
    if array.ndim != 1:
        raise ValueError(f"utilities must be a 1-D array, got shape {array.shape}")
    if array.size == 0:
        raise ValueError("utilities is empty: the exponential mechanism needs at least one outcome")
    if array.dtype == bool:
        raise TypeError("utilities must be numbers, got a boolean array")
    if np.issubdtype(array.dtype, np.integer):
        return array.astype(np.int64) if array.dtype != np.uint64 else array.astype(object), 1
    if np.issubdtype(array.dtype, np.floating):
        bad = np.flatnonzero(~np.isfinite(array))
        if bad.size:
            raise ValueError(
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
                raise TypeError(f"utilities[{i}] must be a number, got {value!r}")
            if isinstance(value, float | np.floating) and not math.isfinite(value):
                raise ValueError(
                    f"utilities[{i}] is {value}; utilities must be finite numbers "
                    f"(no NaN or infinity)"
                )
            fractions.append(Fraction(value))
        return _from_fractions(fractions)
    raise TypeError(f"utilities must be numbers, got dtype {array.dtype}")


def _from_fractions(values: list[Fraction]) -> tuple[np.ndarray, int]:
    denominator = 1
    for value in values:
        denominator = math.lcm(denominator, value.denominator)
    numerators = [v.numerator * (denominator // v.denominator) for v in values]
    if denominator < 2**62 and max(abs(n) for n in numerators) < 2**62:
        return np.array(numerators, dtype=np.int64), denominator
    return np.array(numerators, dtype=object), denominator
