"""The exact sampler of the base-2 exponential mechanism (Ilvento 2020) over a keyed stream.

`exponential_sample(mechanism, utilities, stream)` draws from a
`dp_pipeline.mechanisms.BaseTwoExponential` value (its base ``(x/2**y)**z``,
clamp, ``min_passes`` and ``optimized`` fields); integers only, randomness from
a `dp_pipeline.randomness.SecureStream` only. The privacy proof of the
mechanism (levels, clamp, choice of the base) is in `dp_pipeline.mechanisms.exponential`;
what the sampler must do to keep it:

The utilities first become integer levels: clamped, and randomly rounded
with a fixed amount of keystream and work (Ilvento, Lemma 3.5; the proof that
ε then uses ``ceil(Δu)``, and why a data-independent draw per outcome, are in
`dp_pipeline.noise.utility_levels`). This module samples among those levels.

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

import numpy as np

from dp_pipeline.errors import InternalError
from dp_pipeline.noise.utility_levels import (
    DEFAULT_UTILITY_DENOMINATOR,
    MAX_WEIGHT_BITS,
    check_divides,
    check_integer_at_least,
    check_utility_denominator,
    exact_utilities,
    round_ups,
    utility_levels,
    weight_shift,
)
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
    Non-integers are randomly rounded (`utility_levels`: ε uses ceil(Δu)),
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
    check_integer_at_least(size, "size", 0)
    numerators, denominator = exact_utilities(utilities)
    check_divides(numerators, denominator, denominator_bound)
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
    check_divides(numerators, denominator, denominator_bound)
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
        # The utilities come from data counts: the message gives their shape, never values.
        raise InternalError(
            f"scaled utilities must be a non-empty 1-D int64 array (got {numerators.ndim} "
            f"dimension(s), {numerators.size} outcome(s), dtype {numerators.dtype})"
        )
    check_integer_at_least(denominator, "denominator", 1)
    check_divides(numerators, denominator, denominator_bound)
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
    levels, level_count = utility_levels(
        mechanism, numerators, denominator, denominator_bound, stream
    )
    counts = np.bincount(levels, minlength=level_count).tolist()
    # A tree is ~2L small tuples; generational GC passes over them cost
    # more than the arithmetic, and they hold no reference cycles.
    collecting = gc.isenabled()
    gc.disable()
    try:
        base = mechanism.base_numerator**mechanism.base_power
        tree = weights_for(counts, base, weight_shift(mechanism))
    finally:
        if collecting:
            gc.enable()
    return levels, tree


def _select(
    mechanism, tree: PrefixWeights | WeightTree, stream, outcomes: int
) -> tuple[int, int, int]:
    total = tree.total
    bits = (total - 1).bit_length()
    # Every pass reads the same number of keystream bytes, fixed by public
    # quantities (outcomes, level range): enough for the largest possible
    # total, outcomes·2**(shift·(L-1)). Only the top `bits` are used.
    public_bits = weight_shift(mechanism) * (tree.level_count - 1) + int(outcomes).bit_length()
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
