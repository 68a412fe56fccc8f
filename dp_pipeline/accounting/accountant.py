"""PrivacyAccountant: the driver-side ledger of one release's mechanisms and its (ε, δ).

It records events (mechanism, per-coordinate sensitivity vector, count) and answers δ(ε),
ε(δ) and ρ with the tightest method that applies:

1. one discrete Gaussian (or Laplace) coordinate with Δ <= 64: the exact 1-D formula
   (CKS Theorem 7, maximised over the shifts 1..Δ), as a rigorous bracket (direct sums with
   a written error budget, or for σ ≳ 30,000 the MGF inversion below: cost independent of σ);
2. whenever a discrete Gaussian with σ² >= 36.5 is present: the exact δ(ε) of the whole
   composition by inverting its moment generating function (`inversion`, "mgf_inversion"):
   no discretisation, every error term a rigorous bound, relative precision independent
   of δ (down to the float range);
3. if that bracket is wider than 1e-6 relative: also the exact lattice FFT of CKS §4 when
   everything sits on a common rational lattice of practical size, and if the bracket is
   wider than 1e-3, the approximate FFT paths (the coarsened lattice of `coarse_lattice`,
   else the grid privacy-loss distribution); the brackets are intersected (each is
   rigorous) and the bound names the method that gave its upper end;
4. without a smooth discrete Gaussian (pure-DP and Laplace compositions): steps 3's paths;

and, whenever every event has a finite ρ, the upper bound is also capped by the zCDP
conversion (CKS Corollary 13), which is always valid. Each answer names its method and
carries a lower bound (the gap says how tight the upper bound is).

Sensitivity vectors are taken as the worst-case neighbour difference (the engines compute
it from the contribution bounds); a scalar sensitivity Δ of a single one-coordinate event is
maximised over the shifts 1..Δ.
"""

from __future__ import annotations

import math
import numbers
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

from dp_pipeline.accounting._checks import check_delta, check_epsilon
from dp_pipeline.accounting.bounds import DeltaBound, EpsilonBound
from dp_pipeline.accounting.discrete_laplace import discrete_laplace_loss_pmf
from dp_pipeline.accounting.multivariate import (
    LatticeComponent,
    epsilon_from_delta_function,
    lattice_loss,
)
from dp_pipeline.accounting.zcdp import zcdp_to_delta, zcdp_to_epsilon
from dp_pipeline.mechanisms import DiscreteGaussian, DiscreteLaplace
from dp_pipeline.mechanisms.registry import mechanism_from_dict, mechanism_to_dict
from dp_pipeline.rational import exact_rational

__all__ = ["PrivacyAccountant", "PrivacyEvent"]

_LATTICE_TOLERANCE = 1e-14
_MAX_LATTICE_WORK = 1 << 26  # FFT size × number of distinct components
_MAX_EXACT_FFT = 1 << 20  # beyond, the coarsened lattice (2^15-2^19 points) is faster and tighter
_PLD_RESOLUTION = 1000  # grid points per standard deviation of the composed loss
_EXHAUSTIVE_SHIFTS = 64  # one coordinate: Theorem 7 maximised over shifts 1..Δ up to this Δ
_MAX_SUPPORT = 4096  # finite-support components larger than this are left to the FFT paths
_MAX_TOTAL_SUPPORT = 1 << 16  # support points summed at every node of the MGF inversion
_SUPPORT_SIGMA2 = 10_000  # below, a discrete Gaussian may be summed exactly as a support
_MAX_SPLIT_SUPPORT = 4096  # ... while such supports total at most this many points
_TIGHT = 1e-6  # relative gap of the MGF inversion below which no other path is tried
_TIGHT_ENOUGH = 1e-3  # relative gap of the MGF inversion below which no other path is tried


@dataclass(frozen=True)
class PrivacyEvent:
    """One recorded use: ``count`` independent runs of ``mechanism`` with shifts ``sensitivity``."""

    mechanism: Any
    sensitivity: tuple[int, ...]
    count: int


