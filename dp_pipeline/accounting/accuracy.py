"""Exact margins of error of the additive noise (never a normal approximation)."""

from __future__ import annotations

import math
import numbers

import numpy as np

from dp_pipeline.accounting._checks import Real
from dp_pipeline.accounting.discrete_gaussian import discrete_gaussian_log_normalizer
from dp_pipeline.errors import DPTypeError, DPValueError
from dp_pipeline.mechanisms import DiscreteGaussian, DiscreteLaplace

__all__ = ["margin_of_error"]


def _check_confidence(confidence: object) -> float:
    if isinstance(confidence, bool) or not isinstance(confidence, numbers.Real):
        raise DPTypeError(
            f"confidence must be a number strictly between 0 and 1, got {confidence!r}"
        )
    value = float(confidence)
    if not 0 < value < 1:
        raise DPValueError(f"confidence must lie strictly between 0 and 1, got {confidence!r}")
    return value


_TERM_BY_TERM_MAX_SIGMA = 26_000.0  # above: Euler–Maclaurin remainder 0.00184/σ³ < 1e-16


def _gaussian_upper_tail(m: int, sigma: float) -> tuple[float, float]:
    """P[Y > m] for Y ~ N_Z(0, σ²) with large σ, and a bound on the error of that value.

    Midpoint Euler–Maclaurin: Σ_{y > m} f(y) = ∫_{m+1/2}^∞ f + f'(m + 1/2)/24 + R with
    |R| <= (7/5760)·∫|f^(3)| <= 0.00184/σ³ for the N(0, σ²) density f (the normaliser of
    N_Z equals √(2π)σ to within e^{-2π²σ²}); erfc is good to a few ulps.
    """
    x = (m + 0.5) / sigma
    density = math.exp(-0.5 * x * x) / math.sqrt(2 * math.pi)
    value = 0.5 * math.erfc(x / math.sqrt(2)) - x * density / (24 * sigma * sigma)
    return value, 0.00184 / sigma**3 + 8 * 2.0**-53 * max(value, 1e-300)


def _gaussian_margin(sigma2: float, confidence: float) -> int:
    allowed = 1 - confidence  # P(|Y| > m) must be <= allowed
    sigma = math.sqrt(sigma2)
    if sigma > _TERM_BY_TERM_MAX_SIGMA:
        # Smallest m whose tail is surely <= allowed (a tie within the error goes up: safe).
        low, high = 0, math.ceil(40 * sigma)
        while low < high:
            middle = (low + high) // 2
            value, error = _gaussian_upper_tail(middle, sigma)
            if 2 * (value + error) <= allowed:
                high = middle
            else:
                low = middle + 1
        return low
    log_normalizer = discrete_gaussian_log_normalizer(sigma2)
    top = math.ceil(sigma * math.sqrt(2 * 745)) + 2  # beyond: pmf underflows to 0
    ys = np.arange(0, top + 1, dtype=np.float64)
    pmf = np.exp(-(ys * ys) / (2 * sigma2) - log_normalizer)
    # tail[m] = P(|Y| > m) = 2·Σ_{y > m} P[Y = y], summed from the smallest terms up.
    upper_tail = np.cumsum(pmf[::-1])[::-1]  # Σ_{y >= m}
    tail = 2 * np.append(upper_tail[1:], 0.0)
    return int(np.argmax(tail <= allowed))


def _laplace_margin(scale: float, confidence: float) -> int:
    allowed = 1 - confidence
    q = math.exp(-1 / scale)

    def tail(m: int) -> float:  # P(|Y| > m) = 2 q^{m+1} / (1 + q)
        return 2 * math.exp(-(m + 1) / scale) / (1 + q)

    m = max(0, math.ceil(math.log(allowed * (1 + q) / 2) * -scale) - 1)
    while tail(m) > allowed:
        m += 1
    while m > 0 and tail(m - 1) <= allowed:
        m -= 1
    return m


def margin_of_error(mechanism: DiscreteGaussian | DiscreteLaplace, confidence: Real = 0.95) -> int:
    """Smallest integer m with P(|Y| <= m) >= ``confidence`` for the mechanism's noise Y.

    Discrete Gaussian: tail sums of the exact pmf (normaliser by Poisson summation); for
    σ > 26,000 the normal tail with its Euler–Maclaurin correction and a rigorous remainder
    bound (an m within that bound of the boundary is rounded up, so the claim still holds);
    discrete Laplace: the closed form P(|Y| > m) = 2q^{m+1}/(1+q), q = e^{-1/b}.

    Example:

        >>> from dp_pipeline import DiscreteLaplace
        >>> from dp_pipeline.accounting import margin_of_error
        >>> margin_of_error(DiscreteLaplace(1))  # P(|Y| > 3) = 2e^{-4}/(1 + e^{-1}) < 5%
        3
    """
    confidence = _check_confidence(confidence)
    if isinstance(mechanism, DiscreteGaussian):
        return _gaussian_margin(float(mechanism.sigma2), confidence)
    if isinstance(mechanism, DiscreteLaplace):
        return _laplace_margin(float(mechanism.scale), confidence)
    raise DPTypeError(
        f"mechanism must be a DiscreteGaussian or DiscreteLaplace, got {type(mechanism).__name__}"
    )
