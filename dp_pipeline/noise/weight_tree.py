"""Exact cumulative weights of the base-2 exponential mechanism, over utility levels.

Two layouts give the same ``(level, offset)`` for every draw (both are the
exact cumulative weights; the tests check them against the literal scan):

- `PrefixWeights`: every cumulative sum, for a narrow level range (a quantile
  grid of a few hundred candidates). Built once per utility vector by one
  C-level accumulate over the cached per-level weights; located by a binary
  search of fixed depth ``ceil(log2 L)`` (one comparison per step whichever way
  it turns) and one division. Memory about ``L²·shift`` bits.
- `WeightTree`: a binary tree of partial sums, about ``L·shift·log2 L`` bits, for
  wide ranges (tens of thousands of levels). `WeightTree.locate` descends with
  the same integer operations whichever way it turns.

`weights_for` picks one from the public ``L`` and ``shift`` alone (never the
data). Both do constant work per pass, up to operand sizes;
`locate_by_linear_scan` is the literal full scan of Ilvento 2020, Algorithm 2,
kept as their reference.
"""

from __future__ import annotations

import functools
import itertools
import operator

from dp_pipeline.errors import DPValueError

try:
    # GMP's subquadratic division: the tree descent divides numbers of up to
    # L·y·z bits (450,000 at n = 75,000), ~30x faster than Python's long division.
    from gmpy2 import mpz as _exact_int
except ImportError:  # pragma: no cover - gmpy2 is a dependency; plain ints are exact too
    _exact_int = int

__all__ = ["PREFIX_BITS", "PrefixWeights", "WeightTree", "locate_by_linear_scan", "weights_for"]

# Largest ``L·L·shift`` (bits of all cumulative sums together, about 1 MiB) for which
# `weights_for` keeps every cumulative sum: a 141-candidate median grid needs about 2**19.
PREFIX_BITS = 1 << 23


def weights_for(counts: list[int], a: int, shift: int) -> PrefixWeights | WeightTree:
    """The exact cumulative weights of ``counts``, laid out by the public ``L`` and ``shift``."""
    level_count = len(counts)
    if level_count * level_count * shift <= PREFIX_BITS:
        return PrefixWeights(counts, a, shift)
    return WeightTree(counts, a, shift)


@functools.lru_cache(maxsize=16)
def _level_weights(a: int, shift: int, level_count: int) -> tuple[int, ...]:
    """One outcome's weight at each level, ``a**j · 2**(shift·(L-1-j))`` (public: no data)."""
    return tuple(a**j << (shift * (level_count - 1 - j)) for j in range(level_count))


class PrefixWeights:
    """Every exact cumulative weight ``P_j = Σ_{i<j} c_i·w_i`` over ``L`` levels.

    ``w_j = a**j · 2**(shift·(L-1-j))`` as in `WeightTree`. `locate` is the same
    map as `WeightTree.locate`: the level ``j`` with ``P_j <= draw < P_{j+1}`` and
    ``(draw - P_j) // w_j``, the offset in units of one outcome's weight (the
    tree's nested floors compose to this one floor).
    """

    __slots__ = ("_depth", "_padded", "_prefix", "_weights")

    def __init__(self, counts: list[int], a: int, shift: int) -> None:
        self._weights = _level_weights(a, shift, len(counts))
        # One multiply and one add per level, zero counts included (the same work for
        # every data set); map/accumulate run them without a Python frame per level.
        self._prefix = list(
            itertools.accumulate(map(operator.mul, counts, self._weights), initial=0)
        )
        self._depth = max(0, (len(counts) - 1).bit_length())
        # Levels padded to 2**depth with the total, which no accepted draw reaches.
        padding = (1 << self._depth) - len(counts)
        self._padded = self._prefix[:-1] + [self._prefix[-1]] * padding

    @property
    def total(self) -> int:
        return self._prefix[-1]

    @property
    def level_count(self) -> int:
        return len(self._weights)

    def locate(self, draw: int, constant_work: bool = True) -> tuple[int, int]:
        """``(level, offset)`` with ``draw`` in the level's cumulative interval (0 <= draw < total).

        A binary search of fixed depth: every step makes one comparison and one
        addition whichever way it turns, so a pass's operations do not depend on
        where the draw lands (``constant_work`` is accepted for the tree's
        signature; the search has no cheaper path).
        """
        padded = self._padded
        level = 0
        for depth in range(self._depth - 1, -1, -1):
            step = 1 << depth
            level += step * (padded[level + step] <= draw)
        return level, (draw - self._prefix[level]) // self._weights[level]


