"""A privacy budget for one query, as an alternative to naming its noise.

``epsilon`` and ``delta`` (δ > 0), or ``rho``: the least discrete Gaussian σ²
meeting the target, found by the accountant (`dp_pipeline.accounting.calibration`:
for (ε, δ) the tight composition bound, for ρ the zCDP identity ρ = Δ²/(2σ²),
CKS 2020 Prop. 5), σ² an exact rational rounded up. ``epsilon`` alone: discrete
Laplace at pure ε (scale Δ₁/ε, rounded up). A mean spends half of the budget on
its sum and half on its count (each share of ρ, or of ε).

Budget values are numbers (int, Fraction, Decimal or a finite float, read DOWN:
the smaller of its decimal and binary values, so the target is never exceeded);
bools, strings, NaN, infinities, ε <= 0, ρ <= 0 and δ outside (0, 1) are
refused naming the argument, the value and the rule, before anything is read. A δ
above the large-δ limit (`dp_pipeline.query.large_delta.LARGE_DELTA_LIMIT`, 1e-4) is
refused too, unless ``allow_large_delta=True`` accepts it on purpose.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction

from dp_pipeline.accounting import calibrate_discrete_gaussian, calibrate_discrete_laplace
from dp_pipeline.errors import DPTypeError, DPValueError
from dp_pipeline.mechanisms import DiscreteGaussian, DiscreteLaplace
from dp_pipeline.query.aggregations import AGGREGATIONS, Aggregation, aggregation_query
from dp_pipeline.query.large_delta import check_allow_flag, check_delta_limit
from dp_pipeline.rational import RationalLike

__all__ = ["QueryBudget", "budget_value", "query_with_budget", "selection_epsilon", "sqrt_down"]


def budget_value(value: object, name: str) -> Fraction:
    """A budget number as an exact rational, floats read down; refuses non-numbers by name."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real | Decimal):
        raise DPTypeError(
            f"{name} must be a number (int, Fraction, Decimal or float), got {value!r} "
            f"({type(value).__name__})"
        )
    if isinstance(value, Decimal):
        if not value.is_finite():
            raise DPValueError(f"{name} must be finite, got {value!r}")
        return Fraction(value)
    if isinstance(value, numbers.Rational):
        return Fraction(value.numerator, value.denominator)
    as_float = float(value)
    if not math.isfinite(as_float):
        raise DPValueError(f"{name} must be finite, got {value!r}")
    return min(Fraction(repr(as_float)), Fraction(as_float))


