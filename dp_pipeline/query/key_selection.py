"""The parameters and the public record of a key selected from the data (``FROM_DATA``).

A grouping key declared as ``domains={"merchant": FROM_DATA}`` has its released values
chosen privately: each unit's distinct keys (at most ``max_cells`` of them, the keyed
bounding) are counted, each count gets exact discrete noise, and only keys whose noisy
count clears an exact threshold are released (`dp_pipeline.keyselect`). The selection has
a budget of its own, ``selection_epsilon`` and ``selection_delta`` (as PipelineDP's
partition selection and Tumult's ``get_groups`` do), and its noise, ``selection_noise``
(``"laplace"``: the optimal truncated geometric for one key per unit, else Laplace
thresholding; ``"gaussian"``: Gaussian thresholding). The accountant composes the
selection's event with the statistic's, so the query's reported (ε, δ) includes it.

`KeySelectionParameters` is what a public call gives (validated before anything is read);
`KeySelectionInfo` what its result reports: the threshold, the selection's (ε, δ), and
after a run how many keys were kept, never how many the data had.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from fractions import Fraction

from dp_pipeline.accounting.events import PrivacyEvent
from dp_pipeline.errors import DPTypeError, DPValueError
from dp_pipeline.query.budget import budget_value
from dp_pipeline.query.large_delta import check_allow_flag, check_delta_limit
from dp_pipeline.rational import RationalLike

__all__ = [
    "SELECTION_ARGUMENTS",
    "SELECTION_NOISES",
    "KeySelectionInfo",
    "KeySelectionParameters",
    "pop_selection_arguments",
]

SELECTION_NOISES = ("laplace", "gaussian")
# The public arguments `KeySelectionParameters.build` takes (popped before a statistic's build).
SELECTION_ARGUMENTS = (
    "selection_epsilon",
    "selection_delta",
    "selection_noise",
    "selection_max_units",
)


@dataclass(frozen=True)
class KeySelectionParameters:
    """The budget and noise of a key selection (None: the call selects no key)."""

    epsilon: Fraction | None
    delta: Fraction | None
    noise: str
    max_units: int | None = None

    @classmethod
    def build(
        cls,
        *,
        selection_epsilon: RationalLike | None = None,
        selection_delta: RationalLike | None = None,
        selection_noise: str = "laplace",
        selection_max_units: int | None = None,
        allow_large_delta: bool = False,
    ) -> KeySelectionParameters:
        """Validate the selection's budget and noise, naming the argument, before any work.

        ``selection_delta`` above the large-δ limit (1e-4) is refused unless
        ``allow_large_delta``; ``selection_max_units`` (public, e.g. the population's size)
        is the most distinct units a key can have: a plan whose threshold exceeds it could
        release no key and is refused. Whether they are needed (a key given as FROM_DATA)
        is checked with the domains."""
        allow = check_allow_flag(allow_large_delta, "allow_large_delta")
        if not isinstance(selection_noise, str) or selection_noise not in SELECTION_NOISES:
            raise DPValueError(
                f"selection_noise={selection_noise!r}: must be one of "
                f"{', '.join(map(repr, SELECTION_NOISES))}"
            )
        epsilon = None
        if selection_epsilon is not None:
            epsilon = budget_value(selection_epsilon, "selection_epsilon")
            if epsilon <= 0:
                raise DPValueError(f"selection_epsilon must be > 0, got {selection_epsilon!r}")
        delta = None
        if selection_delta is not None:
            delta = budget_value(selection_delta, "selection_delta")
            if not 0 < delta < 1:
                raise DPValueError(f"selection_delta must be in (0, 1), got {selection_delta!r}")
            check_delta_limit(
                delta, "selection_delta", allow=allow, opt_in="allow_large_delta=True"
            )
        if selection_max_units is not None and (
            isinstance(selection_max_units, bool)
            or not isinstance(selection_max_units, int)
            or selection_max_units < 1
        ):
            raise DPValueError(
                f"selection_max_units={selection_max_units!r}: must be a positive int (the "
                f"most distinct units a key can have, e.g. the population's size) or None"
            )
        return cls(
            epsilon=epsilon, delta=delta, noise=selection_noise, max_units=selection_max_units
        )

    @property
    def given(self) -> tuple[str, ...]:
        """The selection arguments the call set (beyond their defaults)."""
        names = []
        if self.epsilon is not None:
            names.append("selection_epsilon")
        if self.delta is not None:
            names.append("selection_delta")
        if self.noise != "laplace":
            names.append("selection_noise")
        if self.max_units is not None:
            names.append("selection_max_units")
        return tuple(names)


def pop_selection_arguments(arguments: dict) -> KeySelectionParameters:
    """The selection parameters of a call's ``arguments``, removed from them (the statistic's
    build takes the rest)."""
    given = {name: arguments.pop(name) for name in SELECTION_ARGUMENTS if name in arguments}
    if "allow_large_delta" in arguments:
        given["allow_large_delta"] = arguments["allow_large_delta"]
    return KeySelectionParameters.build(**given)


@dataclass(frozen=True)
class KeySelectionInfo:
    """What a key selection costs and released: public, safe to publish with the table.

    ``threshold``: a key is released when its noisy count of distinct units is at least
    this; ``epsilon`` / ``delta`` the selection's target (``delta`` its certified upper
    bound); ``event`` the accountant's record of it; ``keys_kept`` how many keys were
    released (None before a run). How many keys the data had is never recorded.
    """

    column: str
    policy: str
    noise: str
    neighbouring: str
    max_cells: int
    epsilon: Fraction
    delta: Fraction
    threshold: int
    event: PrivacyEvent
    keys_kept: int | None = None

    def with_keys_kept(self, kept: int) -> KeySelectionInfo:
        if isinstance(kept, bool) or not isinstance(kept, int) or kept < 0:
            raise DPTypeError(f"keys_kept must be a count, got {kept!r}")
        return replace(self, keys_kept=kept)

    def public_summary(self) -> dict[str, object]:
        """JSON-friendly public facts of the selection."""
        return {
            "column": self.column,
            "policy": self.policy,
            "noise": self.noise,
            "neighbouring": self.neighbouring,
            "max_cells": self.max_cells,
            "epsilon": str(self.epsilon),
            "delta": str(self.delta),
            "threshold": self.threshold,
            "keys_kept": self.keys_kept,
        }