class WeightTree:
    """Exact cumulative weights over utility levels as a complete binary tree.

    Level ``j`` of ``L`` has count ``c_j`` and per-outcome weight
    ``a**j · 2**(shift·(L-1-j))`` with ``a = x**z``, ``shift = y·z``. A node
    covering levels ``[i, i+w)`` stores ``Σ c_j a**(j-i) 2**(shift·(i+w-1-j))``:
    its levels' weight divided by the common factor ``a**i·2**(shift·(L-i-w))``.
    So a parent ``(left of width w1, right of width w2)`` is
    ``left·2**(shift·w2) + a**w1·right``.
    """

    __slots__ = ("_layers", "_power", "_shift")

    def __init__(self, counts: list[int], a: int, shift: int) -> None:
        self._shift = shift
        powers: dict[int, int] = {}

        base = _exact_int(a)

        def power(width: int) -> int:
            value = powers.get(width)
            if value is None:
                value = powers[width] = base**width
            return value

        self._power = power
        layer = [(_exact_int(c), 1) for c in counts]
        layers = [layer]
        while len(layer) > 1:
            merged = []
            for i in range(0, len(layer) - 1, 2):
                (left, w1), (right, w2) = layer[i], layer[i + 1]
                merged.append(((left << (shift * w2)) + power(w1) * right, w1 + w2))
            if len(layer) % 2:
                merged.append(layer[-1])
            layer = merged
            layers.append(layer)
        self._layers = layers

    @property
    def total(self) -> int:
        return int(self._layers[-1][0][0])

    @property
    def level_count(self) -> int:
        return len(self._layers[0])

    def locate(self, draw: int, constant_work: bool = True) -> tuple[int, int]:
        """``(level, offset)`` with ``draw`` in the level's cumulative interval (0 <= draw < total).

        ``offset`` is the position of ``draw`` inside the level in units of
        one outcome's weight, i.e. a uniform index among that level's outcomes.
        ``constant_work=False`` computes only the branch taken (the right
        branch's division is skipped when going left): much faster when the
        weight sits in the low levels, but the work then depends on the path,
        i.e. on the data; only for the ``optimized`` batch variant.
        """
        index = 0
        shift = self._shift
        for depth in range(len(self._layers) - 1, 0, -1):
            children = self._layers[depth - 1]
            left_index = 2 * index
            if left_index + 1 >= len(children):
                index = left_index  # an odd node carried up unchanged
                continue
            (left, w1), (_, w2) = children[left_index], children[left_index + 1]
            # Both branches are computed on every step, so the operations of a
            # descent (one shift, one subtraction, one division per tree level)
            # do not depend on which way it turns, i.e. on where the weight is.
            scaled = draw >> (shift * w2)
            go_left = scaled < left
            if constant_work or not go_left:
                right = (draw - (left << (shift * w2))) // self._power(w1)
            draw = scaled if go_left else right
            index = left_index if go_left else left_index + 1
        return index, int(draw)


def locate_by_linear_scan(counts: list[int], a: int, shift: int, draw: int) -> tuple[int, int]:
    """The literal full scan (Ilvento Algorithm 2): cumulative sums level by level.

    Reference for `WeightTree.locate` (same ``(level, offset)``); O(p·L), so
    only for small instances and tests.
    """
    count = len(counts)
    cumulative = 0
    found = None
    for j, c in enumerate(counts):
        weight = a**j << (shift * (count - 1 - j))
        if found is None and draw < cumulative + c * weight:
            found = (j, (draw - cumulative) // weight)
        cumulative += c * weight
    if found is None:
        raise DPValueError(f"draw {draw} is not below the total weight {cumulative}")
    return found
