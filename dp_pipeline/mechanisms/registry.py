"""Serialization of mechanisms through a closed registry.

The ledger and the release digest store mechanisms as JSON; restoring one
may only ever construct one of the types listed here, by name. Nothing read
from a ledger row chooses a module to import or a class to call, so a
tampered or foreign ledger can at worst be refused, never run code.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

from dp_pipeline.errors import DPValueError
from dp_pipeline.mechanisms.additive import DiscreteGaussian, DiscreteLaplace
from dp_pipeline.mechanisms.exponential import BaseTwoExponential
from dp_pipeline.rational import exact_rational

__all__ = ["REGISTERED_MECHANISMS", "mechanism_from_dict", "mechanism_to_dict"]

REGISTERED_MECHANISMS: dict[str, type] = {
    "discrete_gaussian": DiscreteGaussian,
    "discrete_laplace": DiscreteLaplace,
    "base_two_exponential": BaseTwoExponential,
}
# Ledgers written before the registry named the exponential mechanism by its import
# path; that one spelling is still read, mapped onto the registered type.
_LEGACY_CLASS_NAMES = {
    "dp_pipeline.mechanisms.exponential:BaseTwoExponential": "base_two_exponential",
}


def _fraction_string(value: Fraction) -> str:
    return f"{value.numerator}/{value.denominator}"


def mechanism_to_dict(mechanism: Any) -> dict | None:
    """Exact JSON-safe form of a registered mechanism (None for any other object)."""
    if isinstance(mechanism, DiscreteGaussian):
        return {"type": "discrete_gaussian", "sigma2": _fraction_string(mechanism.sigma2)}
    if isinstance(mechanism, DiscreteLaplace):
        return {"type": "discrete_laplace", "scale": _fraction_string(mechanism.scale)}
    if isinstance(mechanism, BaseTwoExponential):
        return {"type": "base_two_exponential", "data": mechanism.to_dict()}
    return None


def mechanism_from_dict(data: dict) -> Any:
    """The registered mechanism that `mechanism_to_dict` described.

    Raises ValueError naming the type when it is not registered: restoring
    never imports a module or calls a class named by the data.
    """
    kind = data.get("type")
    if kind == "object":  # the legacy spelling of the exponential mechanism
        name = data.get("class")
        kind = _LEGACY_CLASS_NAMES.get(name)
        if kind is None:
            raise DPValueError(
                f"mechanism class {name!r} is not registered; a ledger may only name "
                f"{', '.join(sorted(REGISTERED_MECHANISMS))}"
            )
    if kind == "discrete_gaussian":
        return DiscreteGaussian(exact_rational(data["sigma2"], "sigma2"))
    if kind == "discrete_laplace":
        return DiscreteLaplace(exact_rational(data["scale"], "scale"))
    if kind == "base_two_exponential":
        return BaseTwoExponential.from_dict(data["data"])
    raise DPValueError(
        f"mechanism type {kind!r} is not registered; known types: "
        f"{', '.join(sorted(REGISTERED_MECHANISMS))}"
    )
