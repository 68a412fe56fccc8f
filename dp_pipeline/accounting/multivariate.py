"""Privacy loss of independent lattice mechanisms by FFT (Canonne, Kamath & Steinke 2020, §4).

The privacy loss of a composition of discrete Gaussians (and of other mechanisms whose loss
lives on a rational lattice, such as the discrete Laplace or randomized response with a
rational ε) is Z = C + γ·W with W an integer random variable. The characteristic function of
W is the product of the components' characteristic functions (k identical components: the
k-th power); evaluating it at θ_k = 2πk/m and inverting by FFT gives the pmf of W mod m.

Error accounting (rigorous apart from the float round-off model):
- aliasing/truncation: with E = P[W outside the window] (Chernoff bound on the centred W:
  discrete Gaussians are σ²-sub-Gaussian, CKS Corollary 9; bounded components use their exact
  moment generating function), the computed δ = Σ_window p̃_w·f(w), f ∈ [0, 1], differs from
  the true δ by at most E (aliased mass adds at most E, the mass outside removes at most E,
  with opposite signs);
- round-off: |Δφ| <= c·u per frequency (u = 2^-53) for the product of G group factors, and
  Σ_w |Δp_w| <= sqrt(m)·max|Δφ|; we charge 2·u·sqrt(m)·(log2 m + G + Σ log2(count+1) + 4).
Result: lower = computed - error (clipped at 0), upper = computed + error.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from dp_pipeline.accounting._checks import check_delta, check_epsilon, round_up
from dp_pipeline.accounting.bounds import DeltaBound, EpsilonBound
from dp_pipeline.rational import exact_rational, positive_rational

__all__ = [
    "LatticeComponent",
    "LatticeLoss",
    "fraction_gcd",
    "lattice_loss",
    "multivariate_delta",
    "multivariate_epsilon",
]

MAX_FFT_SIZE = 1 << 22
_COARSENED = "multivariate_fft_coarsened (lattice step too small for the exact FFT)"
_UNIT_ROUNDOFF = 2.0**-53
_INVERSION = "mgf_inversion (lattice step too small for the multivariate FFT)"
_INVERSION_TIGHT = 1e-6


def fraction_gcd(values: Sequence[Fraction]) -> Fraction:
    """Largest rational γ with every value an integer multiple of γ (values > 0)."""
    result = Fraction(0)
    for value in values:
        if result == 0:
            result = value
        else:
            result = Fraction(
                math.gcd(
                    result.numerator * value.denominator, value.numerator * result.denominator
                ),
                result.denominator * value.denominator,
            )
    return result


@dataclass(frozen=True)
class LatticeComponent:
    """A privacy loss offset + step·K with K integer, repeated ``count`` times independently.

    Either ``sigma2`` is set (K ~ N_Z(0, σ²)) or ``probabilities`` (P[K = i], i = 0..r).
    """

    offset: Fraction
    step: Fraction
    count: int
    sigma2: Fraction | None = None
    probabilities: tuple[float, ...] | None = None


def _discrete_gaussian_log_phi(theta: np.ndarray, sigma2: float) -> np.ndarray:
    """log φ(θ) of N_Z(0, σ²), θ in [-π, π], by Poisson summation (every term positive)."""
    terms = max(1, math.ceil(math.sqrt(2 * 50 / sigma2) / (2 * math.pi)) + 1)
    shifts = 2 * math.pi * np.arange(-terms, terms + 1)
    log_terms = -0.5 * sigma2 * (theta[:, None] - shifts[None, :]) ** 2
    top = log_terms.max(axis=1)
    numerator = top + np.log(np.exp(log_terms - top[:, None]).sum(axis=1))
    denominator = math.log(sum(math.exp(-0.5 * sigma2 * s * s) for s in shifts))
    return numerator - denominator


def _log_mgf(component: LatticeComponent, multiplier: int, lam: np.ndarray) -> np.ndarray:
    """count · log E[exp(λ·n·(K - E K))] (an upper bound for the discrete Gaussian)."""
    if component.sigma2 is not None:
        return component.count * 0.5 * lam**2 * multiplier**2 * float(component.sigma2)
    probabilities = np.asarray(component.probabilities)
    values = np.arange(len(probabilities), dtype=np.float64)
    mean = float(probabilities @ values)
    with np.errstate(divide="ignore"):
        log_p = np.log(probabilities)
    exponents = log_p[None, :] + np.outer(lam, multiplier * (values - mean))
    top = exponents.max(axis=1)
    return component.count * (top + np.log(np.exp(exponents - top[:, None]).sum(axis=1)))


def _tail_bound(components, multipliers, distance: float, proxy_variance: float) -> float:
    """Chernoff bound on P[W - E W >= distance] + P[W - E W <= -distance]."""
    if distance <= 0:
        return 1.0
    lam = (distance / proxy_variance) * np.geomspace(1 / 16, 4, 25)
    total = 0.0
    for sign in (1.0, -1.0):
        log_mgf = sum(
            _log_mgf(c, n, sign * lam) for c, n in zip(components, multipliers, strict=True)
        )
        total += float(np.exp(np.min(log_mgf - lam * distance)))
    return min(1.0, total)


@dataclass(frozen=True)
class LatticeLoss:
    """The distribution of a composed privacy loss C + γ·w on a window of integers w."""

    probabilities: np.ndarray  # p̃_w for w = first, first+1, ...
    first: int
    gamma: Fraction
    offset: Fraction
    error: float  # bound on |computed δ - true δ| for every ε

    def losses(self) -> np.ndarray:
        w = np.arange(self.first, self.first + len(self.probabilities), dtype=np.float64)
        return float(self.offset) + float(self.gamma) * w

    def delta_bound(self, epsilon: float, method: str) -> DeltaBound:
        losses = self.losses()
        start = int(np.searchsorted(losses, epsilon, side="right"))
        tail = self.probabilities[start:]
        computed = float(np.sum(tail * -np.expm1(epsilon - losses[start:])))
        lower = max(0.0, computed - self.error)
        upper = min(1.0, round_up(computed + self.error))
        return DeltaBound(lower=lower, upper=upper, method=method)


def lattice_loss(
    components: Sequence[LatticeComponent], tolerance: float = 1e-13, max_size: int = MAX_FFT_SIZE
) -> LatticeLoss | None:
    """Compose lattice components by FFT; ``None`` if the window would exceed ``max_size``.

    ``tolerance`` bounds the aliasing error E (absolute, on δ).
    """
    components = [c for c in components if c.count > 0]
    gamma = fraction_gcd([c.step for c in components])
    multipliers = [int(c.step / gamma) for c in components]
    # A fine lattice (e.g. 1,000 unrelated σ²) makes the multipliers astronomically large; a
    # component whose own variance n²·count·Var(K) exceeds max_size² already needs a window
    # wider than max_size, so give up before any float conversion can overflow.
    for component, n in zip(components, multipliers, strict=True):
        if component.sigma2 is not None:
            log_variance = math.log(component.sigma2)
        else:
            probabilities = np.asarray(component.probabilities)
            values = np.arange(len(probabilities))
            spread = float(probabilities @ (values - probabilities @ values) ** 2)
            log_variance = math.log(max(spread, 1e-300))
        if math.log(component.count) + 2 * math.log(n) + log_variance > 2 * math.log(max_size):
            return None
    offset = sum((c.count * c.offset for c in components), Fraction(0))
    mean = 0.0
    proxy_variance = 0.0
    for component, n in zip(components, multipliers, strict=True):
        if component.sigma2 is not None:
            proxy_variance += component.count * n * n * float(component.sigma2)
        else:
            probabilities = np.asarray(component.probabilities)
            values = np.arange(len(probabilities))
            k_mean = float(probabilities @ values)
            mean += component.count * n * k_mean
            k_var = float(probabilities @ (values - k_mean) ** 2)
            proxy_variance += component.count * n * n * max(k_var, 1e-300)
    center = round(mean)
    half = 2 + math.sqrt(2 * proxy_variance * math.log(4 / tolerance))
    size = 1 << max(4, math.ceil(math.log2(2 * half + 4)))
    while True:
        if size > max_size:
            return None
        aliasing = _tail_bound(components, multipliers, size / 2 - 1.5, proxy_variance)
        if aliasing <= tolerance:
            break
        size *= 2
    frequencies = np.arange(size, dtype=np.int64)
    log_phi = np.zeros(size)
    phi_complex = None
    for component, n in zip(components, multipliers, strict=True):
        if component.sigma2 is not None:
            index = (frequencies * (n % size)) % size
            signed = np.where(index > size // 2, index - size, index)
            theta = (2 * math.pi / size) * signed
            log_phi += component.count * _discrete_gaussian_log_phi(theta, float(component.sigma2))
        else:
            masses = np.zeros(size, dtype=np.complex128)
            positions = (n * np.arange(len(component.probabilities), dtype=np.int64)) % size
            np.add.at(masses, positions, np.asarray(component.probabilities))
            factor = np.fft.ifft(masses) * size
            factor = factor**component.count if component.count > 1 else factor
            phi_complex = factor if phi_complex is None else phi_complex * factor
    phi = np.exp(log_phi)
    if phi_complex is not None:
        phi = phi * phi_complex
    residues = np.fft.fft(phi).real / size
    first = center - size // 2 + 1
    window = residues[(first + np.arange(size)) % size]
    np.clip(window, 0.0, None, out=window)
    groups = len(components)
    roundoff = (
        2
        * _UNIT_ROUNDOFF
        * math.sqrt(size)
        * (math.log2(size) + groups + sum(math.log2(c.count + 1) for c in components) + 4)
    )
    return LatticeLoss(
        probabilities=window,
        first=first,
        gamma=gamma,
        offset=offset,
        error=aliasing + roundoff,
    )


def discrete_gaussian_components(
    sigma2s: Sequence[object], mu: Sequence[object]
) -> list[LatticeComponent]:
    """Group equal (σ², |μ|) coordinates into lattice components (μ = 0 costs nothing)."""
    if isinstance(sigma2s, (str, bytes)) or isinstance(mu, (str, bytes)):
        raise TypeError("sigma2s and mu must be sequences")
    if len(sigma2s) != len(mu):
        raise ValueError(
            f"sigma2s and mu must have the same length (one σ² and one shift per coordinate), "
            f"got {len(sigma2s)} and {len(mu)}"
        )
    if len(sigma2s) == 0:
        raise ValueError("sigma2s and mu must not be empty: there is nothing to compose")
    counts: Counter = Counter()
    for index, (sigma2, shift) in enumerate(zip(sigma2s, mu, strict=True)):
        sigma2 = positive_rational(sigma2, f"sigma2s[{index}]")
        shift_exact = exact_rational(shift, f"mu[{index}]")
        if shift_exact.denominator != 1:
            raise ValueError(f"mu[{index}] must be an integer shift, got {shift!r}")
        if shift_exact != 0:
            counts[(sigma2, abs(int(shift_exact)))] += 1
    return [
        LatticeComponent(
            offset=Fraction(m * m) / (2 * s2), step=Fraction(m) / s2, count=k, sigma2=s2
        )
        for (s2, m), k in counts.items()
    ]


def multivariate_delta(
    sigma2s: Sequence[object], mu: Sequence[object], epsilon: float, tolerance: float = 1e-13
) -> DeltaBound:
    """δ(ε) for independent N_Z(0, σ_j²) noise and neighbours differing by μ ∈ Z^d (CKS §4).

    Returns a ``DeltaBound`` (upper = the guarantee). When the lattice step is too small for
    an FFT of at most 2^22 points, the components that break the lattice are rounded up
    (upper) and down (lower) onto a coarser grid (`coarse_lattice`), and if even that fails
    it falls back to the privacy-loss-distribution accountant (``method`` says which).
    ``tolerance`` bounds the aliasing error on δ.
    """
    epsilon = check_epsilon(epsilon)
    components = discrete_gaussian_components(sigma2s, mu)
    if not components:
        return DeltaBound(0.0, 0.0, "multivariate_fft")
    loss = lattice_loss(components, tolerance)
    if loss is None:
        inversion = _inversion_of(components)
        first = None
        if inversion is not None:
            first = DeltaBound(*inversion.delta_bounds(epsilon), _INVERSION)
            if first.upper - first.lower <= _INVERSION_TIGHT * first.upper:
                return first
        from dp_pipeline.accounting.coarse_lattice import coarsened_lattice_loss

        coarse = coarsened_lattice_loss(components, tolerance)
        if coarse is not None:
            second = coarse.delta_bound(epsilon, _COARSENED)
            if first is None:
                return second
            # both brackets are rigorous: keep the larger lower and the smaller upper
            best = first if first.upper <= second.upper else second
            return DeltaBound(
                min(max(first.lower, second.lower), best.upper), best.upper, best.method
            )
        if first is not None:
            return first
        from dp_pipeline.accounting.pld import pld_from_lattice_components

        pld = pld_from_lattice_components(components)
        bound = pld.delta_bound(epsilon)
        return DeltaBound(
            bound.lower, bound.upper, "pld_fft (lattice step too small for the multivariate FFT)"
        )
    return loss.delta_bound(epsilon, "multivariate_fft")


def _inversion_of(components: Sequence[LatticeComponent]):
    """The MGF inversion (`inversion`) of discrete Gaussian components, or None if none is
    smooth (σ² >= 36.5)."""
    from dp_pipeline.accounting.inversion import (
        SMOOTH_SIGMA2,
        InversionComposition,
        discrete_gaussian_support,
        smooth_gaussian,
    )

    smooth, support = [], []
    for component in components:
        shift = int(component.step * component.sigma2)
        if component.sigma2 >= SMOOTH_SIGMA2:
            smooth.append(smooth_gaussian(component.sigma2, shift, component.count))
        else:
            support.append(
                discrete_gaussian_support(float(component.sigma2), shift, component.count)
            )
    return InversionComposition(smooth, support) if smooth else None


def epsilon_from_delta_function(delta_bound_of, delta: float, high: float, method: str):
    """EpsilonBound from a δ(ε) bound function (both non-increasing in ε).

    upper: an ε with δ_upper(ε) <= δ (the guarantee), within ~1e-7 relative of the
    smallest such; lower: an ε with δ_lower(ε) > δ, so the true ε(δ) is above it (or 0).
    Each is the end of a bracket shrunk by regula falsi on log δ (Illinois), which needs a
    handful of evaluations where bisection needs about fifty. Every bracket end is a
    direct evaluation of ``delta_bound_of``; evaluations are shared between the two
    searches (the lower search starts from the largest ε already seen with δ_lower > δ),
    and ε = 0 is evaluated only when the searches come near it.
    """
    seen: dict = {}

    def bound_at(eps: float):
        if eps not in seen:
            seen[eps] = delta_bound_of(eps)
        return seen[eps]

    while bound_at(high).upper > delta:
        high = 2 * high + 1
    upper = _solve(lambda eps: bound_at(eps).upper, delta, high, feasible_end=True)
    below = [eps for eps, bound in seen.items() if eps < upper and bound.lower > delta]
    lower = _solve(
        lambda eps: bound_at(eps).lower,
        delta,
        upper,
        feasible_end=False,
        low=max(below) if below else None,
    )
    return EpsilonBound(lower=min(lower, upper), upper=upper, method=method)


def _solve(
    delta_of,
    delta: float,
    high: float,
    feasible_end: bool,
    rtol: float = 1e-7,
    low: float | None = None,
):
    """Bracket [low, high] of δ_of(ε) = δ (δ_of non-increasing, δ_of(high) <= δ); returns
    the feasible end (δ_of <= δ) or the infeasible end (δ_of > δ, 0.0 if none).

    ``low``: an ε known to have δ_of(low) > δ, if any; otherwise one is looked for below
    ``high`` (secant steps on log δ, each at least 5% of the way down), and ε = 0 is tried
    once the search has come below a quarter of ``high``.
    """
    from dp_pipeline.accounting.discrete_gaussian import round_up

    target = math.log(delta)

    def excess(eps: float) -> float:
        value = delta_of(eps)
        return math.log(value) - target if value > 0 else -math.inf

    f_high = excess(high)
    if low is None:
        start = high
        trial, f_trial = 0.9 * high, None
        while True:
            if trial <= 0.25 * start:
                low, f_low = 0.0, excess(0.0)
                if f_low <= 0:
                    return 0.0
                break
            f_trial = excess(trial)
            if f_trial > 0:
                low, f_low = trial, f_trial
                break
            # both feasible: extrapolate the secant of log δ to its crossing, overshooting
            previous, f_previous = high, f_high
            high, f_high = trial, f_trial
            slope = (f_previous - f_high) / (previous - high)
            if math.isfinite(slope) and slope < 0:
                guess = high - 1.5 * f_high / slope
                trial = min(0.95 * high, max(guess, 0.5 * high))
            else:
                trial = 0.5 * high
    else:
        f_low = excess(low)
    side = 0
    for _ in range(200):
        if high - low <= rtol * high + 1e-300:
            break
        if math.isfinite(f_low) and math.isfinite(f_high) and f_low != f_high:
            trial = high - f_high * (high - low) / (f_high - f_low)
            margin = 0.1 * (high - low) if side == 0 else 0.25 * rtol * high
            trial = min(max(trial, low + margin), high - margin)
        else:
            trial = 0.5 * (low + high)
        if not low < trial < high:
            trial = 0.5 * (low + high)
        value = excess(trial)
        if value <= 0:
            high, f_high = trial, value
            if side == 1:
                f_low /= 2
            side = 1
        else:
            low, f_low = trial, value
            if side == -1:
                f_high /= 2
            side = -1
    return round_up(high) if feasible_end else low


def multivariate_epsilon(
    sigma2s: Sequence[object], mu: Sequence[object], delta: float, tolerance: float = 1e-13
) -> EpsilonBound:
    """Smallest ε (upper bound, rounded up) with multivariate δ(ε) <= δ; inverse of
    `multivariate_delta`."""
    delta = check_delta(delta)
    components = discrete_gaussian_components(sigma2s, mu)
    if not components:
        return EpsilonBound(0.0, 0.0, "multivariate_fft")
    loss = lattice_loss(components, tolerance)
    from dp_pipeline.accounting.zcdp import zcdp_to_epsilon

    rho = sum(float(c.count * c.offset) for c in components)
    high = zcdp_to_epsilon(rho, delta)
    if loss is None:
        inversion = _inversion_of(components)
        if inversion is not None:

            def inverted(eps):
                return DeltaBound(*inversion.delta_bounds(eps), _INVERSION)

            bound = epsilon_from_delta_function(inverted, delta, high, _INVERSION)
            if bound.upper - bound.lower <= 1e-4 * bound.upper:
                return bound
        from dp_pipeline.accounting.coarse_lattice import coarsened_lattice_loss

        coarse = coarsened_lattice_loss(components, tolerance)
        if coarse is not None:
            return epsilon_from_delta_function(
                lambda eps: coarse.delta_bound(eps, _COARSENED), delta, high, _COARSENED
            )
        from dp_pipeline.accounting.pld import pld_from_lattice_components

        pld = pld_from_lattice_components(components)
        return epsilon_from_delta_function(
            pld.delta_bound,
            delta,
            high,
            "pld_fft (lattice step too small for the multivariate FFT)",
        )
    return epsilon_from_delta_function(
        lambda eps: loss.delta_bound(eps, "multivariate_fft"), delta, high, "multivariate_fft"
    )
