"""PrivacyAccountant: the driver-side ledger of one release's mechanisms and its (ε, δ).

It records events (mechanism, per-coordinate sensitivity vector, count) and answers δ(ε),
ε(δ) and ρ with the tightest method that applies, chosen by the one ordered table of
`strategy` (`explain()` says why each method before the one used was skipped):

1. one discrete Gaussian (or Laplace) coordinate with Δ <= 64: the exact 1-D formula
   (CKS Theorem 7, maximised over the shifts 1..Δ), as a rigorous bracket (direct sums with
   a written error budget, or for σ ≳ 30,000 the MGF inversion below: cost independent of σ);
2. whenever a discrete Gaussian with σ² >= 36.5 is present: the exact δ(ε) of the whole
   composition by inverting its moment generating function (`inversion`, "mgf_inversion"):
   no discretisation, every error term a rigorous bound, relative precision independent
   of δ (down to the float range);
3. if that bracket is wider than 1e-4 relative: also the exact composition of finite
   supports on their rational lattice (`support_composition`, "support_exact": discrete
   Laplaces, pure-DP events and discrete Gaussians with σ² up to ~2700, direct
   convolution with relative error bounds, so tight at any δ) when it stays small, else
   that composition of everything but the copies of the widest discrete Gaussian
   with their convolved loss summed exactly by its tails
   (`gaussian_split`, "support_exact + gaussian_tails"),
   else the exact lattice FFT of CKS §4 when
   everything sits on a common rational lattice of practical size, and if the bracket is
   wider than 1e-3, the approximate FFT paths (the coarsened lattice of `coarse_lattice`,
   else the grid privacy-loss distribution); the brackets are intersected (each is
   rigorous) and the bound names the method that gave its upper end;
4. without a smooth discrete Gaussian (pure-DP and Laplace compositions): steps 3's paths;

before these, a discrete Gaussian coordinate whose loss lattice step μ/σ² exceeds the loss
range of everything else (`conditioning`, "lattice_conditioning + <method of the rest>"):
δ is the sum over its lattice of P[Y=y]·δ_rest(ε - ℓ_y), Theorem 7 tail sums where the
rest is decided, one evaluation of the rest's bracket where it is not; a bracket wider
than 1e-4 relative is intersected with the paths above; where such a step is shorter but
leaves at most five lattice points between the closed forms, a loose MGF inversion below
δ = 1e-12 (where its comb bound over that lattice is wide) is intersected with the same
conditioning, one evaluation of the rest per point;

below δ = 1e-12, a bracket of steps 2-4 still wider than 1% (in a search for ε(δ): wide
enough to move ε by over 0.1%) is intersected with the lattice FFT of the exponentially
tilted losses (`tilted_lattice`, "tilted_lattice_fft"): δ(ε) = M(c)e^{-cε}·E_c[w(L - ε)]
with the weight w <= 1, so the FFT's absolute errors become errors relative to δ, at
any δ in the float range (losses off the grid rounded up and down as in `coarse_lattice`);

and, whenever every event has a finite ρ, the upper bound is also capped by the zCDP
conversion (CKS Corollary 13) and by basic composition of the pure-DP events with the zCDP
conversion of the others ("pure_dp + zcdp"), both always valid.

Selections (the exponential mechanism, ε-bounded-range) enter every path by their exact
bounded-range privacy curve, as a dominating pair on a lattice of exact rational losses
(`bounded_range`: Dong, Durfee & Rogers 2020; Zhu, Dong & Wang 2022), not by their pure ε;
the runs of each ε enter together, in blocks of up to 128 runs, by the pair of DDR's
optimal adaptive composition (`bounded_range_adaptive`); the zCDP cap counts them at
ρ = ε²/8.

Key selections (`KeySelection`: count noise plus a mass q at infinite loss, a key held
only by the neighbour released) are split by the strategy (`atoms`): their count noise
is composed with everything else by the paths above, their atoms compose to
q = 1 - ∏(1 - q_i) (rounded up) and δ(ε) = 1 - (1 - q)(1 - δ_finite(ε)); ε(δ) is then
searched on that bound (no ε reaches δ <= q: `DPValueError`), ρ and the pure ε are
infinite (`rho()` and `pure_epsilon()` raise `DPValueError`, `report()` gives ρ None).

Edges: finite supports over 4096 points are rounded up and down onto kept losses of their
own support (`rounded_support`, a rigorous bracket); discrete Gaussians whose total ρ moves
ε by at most 1e-6 beside other mechanisms are bounded by basic composition ("+ negligible
gaussians": δ_rest(ε) <= δ <= δ_rest(ε - t) + 5e-324), one such coordinate beside a finite
support exactly (`gaussian_beside_support`); every FFT grid is capped in memory
and a path that does not fit is skipped, and if none fits the bound is the zCDP conversion
with lower bound 0, labelled "zcdp" (or "trivial" without a finite ρ).

Each answer names its method and carries a lower bound (the gap says how tight the upper
bound is), rounded outward by whole ulps wherever a float is formed (`outward`: among
subnormal δ too). With selections, the lower end comes from ε-bounded-range mechanisms
themselves, not from their dominating pair (`selection_lower`).

Sensitivity vectors are taken as the worst-case neighbour difference (the engines compute
it from the contribution bounds); a scalar sensitivity Δ of a single one-coordinate event is
maximised over the shifts 1..Δ.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from fractions import Fraction

from dp_pipeline.accounting._checks import Real, check_delta, check_epsilon
from dp_pipeline.accounting.atoms import finite_target
from dp_pipeline.accounting.bounds import DeltaBound, EpsilonBound, Method
from dp_pipeline.accounting.epsilon_search import epsilon_from_delta_function
from dp_pipeline.accounting.event_totals import pure_dp_split, total_pure_epsilon, total_rho
from dp_pipeline.accounting.events import (
    AccountedMechanism,
    PrivacyEvent,
    event_mechanism_from_dict,
    event_mechanism_to_dict,
    sensitivity_tuple,
)
from dp_pipeline.accounting.families import family_of
from dp_pipeline.accounting.strategy import Built, Strategy
from dp_pipeline.accounting.zcdp import zcdp_to_epsilon
from dp_pipeline.errors import DPTypeError, DPValueError
from dp_pipeline.mechanisms import DiscreteGaussian, DiscreteLaplace

__all__ = ["PrivacyAccountant", "PrivacyEvent"]


class PrivacyAccountant:
    """Composes the mechanisms of a release; see the module docstring for the methods.

    Guarantee: `delta` and `epsilon` answer with two-sided bounds (`DeltaBound`,
    `EpsilonBound`): ``upper`` is the guarantee on every path, ``lower`` a value the
    true curve cannot be below, ``method`` how it was computed.

    Example:

        >>> from dp_pipeline import DiscreteGaussian, DiscreteLaplace, PrivacyAccountant
        >>> accountant = PrivacyAccountant().add(DiscreteGaussian(8), sensitivity=1, count=10)
        >>> accountant.rho()  # 10 runs of Δ²/(2σ²) = 1/16 (CKS Theorem 4)
        Fraction(5, 8)
        >>> bound = accountant.delta(1.0)
        >>> bound.lower <= bound.upper < 0.2
        True
        >>> accountant.add(DiscreteLaplace(2)).epsilon(1e-6).method
        'support_exact'
        >>> PrivacyAccountant().add(DiscreteLaplace(2)).add(DiscreteLaplace(2)).pure_epsilon()
        Fraction(1, 1)
    """

    def __init__(self) -> None:
        self._events: list[PrivacyEvent] = []
        self._cache: dict = {}  # the `Strategy` of the events and what it built

    # ----------------------------------------------------------------- recording
    def add(
        self,
        mechanism: AccountedMechanism,
        sensitivity: int | Sequence[int] = 1,
        count: int = 1,
    ) -> PrivacyAccountant:
        """Record ``count`` independent runs of ``mechanism`` (returns self for chaining).

        ``sensitivity``: an integer Δ, or the per-coordinate integer shifts μ of the worst
        neighbour (e.g. L0 cells each shifted by L∞). Mechanisms described by
        ``privacy_loss_pmfs()`` or ``pure_epsilon`` take no sensitivity (must be 1).
        """
        if isinstance(count, bool) or not isinstance(count, numbers.Integral) or count < 1:
            raise DPValueError(f"count must be an integer >= 1, got {count!r}")
        shifts = sensitivity_tuple(sensitivity)
        if not isinstance(mechanism, (DiscreteGaussian, DiscreteLaplace)):
            if family_of(mechanism) is None:
                raise DPTypeError(
                    f"mechanism must be a DiscreteGaussian, a DiscreteLaplace, a "
                    f"KeySelection, or have privacy_loss_pmfs() or pure_epsilon; got "
                    f"{type(mechanism).__name__}"
                )
            if shifts != (1,):
                raise DPValueError(
                    f"sensitivity must be 1 for {type(mechanism).__name__}: its "
                    f"privacy_loss_pmfs()/pure_epsilon (a KeySelection: its own "
                    f"sensitivity) already describe one run, "
                    f"got {sensitivity!r}"
                )
        self._events.append(PrivacyEvent(mechanism, shifts, int(count)))
        self._cache.clear()
        return self

    def add_event(self, event: PrivacyEvent) -> PrivacyAccountant:
        """Record ``event``, the one cost record of queries, plans and ledgers (as `add`)."""
        if not isinstance(event, PrivacyEvent):
            raise DPTypeError(f"add_event takes a PrivacyEvent, got {type(event).__name__}")
        return self.add(event.mechanism, sensitivity=event.sensitivity, count=event.count)

    @property
    def events(self) -> tuple[PrivacyEvent, ...]:
        return tuple(self._events)

    # ----------------------------------------------------------------- zCDP / pure
    def rho(self) -> Fraction:
        """Exact zCDP ρ of the composition (sum over events and coordinates).

        A key selection with q > 0 has no finite ρ (an infinite-loss atom): `DPValueError`.
        """
        self._require_events()
        return total_rho(self._events)

    def _rho_or_none(self) -> float | None:
        strategy = self._strategy()
        return None if strategy.atom else strategy.rho()

    def pure_epsilon(self) -> Fraction:
        """Exact total pure ε (basic composition); errors if any event is not pure DP (a
        key selection's pure ε is infinite)."""
        self._require_events()
        return total_pure_epsilon(self._events)

    # ----------------------------------------------------------------- (ε, δ)
    def delta(self, epsilon: Real, method: str | None = None) -> DeltaBound:
        """Bound on δ(ε) of the whole composition (``.upper`` is the guarantee).

        ``method="pure_dp"`` asks for plain pure-DP addition (δ = 0 once ε >= Σ ε_i).
        """
        epsilon = check_epsilon(epsilon)
        self._require_events()
        if method == Method.PURE_DP:
            total = float(self.pure_epsilon())
            if epsilon >= total:
                return DeltaBound(0.0, 0.0, Method.PURE_DP.value)
        elif method is not None:
            raise DPValueError(f"method must be None or 'pure_dp', got {method!r}")
        return self._composition().delta_of(epsilon)

    def epsilon(self, delta: Real) -> EpsilonBound:
        """Bound on the smallest ε with δ(ε) <= δ (``.upper`` is the guarantee)."""
        delta = check_delta(delta)
        self._require_events()
        delta_of, name, decides = self._composition()
        strategy = self._strategy()
        # with key selections the finite part must reach δ' = (δ - q)/(1 - q) (`atoms`);
        # the closed forms of that part at δ' (rounded down) give the starting ε
        target = delta
        if strategy.atom:
            exact = finite_target(delta, strategy.atom)
            if exact <= 0:
                raise DPValueError(
                    f"delta={delta!r} is at most the key selections' release probability "
                    f"q = {float(strategy.atom):.6g}: no ε reaches it (ε = ∞); ask for a "
                    f"delta above q or plan the selection with a smaller delta"
                )
            target = float(exact)
            if target > exact:
                target = math.nextafter(target, 0.0)
        rho = strategy.rho()
        high = zcdp_to_epsilon(rho, target) if rho is not None and target > 0 else 1.0
        split = pure_dp_split(strategy.events)
        if split is not None and target > 0:
            high = min(high, float(split[0]) + zcdp_to_epsilon(float(split[1]), target))
        # the start is the closed-form cap's ε: where the cap gives the bound there, the
        # answer is usually the start itself (`epsilon_search`)
        # the loss's standard deviation sqrt(2ρ) sets how far below the start to look first
        return epsilon_from_delta_function(
            delta_of,
            delta,
            high,
            name,
            probe=lambda bound: bound.capped,
            spread=None if rho is None else math.sqrt(2 * rho),
            decide=decides,
        )

    @property
    def method(self) -> str:
        """The method the accountant uses for this composition (the first of `methods`)."""
        self._require_events()
        return self._composition().name

    @property
    def methods(self) -> tuple[str, ...]:
        """Every method the accountant may use for this composition, in the order tried;
        each query's bound names the one that gave its upper bound."""
        self._require_events()
        self._composition()
        return self._strategy().methods()

    def explain(self) -> list[tuple[str, str]]:
        """Why each method tried before the one that answers was skipped: (method,
        reason) in the order tried, then (the composition's method, "used")."""
        self._require_events()
        return self._strategy().explain()

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
            epsilon_bound = self.epsilon(delta)
            result["epsilon"] = {
                "delta": delta,
                "upper": epsilon_bound.upper,
                "lower": epsilon_bound.lower,
                "gap": epsilon_bound.gap,
                "method": epsilon_bound.method,
            }
        return result

    # ----------------------------------------------------------------- internals
    def _require_events(self) -> None:
        if not self._events:
            raise DPValueError("the accountant is empty: add() at least one mechanism first")

    def _strategy(self) -> Strategy:
        if "strategy" not in self._cache:
            self._cache["strategy"] = Strategy(self._events)
        return self._cache["strategy"]

    def _composition(self) -> Built:
        if "composition" not in self._cache:
            self._cache["composition"] = self._strategy().composition()
        return self._cache["composition"]

    def to_dict(self) -> dict:
        """JSON-safe description of the events (Fractions as "p/q" strings)."""
        return {
            "version": 1,
            "events": [
                {
                    "mechanism": event_mechanism_to_dict(event.mechanism),
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
            raise DPValueError(
                "data must be a dict from PrivacyAccountant.to_dict() with version 1 and events"
            )
        accountant = cls()
        for index, event in enumerate(data["events"]):
            try:
                mechanism = event_mechanism_from_dict(event["mechanism"])
                accountant.add(mechanism, event["sensitivity"], event["count"])
            except (KeyError, TypeError) as error:
                raise DPValueError(f"events[{index}] is malformed: {error}") from error
        return accountant