def sqrt_down(value: Fraction) -> Fraction:
    """The largest multiple of 10^-k (~15 significant digits) not above sqrt(value) >= 0."""
    # ~15 significant digits of the root, sized from the value's decimal magnitude.
    magnitude = len(str(value.denominator)) - len(str(value.numerator))
    digits = max(15, 16 + magnitude // 2)
    scale = 10**digits
    return Fraction(math.isqrt(value.numerator * scale * scale // value.denominator), scale)


def selection_epsilon(epsilon, rho, rho_per_epsilon_squared: Fraction):
    """The pure ε a selection spends: ``epsilon`` itself, or the largest ε (rounded down)
    whose zCDP cost ``rho_per_epsilon_squared``·ε² is at most ``rho``.

    The exponential mechanism is ε-bounded-range, hence ε²/8-zCDP (Cesar & Rogers 2021):
    r runs at ε/r cost ε²/(8r); discrete Laplace of scale Δ₁/ε on shifts m_i costs
    Σ(m_i·ε/Δ₁)²/2. Exactly one of ``epsilon`` and ``rho``.
    """
    if epsilon is not None and rho is not None:
        raise DPValueError(f"give epsilon= or rho=, not both: got epsilon={epsilon!r}, rho={rho!r}")
    if rho is None:
        if epsilon is None:
            raise DPValueError("a selection needs a budget: epsilon= (pure ε) or rho= (zCDP)")
        return epsilon
    checked = budget_value(rho, "rho")
    if checked <= 0:
        raise DPValueError(f"rho must be > 0, got {rho!r}")
    root = sqrt_down(checked / rho_per_epsilon_squared)
    if root <= 0:
        raise DPValueError(f"rho = {rho!r} is too small for any selection")
    return root


@dataclass(frozen=True)
class QueryBudget:
    """(ε, δ) or ρ (discrete Gaussian), or ε alone (discrete Laplace), for one query."""

    epsilon: Fraction | None
    delta: Fraction | None
    rho: Fraction | None

    @classmethod
    def build(
        cls,
        *,
        noise: DiscreteGaussian | DiscreteLaplace | None = None,
        epsilon: RationalLike | None = None,
        delta: RationalLike | None = None,
        rho: RationalLike | None = None,
        allow_large_delta: bool = False,
    ) -> QueryBudget | None:
        """The budget, or None when ``noise`` is given (``delta`` then only reports ε).

        Exactly one of ``noise`` or a budget (``epsilon``, with or without ``delta``,
        or ``rho``); ``delta`` beside ``rho`` is the δ at which ε is reported. Every
        ``delta`` (a budget's or a reporting one) above the large-δ limit is refused
        unless ``allow_large_delta`` (`dp_pipeline.query.large_delta`).
        """
        allow = check_allow_flag(allow_large_delta, "allow_large_delta")
        checked_delta = None
        if delta is not None:
            checked_delta = budget_value(delta, "delta")
            if not 0 < checked_delta < 1:
                raise DPValueError(f"delta must be in (0, 1), got {delta!r}")
            check_delta_limit(checked_delta, "delta", allow=allow, opt_in="allow_large_delta=True")
        given = [name for name, value in (("epsilon", epsilon), ("rho", rho)) if value is not None]
        if noise is not None and given:
            raise DPValueError(
                f"give either noise= or a budget, not both: got noise={noise!r} and "
                f"{given[0]}={epsilon if given[0] == 'epsilon' else rho!r}"
            )
        if noise is not None:
            return None
        if not given:
            raise DPValueError(
                "give noise= (a DiscreteGaussian or DiscreteLaplace) or a budget: "
                "epsilon= (with delta=: discrete Gaussian; alone: discrete Laplace) or rho="
            )
        if len(given) == 2:
            raise DPValueError(
                f"give epsilon= (and delta=) or rho=, not both: got epsilon={epsilon!r} and "
                f"rho={rho!r}"
            )
        if rho is not None:
            checked_rho = budget_value(rho, "rho")
            if checked_rho <= 0:
                raise DPValueError(f"rho must be > 0, got {rho!r}")
            return cls(epsilon=None, delta=checked_delta, rho=checked_rho)
        checked_epsilon = budget_value(epsilon, "epsilon")
        if checked_epsilon <= 0:
            raise DPValueError(f"epsilon must be > 0, got {epsilon!r}")
        return cls(epsilon=checked_epsilon, delta=checked_delta, rho=None)

    @property
    def mechanism_name(self) -> str:
        return (
            "discrete_laplace" if self.rho is None and self.delta is None else "discrete_gaussian"
        )

    def calibrate(self, vectors: list[tuple[int, ...]]) -> list[DiscreteGaussian | DiscreteLaplace]:
        """One mechanism per sensitivity vector, equal shares, meeting the budget together."""
        shares = [(Fraction(1, len(vectors)), vector) for vector in vectors]
        if self.mechanism_name == "discrete_laplace":
            return [
                DiscreteLaplace(scale) for scale in calibrate_discrete_laplace(self.epsilon, shares)
            ]
        if self.rho is not None:
            sigma2s = calibrate_discrete_gaussian(rho=self.rho, queries=shares)
        else:
            sigma2s = calibrate_discrete_gaussian(
                epsilon=self.epsilon, delta=self.delta, queries=shares
            )
        return [DiscreteGaussian(sigma2) for sigma2 in sigma2s]


def query_with_budget(
    statistic: str,
    *,
    noise=None,
    epsilon=None,
    delta=None,
    rho=None,
    allow_large_delta=False,
    **parameters,
) -> Aggregation:
    """The parameter object of ``statistic`` with ``noise`` or the noise a budget calibrates.

    ``parameters``: those of the statistic's build. With a budget the query is built
    without noise, costed by its own sensitivity vectors, then given the calibrated
    mechanisms; the report's δ is the budget's (or the default).
    """
    if statistic not in AGGREGATIONS:
        raise DPValueError(f"statistic must be one of {tuple(AGGREGATIONS)}, got {statistic!r}")
    budget = QueryBudget.build(
        noise=noise, epsilon=epsilon, delta=delta, rho=rho, allow_large_delta=allow_large_delta
    )
    if delta is not None:
        parameters["delta"] = delta if budget is None else budget.delta
    if budget is None:
        return aggregation_query(statistic, noise=noise, **parameters)
    if parameters.get("count_noise") is not None:
        raise DPValueError(
            f"count_noise={parameters['count_noise']!r} with a budget: the budget calibrates "
            f"both the sum and the count; give noise= and count_noise= instead"
        )
    query = aggregation_query(statistic, noise=None, allow_no_noise=True, **parameters)
    measured = ("sum", "count") if statistic == "mean" else (statistic,)
    return query.with_noise(*budget.calibrate([query.sensitivity(m) for m in measured]))