def _sensitivity_tuple(sensitivity: object) -> tuple[int, ...]:
    if isinstance(sensitivity, (str, bytes)):
        raise TypeError(
            f"sensitivity must be an integer or a sequence of integers, got {sensitivity!r}"
        )
    values = list(sensitivity) if isinstance(sensitivity, (Sequence, np.ndarray)) else [sensitivity]
    if not values:
        raise ValueError("sensitivity must not be an empty sequence")
    result = []
    for index, value in enumerate(values):
        name = "sensitivity" if len(values) == 1 else f"sensitivity[{index}]"
        if isinstance(value, bool) or not isinstance(value, (numbers.Integral, Fraction)):
            raise TypeError(
                f"{name} must be an integer (a discrete mechanism's queries move by whole "
                f"units), got {value!r}"
            )
        if isinstance(value, Fraction) and value.denominator != 1:
            raise TypeError(f"{name} must be an integer, got {value!r}")
        if int(value) < 0:
            raise ValueError(f"{name} must be >= 0, got {value!r}")
        result.append(int(value))
    if not any(result):
        raise ValueError(f"sensitivity must have at least one non-zero shift, got {tuple(result)}")
    return tuple(result)


def _pure_epsilon_of(mechanism) -> Fraction | float | None:
    pure = getattr(mechanism, "pure_epsilon", None)
    if pure is None:
        return None
    value = pure() if callable(pure) else pure
    if isinstance(value, Fraction):
        return value
    return float(value)


