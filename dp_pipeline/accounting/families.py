"""The one type switch over the mechanism families the accountant composes.

Every method asks the same question of each event, "what is this mechanism's privacy
loss?", and answers it per family: `family_of` is the single place that decides the
family, in one order that every method follows, so that a mechanism which could answer
in two ways (a selection also states a pure ε; a pmf pair may too) is taken the same way
by every path:

0. `Family.KEY_SELECTION`: a `KeySelection` (count noise plus an infinite-loss atom,
   split by `atoms.split_atoms` before any path sees it);
1. `Family.DISCRETE_GAUSSIAN`: `DiscreteGaussian` (loss on the lattice (μ² + 2μy)/(2σ²));
2. `Family.DISCRETE_LAPLACE`: `DiscreteLaplace` (pure ε = μ/scale, finite loss support);
3. `Family.SELECTION`: an ε-bounded-range mechanism (states ``bounded_range_epsilon``,
   e.g. `BaseTwoExponential`): its exact bounded-range curve, not its pure ε;
4. `Family.PMF_PAIR`: described only by ``privacy_loss_pmfs()`` (float losses, no ρ);
5. `Family.PURE_DP`: a pure ε-DP mechanism (``pure_epsilon``): randomized response.

None for anything else (the accountant refuses such a mechanism when it is added).
"""

from __future__ import annotations

from enum import StrEnum

from dp_pipeline.accounting.bounded_range import bounded_range_epsilon_of
from dp_pipeline.accounting.events import KeySelection, pure_epsilon_of
from dp_pipeline.mechanisms import DiscreteGaussian, DiscreteLaplace

__all__ = ["Family", "family_of"]


class Family(StrEnum):
    """The mechanism families, in the order `family_of` tries them."""

    KEY_SELECTION = "key_selection"
    DISCRETE_GAUSSIAN = "discrete_gaussian"
    DISCRETE_LAPLACE = "discrete_laplace"
    SELECTION = "selection"
    PMF_PAIR = "pmf_pair"
    PURE_DP = "pure_dp"


def family_of(mechanism: object) -> Family | None:
    """The family of ``mechanism`` (module docstring), None if it has none. A mechanism
    stating a malformed ``bounded_range_epsilon`` is refused (`DPTypeError`)."""
    if isinstance(mechanism, KeySelection):
        return Family.KEY_SELECTION
    if isinstance(mechanism, DiscreteGaussian):
        return Family.DISCRETE_GAUSSIAN
    if isinstance(mechanism, DiscreteLaplace):
        return Family.DISCRETE_LAPLACE
    if bounded_range_epsilon_of(mechanism) is not None:
        return Family.SELECTION
    if hasattr(mechanism, "privacy_loss_pmfs"):
        return Family.PMF_PAIR
    if pure_epsilon_of(mechanism) is not None:
        return Family.PURE_DP
    return None
