"""Continuous Gaussian mechanism calibration (for comparison and continuous releases).

- `gaussian_sigma_analytic`: smallest σ meeting Balle & Wang's (2018) exact condition
  Φ(Δ/(2σ) - εσ/Δ) - e^ε·Φ(-Δ/(2σ) - εσ/Δ) <= δ, by bisection (returned rounded up);
- `gaussian_sigma_vinterbo`: Vinterbo's (2022) closed form, valid for every ε > 0;
- `gaussian_sigma_classic`: Δ·sqrt(2 ln(1.25/δ))/ε, valid only for ε < 1 (Dwork & Roth).
"""

from __future__ import annotations

import math

from dp_pipeline.accounting._checks import Real, check_delta, check_epsilon, round_up
from dp_pipeline.errors import DPValueError

__all__ = [
    "balle_wang_delta",
    "gaussian_sigma_analytic",
    "gaussian_sigma_classic",
    "gaussian_sigma_vinterbo",
]


def _check_positive(value: object, name: str) -> float:
    number = check_epsilon(value, name)
    if number <= 0:
        raise DPValueError(f"{name} must be > 0, got {value!r}")
    return number


def balle_wang_delta(sigma: float, epsilon: float, sensitivity: float = 1.0) -> float:
    """Exact δ(ε) of the continuous Gaussian mechanism N(0, σ²) with L2 sensitivity Δ."""
    sigma = _check_positive(sigma, "sigma")
    epsilon = check_epsilon(epsilon)
    sensitivity = _check_positive(sensitivity, "sensitivity")
    a = sensitivity / (2 * sigma) - epsilon * sigma / sensitivity
    b = -sensitivity / (2 * sigma) - epsilon * sigma / sensitivity
    # Imported here: scipy.special costs seconds on a cold disk, and release planning
    # (which imports dp_pipeline.accounting) never needs the continuous Gaussian.
    from scipy.special import log_ndtr, ndtr

    return float(ndtr(a) - math.exp(epsilon + float(log_ndtr(b))))


def gaussian_sigma_vinterbo(epsilon: Real, delta: Real, sensitivity: Real = 1.0) -> float:
    """Vinterbo (2022) bound (9): σ = Δ/(ε√2)·(sqrt(a·z + ε) + s·sqrt(a·z)),
    z = -ln(4δ(1-δ)), (a, s) = (1, 1) for δ <= 1/2 and (π/4, -1) otherwise. Rounded up."""
    epsilon = _check_positive(epsilon, "epsilon")
    delta = check_delta(delta)
    sensitivity = _check_positive(sensitivity, "sensitivity")
    z = -math.log(4 * delta * (1 - delta))
    a, s = (1.0, 1.0) if delta <= 0.5 else (math.pi / 4, -1.0)
    sigma = (
        sensitivity / (epsilon * math.sqrt(2)) * (math.sqrt(a * z + epsilon) + s * math.sqrt(a * z))
    )
    return round_up(sigma)


def gaussian_sigma_classic(epsilon: Real, delta: Real, sensitivity: Real = 1.0) -> float:
    """σ = Δ·sqrt(2 ln(1.25/δ))/ε (Dwork & Roth 2014, Thm. A.1), valid only for ε < 1."""
    epsilon = _check_positive(epsilon, "epsilon")
    delta = check_delta(delta)
    sensitivity = _check_positive(sensitivity, "sensitivity")
    if epsilon >= 1:
        raise DPValueError(
            f"epsilon must be < 1 for the classic Gaussian bound, got {epsilon!r}; use "
            f"gaussian_sigma_analytic or gaussian_sigma_vinterbo"
        )
    return round_up(sensitivity * math.sqrt(2 * math.log(1.25 / delta)) / epsilon)


def gaussian_sigma_analytic(epsilon: Real, delta: Real, sensitivity: Real = 1.0) -> float:
    """Smallest σ (within 1e-12 relative, rounded up) with the Balle–Wang condition <= δ."""
    epsilon = check_epsilon(epsilon)
    delta = check_delta(delta)
    sensitivity = _check_positive(sensitivity, "sensitivity")
    high = gaussian_sigma_vinterbo(epsilon, delta, sensitivity) if epsilon > 0 else 1.0
    while balle_wang_delta(high, epsilon, sensitivity) > delta:
        high *= 2
    low = high / 2
    while low > 1e-300 and balle_wang_delta(low, epsilon, sensitivity) <= delta:
        high, low = low, low / 2
    while high - low > 1e-12 * high:
        middle = 0.5 * (low + high)
        if balle_wang_delta(middle, epsilon, sensitivity) <= delta:
            high = middle
        else:
            low = middle
    return round_up(high)