class PrivacyAccountant:
    """Composes the mechanisms of a release; see the module docstring for the methods."""

    def __init__(self) -> None:
        self._events: list[PrivacyEvent] = []
        self._cache: dict = {}

    # ----------------------------------------------------------------- recording
    def add(self, mechanism, sensitivity=1, count: int = 1) -> PrivacyAccountant:
        """Record ``count`` independent runs of ``mechanism`` (returns self for chaining).

        ``sensitivity``: an integer Δ, or the per-coordinate integer shifts μ of the worst
        neighbour (e.g. L0 cells each shifted by L∞). Mechanisms described by
        ``privacy_loss_pmfs()`` or ``pure_epsilon`` take no sensitivity (must be 1).
        """
        if isinstance(count, bool) or not isinstance(count, numbers.Integral) or count < 1:
            raise ValueError(f"count must be an integer >= 1, got {count!r}")
        shifts = _sensitivity_tuple(sensitivity)
        if not isinstance(mechanism, (DiscreteGaussian, DiscreteLaplace)):
            if not hasattr(mechanism, "privacy_loss_pmfs") and _pure_epsilon_of(mechanism) is None:
                raise TypeError(
                    f"mechanism must be a DiscreteGaussian, a DiscreteLaplace, or have "
                    f"privacy_loss_pmfs() or pure_epsilon; got {type(mechanism).__name__}"
                )
            if shifts != (1,):
                raise ValueError(
                    f"sensitivity must be 1 for {type(mechanism).__name__}: its "
                    f"privacy_loss_pmfs()/pure_epsilon already describe one run, "
                    f"got {sensitivity!r}"
                )
        self._events.append(PrivacyEvent(mechanism, shifts, int(count)))
        self._cache.clear()
        return self

    @property
    def events(self) -> tuple[PrivacyEvent, ...]:
        return tuple(self._events)

    # ----------------------------------------------------------------- zCDP / pure
    def rho(self) -> Fraction:
        """Exact zCDP ρ of the composition (sum over events and coordinates)."""
        self._require_events()
        total = Fraction(0)
        for event in self._events:
            total += event.count * self._event_rho(event)
        return total

    @staticmethod
    def _event_rho(event: PrivacyEvent) -> Fraction:
        mechanism = event.mechanism
        if isinstance(mechanism, DiscreteGaussian):
            return sum((Fraction(m * m) for m in event.sensitivity), Fraction(0)) / (
                2 * mechanism.sigma2
            )
        if isinstance(mechanism, DiscreteLaplace):
            return sum((Fraction(m, 1) / mechanism.scale) ** 2 / 2 for m in event.sensitivity)
        exact_rho = getattr(mechanism, "zcdp_rho", None)
        if callable(exact_rho):  # the mechanism states its own exact ρ (a Fraction)
            return Fraction(exact_rho())
        pure = _pure_epsilon_of(mechanism)
        if pure is not None and not hasattr(mechanism, "privacy_loss_pmfs"):
            pure_exact = pure if isinstance(pure, Fraction) else Fraction(pure)
            return pure_exact**2 / 2
        raise ValueError(
            f"{type(mechanism).__name__} has no finite zCDP ρ known to the accountant "
            f"(it is described only by privacy_loss_pmfs()); use delta()/epsilon()"
        )

    def _rho_or_none(self) -> float | None:
        try:
            return float(self.rho())
        except ValueError:
            return None

    def pure_epsilon(self) -> Fraction:
        """Exact total pure ε (basic composition); errors if any event is not pure DP."""
        self._require_events()
        total = Fraction(0)
        for event in self._events:
            mechanism = event.mechanism
            if isinstance(mechanism, DiscreteLaplace):
                total += event.count * sum(Fraction(m) for m in event.sensitivity) / mechanism.scale
                continue
            pure = None if isinstance(mechanism, DiscreteGaussian) else _pure_epsilon_of(mechanism)
            if pure is None:
                raise ValueError(
                    f"{type(mechanism).__name__} is not pure ε-DP; pure_epsilon() needs every "
                    f"mechanism to be pure DP"
                )
            total += event.count * (pure if isinstance(pure, Fraction) else Fraction(pure))
        return total

    # ----------------------------------------------------------------- (ε, δ)
    def delta(self, epsilon: float, method: str | None = None) -> DeltaBound:
        """Bound on δ(ε) of the whole composition (``.upper`` is the guarantee).

        ``method="pure_dp"`` asks for plain pure-DP addition (δ = 0 once ε >= Σ ε_i).
        """
        epsilon = check_epsilon(epsilon)
        self._require_events()
        if method == "pure_dp":
            total = float(self.pure_epsilon())
            if epsilon >= total:
                return DeltaBound(0.0, 0.0, "pure_dp")
        elif method is not None:
            raise ValueError(f"method must be None or 'pure_dp', got {method!r}")
        delta_of, _name = self._composition()
        return delta_of(epsilon)

    def epsilon(self, delta: float) -> EpsilonBound:
        """Bound on the smallest ε with δ(ε) <= δ (``.upper`` is the guarantee)."""
        delta = check_delta(delta)
        self._require_events()
        delta_of, name = self._composition()
        rho = self._rho_or_none()
        high = zcdp_to_epsilon(rho, delta) if rho is not None else 1.0
        return epsilon_from_delta_function(delta_of, delta, high, name)

    @property
    def method(self) -> str:
        """The method the accountant uses for this composition (the first of `methods`)."""
        self._require_events()
        return self._composition()[1]

    @property
    def methods(self) -> tuple[str, ...]:
        """Every method the accountant may use for this composition, in the order tried;
        each query's bound names the one that gave its upper bound."""
        self._require_events()
        self._composition()
        if "methods" not in self._cache:
            self._cache["methods"] = ("mgf_inversion", self._cache["fallback"]())
        return self._cache["methods"]

    def report(self, epsilon: float | None = None, delta: float | None = None) -> dict:
        """A JSON-safe summary: method, ρ (if finite) and the requested bounds with their gap."""
        result: dict = {"method": self.method, "events": len(self._events)}
        rho = self._rho_or_none()
        result["rho"] = None if rho is None else str(self.rho())
        if epsilon is not None:
            bound = self.delta(epsilon)
            result["delta"] = {
                "epsilon": epsilon,
                "upper": bound.upper,
                "lower": bound.lower,
                "gap": bound.gap,
                "method": bound.method,
            }
        if delta is not None:
            bound = self.epsilon(delta)
            result["epsilon"] = {
                "delta": delta,
                "upper": bound.upper,
                "lower": bound.lower,
                "gap": bound.gap,
                "method": bound.method,
            }
        return result

    # ----------------------------------------------------------------- internals
    def _require_events(self) -> None:
        if not self._events:
            raise ValueError("the accountant is empty: add() at least one mechanism first")

    def _composition(self):
        if "composition" not in self._cache:
            self._cache["composition"] = self._build_composition()
        return self._cache["composition"]

    def _build_composition(self):
        rho = self._rho_or_none()
        single = self._single_coordinate()
        inversion = None if single is not None else (self._inversion() or None)
        if single is not None:
            delta_of, name = single
            self._cache["methods"] = (name,)
        elif inversion is None:
            delta_of, name = self._fft_composition()
            self._cache["methods"] = (name,)
        else:
            built: list = []  # the FFT paths are built only if the MGF inversion is loose

            def fallback(eps, exact_only=False):
                if not built:
                    built.append(self._fft_composition(exact_only=True))
                if built[0] is None and not exact_only:
                    built[0] = self._fft_composition()
                return None if built[0] is None else built[0][0](eps)

            def fallback_name():
                fallback(1.0)
                return built[0][1]

            self._cache["fallback"] = fallback_name
            delta_of, name = _intersect(_inversion_delta(inversion), fallback)

        if rho is None:
            return delta_of, name

        def capped(eps):
            bound = delta_of(eps)
            zcdp = zcdp_to_delta(rho, eps)
            if zcdp < bound.upper:
                return DeltaBound(min(bound.lower, zcdp), zcdp, f"zcdp (tighter than {name})")
            return bound

        return capped, name

    def _fft_composition(self, exact_only: bool = False):
        """The lattice FFT, its coarsened variant, or the grid PLD: (δ bound function, name);
        with ``exact_only``, the exact lattice FFT or None."""
        components = self._lattice_components()
        loss = None
        if components is not None:
            loss = lattice_loss(
                components,
                _LATTICE_TOLERANCE,
                max_size=max(16, min(_MAX_EXACT_FFT, _MAX_LATTICE_WORK // max(1, len(components)))),
            )
        if loss is not None:
            return (lambda eps: loss.delta_bound(eps, "multivariate_fft")), "multivariate_fft"
        if exact_only:
            return None
        if components is not None:
            from dp_pipeline.accounting.coarse_lattice import coarsened_lattice_loss

            coarse = coarsened_lattice_loss(components, _LATTICE_TOLERANCE)
            if coarse is not None:
                name = "multivariate_fft_coarsened"
                return (lambda eps: coarse.delta_bound(eps, name)), name
        return self._pld().delta_bound, "pld_fft"

    def _single_coordinate(self):
        if len(self._events) != 1:
            return None
        event = self._events[0]
        if event.count != 1 or len(event.sensitivity) != 1:
            return None
        if event.sensitivity[0] > _EXHAUSTIVE_SHIFTS:
            # Theorem 7 maximised over every shift 1..Δ costs Δ exact tail sums per δ;
            # a sum with Δ = 200,000 would take hours. Larger Δ take the lattice path with
            # the shift Δ, the same worst-case rule as every composition (module docstring).
            return None
        mechanism, shift = event.mechanism, event.sensitivity[0]
        if isinstance(mechanism, DiscreteGaussian):
            from dp_pipeline.accounting.discrete_gaussian import discrete_gaussian_delta_bounds

            def delta_of(eps):
                # rigorous bracket of Theorem 7 (error budget in discrete_gaussian)
                lower, upper = discrete_gaussian_delta_bounds(mechanism.sigma2, eps, shift)
                return DeltaBound(lower, upper, "theorem7")

            return delta_of, "theorem7"
        if isinstance(mechanism, DiscreteLaplace):
            from dp_pipeline.accounting.discrete_laplace import discrete_laplace_delta_bounds

            def delta_of(eps):
                lower, upper = discrete_laplace_delta_bounds(mechanism.scale, eps, shift)
                return DeltaBound(lower, upper, "discrete_laplace_exact")

            return delta_of, "discrete_laplace_exact"
        return None

    def _inversion(self):
        """Candidate MGF-inversion compositions, each a list of neighbouring directions.

        Discrete Gaussians with σ² >= 36.5 can be "smooth" (their lattice is handled by the
        comb bound of `inversion`) or a finite support (exact at every node). Two splits are
        offered, tried in order: small σ² (< 10^4, if their supports stay small) as supports
        and the rest smooth, which makes the comb bound negligible; then every σ² >= 36.5
        smooth. Empty when no discrete Gaussian is smooth in either split.
        """
        candidates = []
        threshold = self._support_threshold()
        for split in (threshold, None) if threshold is not None else (None,):
            directions = self._inversion_split(split)
            if directions is not None:
                candidates.append(directions)
        return candidates

    def _support_threshold(self) -> Fraction | None:
        """The σ² below which discrete Gaussians are summed as supports: the smallest σ²
        first, while their supports (~78σ points each) total at most `_MAX_SPLIT_SUPPORT`
        and σ² < `_SUPPORT_SIGMA2`. None if that changes nothing."""
        from dp_pipeline.accounting.inversion import SMOOTH_SIGMA2

        sizes: dict = {}
        for event in self._events:
            mechanism = event.mechanism
            if isinstance(mechanism, DiscreteGaussian) and mechanism.sigma2 >= SMOOTH_SIGMA2:
                size = (78 * math.sqrt(float(mechanism.sigma2)) + 5) * len(
                    set(event.sensitivity) - {0}
                )
                sizes[mechanism.sigma2] = sizes.get(mechanism.sigma2, 0) + size
        total, threshold = 0.0, None
        for sigma2 in sorted(sizes):
            total += sizes[sigma2]
            if total > _MAX_SPLIT_SUPPORT or sigma2 >= _SUPPORT_SIGMA2:
                threshold = sigma2
                break
        if threshold is None or threshold == min(sizes, default=None):
            return None
        return threshold

    def _inversion_split(self, support_below):
        from dp_pipeline.accounting.inversion import (
            SMOOTH_SIGMA2,
            InversionComposition,
            SupportGroup,
            discrete_gaussian_support,
            smooth_gaussian,
        )

        gaussians, forward, backward = [], [], []
        asymmetric = False
        unit = 2.0**-53
        support_size = 0
        for event in self._events:
            mechanism = event.mechanism
            shifts = Counter(s for s in event.sensitivity if s)
            if isinstance(mechanism, DiscreteGaussian):
                for shift, multiplicity in shifts.items():
                    count = multiplicity * event.count
                    sigma2 = mechanism.sigma2
                    if sigma2 >= SMOOTH_SIGMA2 and (
                        support_below is None or sigma2 >= support_below
                    ):
                        gaussians.append(smooth_gaussian(sigma2, shift, count))
                    else:
                        group = discrete_gaussian_support(float(sigma2), shift, count)
                        support_size += len(group.masses)
                        forward.append(group)
                        backward.append(group)
                continue
            if isinstance(mechanism, DiscreteLaplace):
                for shift, multiplicity in shifts.items():
                    if shift > _MAX_SUPPORT:
                        return None
                    values, probabilities = discrete_laplace_loss_pmf(mechanism.scale, shift)
                    losses = (-shift + 2.0 * values) / float(mechanism.scale)
                    group = SupportGroup(
                        masses=probabilities,
                        losses=losses,
                        count=multiplicity * event.count,
                        loss_error=8 * unit * float(np.max(np.abs(losses))),
                        mass_error=8 * unit * (shift + 4),
                    )
                    support_size += len(group.masses)
                    forward.append(group)
                    backward.append(group)
                continue
            if hasattr(mechanism, "privacy_loss_pmfs"):
                p, q = (np.asarray(x, dtype=np.float64) for x in mechanism.privacy_loss_pmfs())
                if len(p) > _MAX_SUPPORT or p.shape != q.shape:
                    return None
                one, two = _pmf_group(p, q, event.count), _pmf_group(q, p, event.count)
                support_size += len(one.masses)
                forward.append(one)
                backward.append(two)
                asymmetric = asymmetric or not _same_group(one, two)
                continue
            pure = float(_pure_epsilon_of(mechanism))
            if pure > 0:
                high = 1 / (1 + math.exp(-pure))
                group = SupportGroup(
                    masses=np.array([high, 1 - high]),
                    losses=np.array([pure, -pure]),
                    count=event.count,
                    loss_error=2 * unit * pure,
                )
                support_size += 2
                forward.append(group)
                backward.append(group)
        if not gaussians or support_size > _MAX_TOTAL_SUPPORT:
            return None
        directions = [InversionComposition(gaussians, forward)]
        if asymmetric:
            directions.append(InversionComposition(gaussians, backward))
        return directions

    def _lattice_components(self) -> list[LatticeComponent] | None:
        counts: Counter = Counter()
        for event in self._events:
            mechanism = event.mechanism
            if isinstance(mechanism, DiscreteGaussian):
                for shift in event.sensitivity:
                    if shift:
                        counts[("dg", mechanism.sigma2, shift)] += event.count
            elif isinstance(mechanism, DiscreteLaplace):
                for shift in event.sensitivity:
                    if shift:
                        counts[("dl", mechanism.scale, shift)] += event.count
            elif hasattr(mechanism, "privacy_loss_pmfs"):
                return None
            else:
                pure = _pure_epsilon_of(mechanism)
                if not isinstance(pure, Fraction):
                    return None
                if pure > 0:
                    counts[("rr", pure, 1)] += event.count
        components = []
        for (kind, value, shift), count in counts.items():
            if kind == "dg":
                components.append(
                    LatticeComponent(
                        offset=Fraction(shift * shift) / (2 * value),
                        step=Fraction(shift) / value,
                        count=count,
                        sigma2=value,
                    )
                )
            elif kind == "dl":
                _, probabilities = discrete_laplace_loss_pmf(value, shift)
                components.append(
                    LatticeComponent(
                        offset=-Fraction(shift) / value,
                        step=2 / value,
                        count=count,
                        probabilities=tuple(float(p) for p in probabilities),
                    )
                )
            else:
                p = 1 / (1 + math.exp(-float(value)))
                components.append(
                    LatticeComponent(
                        offset=-value,
                        step=2 * value,
                        count=count,
                        probabilities=(1 - p, p),
                    )
                )
        return components or None

    def _pld(self):
        from dp_pipeline.accounting.pld import PrivacyLossDistribution

        parts_spec = []
        variance = 0.0
        for event in self._events:
            mechanism = event.mechanism
            if isinstance(mechanism, (DiscreteGaussian, DiscreteLaplace)):
                for shift, multiplicity in Counter(s for s in event.sensitivity if s).items():
                    parts_spec.append((mechanism, shift, multiplicity * event.count))
                    if isinstance(mechanism, DiscreteGaussian):
                        variance += (
                            multiplicity * event.count * shift * shift / float(mechanism.sigma2)
                        )
                    else:
                        variance += (
                            multiplicity * event.count * (shift / float(mechanism.scale)) ** 2
                        )
            else:
                parts_spec.append((mechanism, 1, event.count))
                pure = _pure_epsilon_of(mechanism)
                variance += event.count * (float(pure) ** 2 if pure is not None else 1.0)
        step = max(math.sqrt(variance) / _PLD_RESOLUTION, 1e-7)
        parts = []
        for mechanism, shift, count in parts_spec:
            part = PrivacyLossDistribution.from_mechanism(mechanism, shift, step)
            parts.append(part.self_compose(count) if count > 1 else part)
        while len(parts) > 1:
            parts = [
                parts[i].compose(parts[i + 1]) if i + 1 < len(parts) else parts[i]
                for i in range(0, len(parts), 2)
            ]
        return parts[0]

    # ----------------------------------------------------------------- persistence
    def to_dict(self) -> dict:
        """JSON-safe description of the events (Fractions as "p/q" strings)."""
        return {
            "version": 1,
            "events": [
                {
                    "mechanism": _mechanism_to_dict(event.mechanism),
                    "sensitivity": list(event.sensitivity),
                    "count": event.count,
                }
                for event in self._events
            ],
        }

    @classmethod
    def from_dict(cls, data: dict) -> PrivacyAccountant:
        """Rebuild an accountant from `to_dict` output."""
        if not isinstance(data, dict) or data.get("version") != 1 or "events" not in data:
            raise ValueError(
                "data must be a dict from PrivacyAccountant.to_dict() with version 1 and events"
            )
        accountant = cls()
        for index, event in enumerate(data["events"]):
            try:
                mechanism = _mechanism_from_dict(event["mechanism"])
                accountant.add(mechanism, event["sensitivity"], event["count"])
            except (KeyError, TypeError) as error:
                raise ValueError(f"events[{index}] is malformed: {error}") from error
        return accountant


def _pmf_group(p: np.ndarray, q: np.ndarray, count: int):
    """Finite-support loss log(p/q) under p; p > 0 = q is the +∞ mass, p = 0 is dropped."""
    from dp_pipeline.accounting.inversion import SupportGroup

    finite = (p > 0) & (q > 0)
    losses = np.log(p[finite]) - np.log(q[finite])
    unit = 2.0**-53
    error = 4 * unit * float(np.max(np.abs(np.log(p[finite])) + np.abs(np.log(q[finite])) + 1))
    return SupportGroup(
        masses=p[finite],
        losses=losses,
        count=count,
        infinite_mass=float(math.fsum(p[(p > 0) & (q == 0)])),
        loss_error=error if finite.any() else 0.0,
        mass_error=0.0,
    )


def _same_group(one, two) -> bool:
    a, b = np.argsort(one.losses), np.argsort(two.losses)
    return (
        one.infinite_mass == two.infinite_mass
        and len(a) == len(b)
        and bool(np.array_equal(one.losses[a], two.losses[b]))
        and bool(np.array_equal(one.masses[a], two.masses[b]))
    )


def _inversion_delta(candidates):
    """δ bound from the MGF inversion candidates (each a list of directions): the first
    within `_TIGHT_ENOUGH`, else the intersection of all of them (each is rigorous)."""

    def delta_of(epsilon: float) -> DeltaBound:
        best_lower, best_upper = 0.0, 1.0
        for directions in candidates:
            bounds = [direction.delta_bounds(epsilon) for direction in directions]
            best_lower = max(best_lower, max(b[0] for b in bounds))
            best_upper = min(best_upper, max(b[1] for b in bounds))
            if best_upper - best_lower <= _TIGHT_ENOUGH * best_upper:
                break
        return DeltaBound(min(best_lower, best_upper), best_upper, "mgf_inversion")

    return delta_of


def _intersect(primary, fallback):
    """Both are rigorous brackets of the same δ: keep the larger lower, the smaller upper.

    The fallback (an FFT path) is evaluated only when the MGF inversion is not tight.
    """

    def delta_of(epsilon: float) -> DeltaBound:
        first = primary(epsilon)
        gap = first.upper - first.lower
        if first.upper > 0 and gap <= _TIGHT * first.upper:
            return first
        if first.upper <= 5e-324:  # below the float range: no other path can improve it
            return first
        # the exact lattice FFT when it exists; the approximate FFT paths only if loose
        second = fallback(epsilon, exact_only=gap <= _TIGHT_ENOUGH * first.upper)
        if second is None:
            return first
        best = first if first.upper <= second.upper else second
        lower = max(first.lower, second.lower)
        return DeltaBound(min(lower, best.upper), best.upper, best.method)

    return delta_of, "mgf_inversion"


def _fraction_string(value: Fraction) -> str:
    return f"{value.numerator}/{value.denominator}"


def _mechanism_to_dict(mechanism) -> dict:
    registered = mechanism_to_dict(mechanism)
    if registered is not None:
        return registered
    if hasattr(mechanism, "privacy_loss_pmfs"):
        p, q = mechanism.privacy_loss_pmfs()
        return {"type": "pmf_pair", "p": [float(x) for x in p], "q": [float(x) for x in q]}
    pure = _pure_epsilon_of(mechanism)
    exact = pure if isinstance(pure, Fraction) else Fraction(pure)
    return {"type": "pure_dp", "epsilon": _fraction_string(exact)}


@dataclass(frozen=True)
class PmfPair:
    """A mechanism given only by its dominating pair of pmfs (as restored from a ledger)."""

    p: tuple[float, ...]
    q: tuple[float, ...]

    def privacy_loss_pmfs(self):
        return np.asarray(self.p), np.asarray(self.q)


@dataclass(frozen=True)
class PureDP:
    """A pure ε-DP mechanism (dominating pair: randomized response)."""

    pure_epsilon: Fraction


def _mechanism_from_dict(data: dict):
    kind = data["type"]
    if kind == "pmf_pair":
        return PmfPair(tuple(data["p"]), tuple(data["q"]))
    if kind == "pure_dp":
        return PureDP(exact_rational(data["epsilon"], "epsilon"))
    return mechanism_from_dict(data)
