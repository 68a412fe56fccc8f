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

from collections import Counter
from collections.abc import Sequence
from fractions import Fraction

from dp_pipeline.accounting._checks import check_delta, check_epsilon
from dp_pipeline.accounting.bounds import DeltaBound, EpsilonBound
from dp_pipeline.accounting.coarse_lattice import coarsened_lattice_loss
from dp_pipeline.accounting.epsilon_search import epsilon_from_delta_function
from dp_pipeline.accounting.inversion import (
    SMOOTH_SIGMA2,
    InversionComposition,
    discrete_gaussian_support,
    smooth_gaussian,
)
from dp_pipeline.accounting.lattice import LatticeComponent, lattice_loss
from dp_pipeline.accounting.pld import pld_from_lattice_components
from dp_pipeline.accounting.zcdp import zcdp_to_epsilon
from dp_pipeline.errors import DPTypeError, DPValueError
from dp_pipeline.rational import exact_rational, positive_rational

__all__ = [
    "multivariate_delta",
    "multivariate_epsilon",
]

_COARSENED = "multivariate_fft_coarsened (lattice step too small for the exact FFT)"
_INVERSION = "mgf_inversion (lattice step too small for the multivariate FFT)"
_INVERSION_TIGHT = 1e-6


def discrete_gaussian_components(
    sigma2s: Sequence[object], mu: Sequence[object]
) -> list[LatticeComponent]:
    """Group equal (σ², |μ|) coordinates into lattice components (μ = 0 costs nothing)."""
    if isinstance(sigma2s, (str, bytes)) or isinstance(mu, (str, bytes)):
        raise DPTypeError("sigma2s and mu must be sequences")
    if len(sigma2s) != len(mu):
        raise DPValueError(
            f"sigma2s and mu must have the same length (one σ² and one shift per coordinate), "
            f"got {len(sigma2s)} and {len(mu)}"
        )
    if len(sigma2s) == 0:
        raise DPValueError("sigma2s and mu must not be empty: there is nothing to compose")
    counts: Counter = Counter()
    for index, (sigma2, shift) in enumerate(zip(sigma2s, mu, strict=True)):
        sigma2 = positive_rational(sigma2, f"sigma2s[{index}]")
        shift_exact = exact_rational(shift, f"mu[{index}]")
        if shift_exact.denominator != 1:
            raise DPValueError(f"mu[{index}] must be an integer shift, got {shift!r}")
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
        coarse = coarsened_lattice_loss(components, tolerance)
        if coarse is not None:
            second = coarse.delta_bound(epsilon, _COARSENED)
            if first is None:
                return second
            return first.intersect(second)  # both brackets are rigorous
        if first is not None:
            return first
        pld = pld_from_lattice_components(components)
        bound = pld.delta(epsilon)
        return DeltaBound(
            bound.lower, bound.upper, "pld_fft (lattice step too small for the multivariate FFT)"
        )
    return loss.delta_bound(epsilon, "multivariate_fft")


def _inversion_of(components: Sequence[LatticeComponent]):
    """The MGF inversion (`inversion`) of discrete Gaussian components, or None if none is
    smooth (σ² >= 36.5)."""
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
        coarse = coarsened_lattice_loss(components, tolerance)
        if coarse is not None:
            return epsilon_from_delta_function(
                lambda eps: coarse.delta_bound(eps, _COARSENED), delta, high, _COARSENED
            )
        pld = pld_from_lattice_components(components)
        return epsilon_from_delta_function(
            pld.delta,
            delta,
            high,
            "pld_fft (lattice step too small for the multivariate FFT)",
        )
    return epsilon_from_delta_function(
        lambda eps: loss.delta_bound(eps, "multivariate_fft"), delta, high, "multivariate_fft"
    )
