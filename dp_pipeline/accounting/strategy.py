"""THE ordered choice of method for a composition's δ(ε) (`PrivacyAccountant`).

`ROWS` is the table, tried in order; each row is one `Method` (or a family of them) with
``supports(events)``, the reason it is skipped (None when it applies), and
``build(strategy)``, its rigorous δ(ε) path (None when it turns out not to fit: every
FFT grid is capped in memory). The first row that supports the events and builds gives
the composition; `Strategy.explain` says why each earlier row was skipped.

1. `Method.NEGLIGIBLE_GAUSSIANS`: discrete Gaussians whose total ρ moves ε by at most
   1e-6 beside other mechanisms, bounded by basic composition around the rest (one
   coordinate beside a finite support composed exactly, `gaussian_beside_support`);
2. `Method.THEOREM7` / `Method.DISCRETE_LAPLACE_EXACT`: one coordinate (Δ <= 64);
3. `Method.LATTICE_CONDITIONING`: a discrete Gaussian coordinate whose loss lattice
   step exceeds the loss range of the rest, intersected with rows 4-6 where loose;
4. `Method.MGF_INVERSION` (a discrete Gaussian with σ² >= 36.5), intersected, where its
   bracket is loose, first with the Laplace conditionings and a coarse Gaussian
   coordinate's conditioning, then the exact FFT paths (support_exact, the Gaussian
   split, the lattice FFT; the coarsened lattice and the grid PLD past `TIGHT_ENOUGH`),
   and below δ = 1e-12 with the tilted lattice (`brackets.intersect_brackets`);
5. the FFT paths alone (`paths.fft_composition`: support_exact | gaussian split |
   lattice FFT | coarsened lattice | grid PLD), refined below 1e-12 by the tilted lattice;
6. no path fits: the zCDP conversion (or the trivial δ <= 1) with lower bound 0;

then, whenever ρ is finite, the upper end is capped by the zCDP conversion (CKS Cor. 13)
and by basic composition of the pure-DP events with the zCDP of the rest (both always
valid), and with selections the lower end comes from the ε-bounded-range mechanisms
themselves (`selection_lower`). Every path is a rigorous bracket, so is every
intersection (`DeltaBound.intersect`) and every cap: the reported upper end is a
guarantee whichever row answers.

Key selections are split before any row sees them (`atoms.split_atoms`): their count
noise is one more event, their infinite-loss atoms compose with the rows' bound at the
end (`Method.KEY_SELECTION`, named by `explain`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

from dp_pipeline.accounting._checks import check_epsilon
from dp_pipeline.accounting.atoms import atom_path, split_atoms
from dp_pipeline.accounting.bounds import DeltaBound, DeltaPath, Method, ignoring_decide
from dp_pipeline.accounting.brackets import fft_refined, intersect_brackets, inversion_delta
from dp_pipeline.accounting.conditioning import (
    FAR_BELOW,
    LatticeConditioning,
    RestSummary,
    conditioned_composition,
    conditioning_coordinate,
)
from dp_pipeline.accounting.event_totals import pure_dp_split, total_rho
from dp_pipeline.accounting.events import PrivacyEvent
from dp_pipeline.accounting.families import Family, family_of
from dp_pipeline.accounting.gaussian_beside_support import (
    EXACT_NEGLIGIBLE,
    exact_negligible,
    gaussians_of,
    negligible_gaussians,
)
from dp_pipeline.accounting.inversion import SMOOTH_SIGMA2
from dp_pipeline.accounting.laplace_conditioning import laplace_bracket, laplace_conditionings
from dp_pipeline.accounting.outward import round_up
from dp_pipeline.accounting.paths import (
    fft_composition,
    inversion_of,
    no_path_bound,
    single_coordinate,
    tilted_refinement,
)
from dp_pipeline.accounting.selection_lower import (
    selection_twin,
    single_selection_lower,
    twin_lower,
    with_selection_lower,
)
from dp_pipeline.accounting.zcdp import zcdp_to_delta
from dp_pipeline.errors import InternalError

__all__ = ["ROWS", "Built", "Strategy", "rest_summary"]

_NEGLIGIBLE_SHIFT = 1e-6  # largest ε given to discrete Gaussians of negligible total ρ
# lattice points between the conditioning's two closed forms beside a loose MGF inversion
# (`conditioning`: one rest evaluation each)
_MIDDLE_POINTS = 4


class Built(NamedTuple):
    """A row's path: ``delta_of`` (a `DeltaPath`), the composition's ``name``, and whether
    the path ``decides``: answers a call with ``decide`` by a bracket that may be looser
    (`bounds.DeltaPath`); an ε search then asks it with ``decide`` (`epsilon_search`).
    A path that does not ignores ``decide`` and answers with its full bracket."""

    delta_of: DeltaPath
    name: str
    decides: bool = False


class Strategy:
    """The method choice for one list of events (module docstring), with what it built.

    ``refine``: a loose MGF inversion is refined by a coarse Gaussian conditioning and
    the tilted lattice (off for the rest of a conditioning, whose cost it would multiply).
    """

    def __init__(self, events: Sequence[PrivacyEvent], refine: bool = True) -> None:
        # key selections: their count noise joins the finite events, their atoms q_total
        self.events, self.atom = split_atoms(events)
        self.refine = refine
        self._cache: dict = {}
        self._skipped: list[tuple[Method, str]] = []  # rows before the one that answers
        self._row: Method | None = None  # the row that answers

    # ----------------------------------------------------------------- values
    def rho(self) -> float | None:
        """ρ of the finite events (a key selection's count noise included, its atom not:
        the caps apply to that part) as a float, None when not finite (computed once)."""
        if "rho" not in self._cache:  # an exact sum over every coordinate: once per plan
            try:
                self._cache["rho"] = float(total_rho(self.events))
            except ValueError:
                self._cache["rho"] = None
        return self._cache["rho"]

    def delta(self, epsilon: float) -> DeltaBound:
        """The composition's δ(ε) bracket (as `PrivacyAccountant.delta`)."""
        return self.composition().delta_of(check_epsilon(epsilon))

    @property
    def method(self) -> str:
        return self.composition().name

    # ----------------------------------------------------------------- the table
    def composition(self) -> Built:
        """The first row that applies, capped and with the selections' lower end (module
        docstring); the negligible Gaussians' row as it is (its rest is capped)."""
        if "composition" not in self._cache:
            built = self._first_row()
            if self._row is not Method.NEGLIGIBLE_GAUSSIANS:
                built = self._capped(built)
            if self.atom:
                name = f"{built.name} + {Method.KEY_SELECTION}"
                built = Built(atom_path(built.delta_of, self.atom), name)
            self._cache["composition"] = built
        return self._cache["composition"]

    def _first_row(self) -> Built:
        for row in ROWS:
            reason = row.supports(self.events)
            if reason is None:
                built = row.build(self)
                if built is not None:
                    self._row = row.method
                    if row in _DIRECT:  # the direct paths a conditioning would fall back to
                        self._cache["paths"] = built
                    return built
                reason = row.unbuilt
            self._skipped.append((row.method, reason))
        raise InternalError("the accountant's last method applies to every composition")

    def answered_by(self) -> Method:
        """The `Method` of the row that answers (building the composition)."""
        self.composition()
        if self._row is None:
            raise InternalError("a composition was built without a row")
        return self._row

    def explain(self) -> list[tuple[str, str]]:
        """(method, why it was skipped) of every row before the one that answers, then
        (its name, "used")."""
        name = self.composition().name
        skipped = [(str(method), reason) for method, reason in self._skipped]
        if self.atom:
            atom = (
                str(Method.KEY_SELECTION),
                f"key selections' infinite-loss atoms q_total = {float(self.atom):.6g} "
                f"composed as 1 - (1 - q_total)(1 - δ) with the finite part's δ",
            )
            return [*skipped, atom, (name, "used")]
        return [*skipped, (name, "used")]

    def paths(self) -> Built:
        """The direct paths (rows 2, 4-6), uncapped: (δ path, name); built once (by
        `composition` already, unless a conditioning or the negligible Gaussians answer)."""
        if "paths" not in self._cache:
            for row in _DIRECT:
                if row.supports(self.events) is None:
                    built = row.build(self)
                    if built is not None:
                        self._cache["paths"] = built
                        break
        return self._cache["paths"]

    def methods(self) -> tuple[str, ...]:
        """Every method this composition may use, in the order tried."""
        self.composition()
        cache = self._cache
        if "methods" not in cache:
            self.paths()  # after a conditioning, the paths a loose bracket falls back to
        if "methods" not in cache:
            middle = cache["middle"]()
            fallback = cache["fallback"]()
            cache["methods"] = (
                (Method.MGF_INVERSION.value,)
                + ((middle,) if middle else ())
                + ((fallback,) if fallback else ())
            )
        if "conditioned" in cache:
            cache["methods"] = (cache.pop("conditioned"), *cache["methods"])
        tilted = cache.get("tilted")
        name = tilted() if tilted is not None else None
        if name is not None and name not in cache["methods"]:
            return (*cache["methods"], name)
        return cache["methods"]

    # ----------------------------------------------------------------- caps
    def _capped(self, built: Built) -> Built:
        delta_of, name = built.delta_of, built.name
        twin = selection_twin(self.events)
        if twin is not None:
            # the selections' lattice pair lies above the worst case, its lower end too: the
            # lower end comes from ε-BR mechanisms themselves (`selection_lower`)
            twins: list = []  # the twin's lower end, built on first use

            def twin_of():
                if not twins:
                    twins.append(twin_lower(twin))
                return twins[0]

            alone = single_selection_lower(self.events)
            built = Built(with_selection_lower(delta_of, twin_of, alone), name, True)
            delta_of = built.delta_of
        rho = self.rho()
        if rho is None:
            return built
        split = pure_dp_split(self.events)
        pure_total = None if split is None or split[0] == 0 else float(split[0])
        rest_rho = 0.0 if split is None else float(split[1])
        inner = delta_of

        def capped(eps: float, decide: float | None = None) -> DeltaBound:
            # ``decide``: a δ the caller only compares with (`epsilon_search`)
            bound = inner(eps, decide=decide)
            zcdp = zcdp_to_delta(rho, eps)
            if zcdp < bound.upper:
                bound = DeltaBound(
                    min(bound.lower, zcdp), zcdp, f"{Method.ZCDP} (tighter than {name})", True
                )
            if pure_total is not None and eps > pure_total * (1 + 1e-12):
                # basic composition of the pure part and the zCDP of the rest (ε rounded
                # down by the factor, so the pure part's ε is not below its exact value)
                rest = zcdp_to_delta(rest_rho, eps - pure_total * (1 + 1e-12))
                if rest < bound.upper:
                    label = f"{Method.PURE_DP_ZCDP} (tighter than {name})"
                    bound = DeltaBound(min(bound.lower, rest), rest, label, True)
            return bound

        return Built(capped, name, True)


# --------------------------------------------------------------------- the rows
class _NegligibleGaussians:
    """Discrete Gaussians of total ρ so small they move ε by at most t <= `_NEGLIGIBLE_SHIFT`
    (zCDP δ at t below the float range; the inversion would have no decay): by basic
    composition δ_rest(ε) <= δ(ε) <= δ_rest(ε - t) + δ_zCDP(ρ_G, t), below t
    δ_rest(0) + δ_zCDP(ρ_G, ε); one such coordinate beside a finite support composed exactly
    (`gaussian_beside_support`), intersected. Beside other Gaussians only exactly."""

    method = Method.NEGLIGIBLE_GAUSSIANS
    unbuilt = "the other discrete Gaussians leave no exact composition"

    def _shift(self, events) -> tuple[float, float, str | None]:
        gaussians = gaussians_of(events)
        chosen, rho, shift = negligible_gaussians(events, _NEGLIGIBLE_SHIFT)
        if gaussians and len(gaussians) == len(events) and len(chosen) in (0, len(events)):
            return 0.0, 0.0, "nothing but discrete Gaussians"
        if not chosen:
            more = f"the discrete Gaussians move ε by more than {_NEGLIGIBLE_SHIFT:g}"
            return 0.0, 0.0, more if gaussians else "no discrete Gaussian"
        return shift, rho, None

    def supports(self, events) -> str | None:
        return self._shift(events)[2]

    def build(self, strategy: Strategy) -> Built | None:
        shift, rho = self._shift(strategy.events)[:2]
        negligible = negligible_gaussians(strategy.events, _NEGLIGIBLE_SHIFT)[0]
        rest = Strategy([e for e in strategy.events if not any(e is n for n in negligible)])
        exact = exact_negligible(negligible, rest.events, shift)
        if exact is None and len(negligible) < len(gaussians_of(rest.events) + negligible):
            return None
        name = EXACT_NEGLIGIBLE if exact else f"{rest.method} + negligible discrete gaussians"
        strategy._cache["methods"] = (name,)

        def delta_of(eps: float) -> DeltaBound:
            lower = rest.delta(eps).lower
            if eps <= shift:
                upper = min(1.0, round_up(rest.delta(0.0).upper + zcdp_to_delta(rho, eps)))
                bound = DeltaBound.clipped(lower, upper, f"{rest.method} + basic composition")
            else:
                # ε - t rounded down (a smaller ε only raises the rest's δ), plus δ_G(t) <= 5e-324
                inner = rest.delta(max(0.0, (eps - shift) * (1 - 2.0**-52)))
                upper = min(1.0, math.nextafter(inner.upper, 2.0))  # + >= 5e-324 >= δ_G(t)
                label = f"{inner.method} + negligible gaussians"
                bound = DeltaBound.clipped(lower, upper, label, inner.capped)
            return bound if exact is None else bound.intersect(exact(eps))

        return Built(ignoring_decide(delta_of), name)


class _SingleCoordinate:
    """One coordinate of a discrete Gaussian or Laplace, Δ <= 64: CKS Theorem 7 maximised
    over the shifts 1..Δ (or the Laplace's exact δ)."""

    method = Method.THEOREM7
    unbuilt = ""  # `supports` decides: it always builds

    def supports(self, events) -> str | None:
        if single_coordinate(events) is None:
            return "not one discrete Gaussian or Laplace coordinate with Δ <= 64"
        return None

    def build(self, strategy: Strategy) -> Built | None:
        delta_of, name = single_coordinate(strategy.events)
        strategy._cache["methods"] = (name,)
        return Built(ignoring_decide(delta_of), name)


class _Conditioning:
    """A discrete Gaussian coordinate whose loss lattice step exceeds the loss range of
    everything else (`conditioning`), intersected with the direct paths where loose."""

    method = Method.LATTICE_CONDITIONING
    unbuilt = "no discrete Gaussian coordinate's loss step exceeds the rest's loss range"

    def supports(self, events) -> str | None:
        return None  # whether a coordinate qualifies needs the rest's summary: `build`

    def build(self, strategy: Strategy) -> Built | None:
        conditioned = conditioned_composition(strategy.events, rest_summary, strategy.paths)
        if conditioned is None:
            return None
        delta_of, name = conditioned
        strategy._cache["conditioned"] = name
        return Built(ignoring_decide(delta_of), name)


class _Inversion:
    """The MGF inversion, intersected where loose with the cheaper conditionings, the
    FFT paths and (below δ = 1e-12) the tilted lattice (`brackets.intersect_brackets`)."""

    method = Method.MGF_INVERSION
    unbuilt = "no split of the events whose finite supports stay small enough to sum"

    def supports(self, events) -> str | None:
        smooth = any(
            family_of(e.mechanism) is Family.DISCRETE_GAUSSIAN
            and e.mechanism.sigma2 >= SMOOTH_SIGMA2
            for e in events
        )
        return None if smooth else "no discrete Gaussian with σ² >= 36.5 (none is smooth)"

    def build(self, strategy: Strategy) -> Built | None:
        events = strategy.events
        inversion = inversion_of(events)
        if not inversion:
            return None
        tilted, slope, tilted_name = tilted_refinement(events)
        strategy._cache["tilted"] = tilted_name
        summarize = rest_summary
        refine = strategy.refine
        built: list = []  # the FFT paths are built only if the MGF inversion is loose
        tried: set = set()  # which of the two builds were attempted (each once)

        def fallback(eps, exact_only=False):
            if not built:
                built.append(fft_composition(events, exact_only=True))
                tried.add("exact")
            if built[0] is None and not exact_only and "any" not in tried:
                built[0] = fft_composition(events, skip_exact=True)
                tried.add("any")
            return None if built[0] is None else built[0][0](eps)

        def fallback_name():
            fallback(1.0)
            return None if built[0] is None else built[0][1]

        laplace: list = []  # the Laplace conditionings' bracket (or None), found on first use

        def laplace_bracket_of():
            if not laplace:
                found = laplace_conditionings(events, summarize)
                laplace.append(laplace_bracket(found) if found else None)
            return laplace[0]

        conditionings: list = []  # a coarse Gaussian coordinate's conditioning, or None

        def conditioning_of():
            if not conditionings:
                chosen = conditioning_coordinate(events, summarize, _MIDDLE_POINTS)
                if chosen is not None and float(chosen[1] / chosen[0]) > (
                    FAR_BELOW + chosen[2].far_above()
                ):
                    chosen = None  # one point between: the accountant conditions on it already
                elif chosen is not None and chosen[2].conditions():
                    chosen = None  # a rest that conditions in turn: each of its points costs one
                conditionings.append(None if chosen is None else LatticeConditioning(*chosen))
            return conditionings[0]

        def conditioned(eps):
            conditioning = conditioning_of() if refine else None
            if conditioning is None:
                return DeltaBound(0.0, 1.0, Method.MGF_INVERSION.value)
            return conditioning.delta_bound(eps)

        def middle(eps):
            bracket = laplace_bracket_of()
            if bracket is None:
                return DeltaBound(0.0, 1.0, Method.MGF_INVERSION.value)
            return bracket(eps)

        def middle_name():
            if refine and conditioning_of() is not None:
                return conditioning_of().method
            return None if laplace_bracket_of() is None else Method.LAPLACE_CONDITIONING.value

        delta_of = intersect_brackets(
            inversion_delta(inversion),
            fallback,
            middle,
            conditioned,
            tilted if refine else None,
            slope,
        )
        strategy._cache["fallback"] = fallback_name
        strategy._cache["middle"] = middle_name
        return Built(delta_of, Method.MGF_INVERSION.value, True)


class _Fft:
    """The FFT paths alone (`paths.fft_composition`), refined below δ = 1e-12 by the
    tilted lattice."""

    method = Method.LATTICE_FFT
    unbuilt = "no FFT grid (exact, coarsened or grid PLD) fits in memory"

    def supports(self, events) -> str | None:
        return None  # whether a grid fits is known once built

    def build(self, strategy: Strategy) -> Built | None:
        fft = fft_composition(strategy.events)
        if fft is None:
            return None
        delta_of, name = fft
        tilted, slope, tilted_name = tilted_refinement(strategy.events)
        strategy._cache["tilted"] = tilted_name
        strategy._cache["methods"] = (name,)
        if strategy.refine:
            return Built(fft_refined(delta_of, tilted, slope), name, True)
        return Built(ignoring_decide(delta_of), name)


class _NoPath:
    """No path fits in memory: the zCDP conversion (or δ <= 1) with lower bound 0."""

    method = Method.ZCDP
    unbuilt = ""  # always builds

    def supports(self, events) -> str | None:
        return None

    def build(self, strategy: Strategy) -> Built | None:
        delta_of, name = no_path_bound(strategy.rho())
        strategy._cache["methods"] = (name,)
        return Built(ignoring_decide(delta_of), name)


_DIRECT = (_SingleCoordinate(), _Inversion(), _Fft(), _NoPath())
ROWS = (_NegligibleGaussians(), _DIRECT[0], _Conditioning(), *_DIRECT[1:])


def rest_summary(events: Sequence[PrivacyEvent]) -> RestSummary | None:
    """The other events of a conditioning (`conditioning`), or None without a finite ρ."""
    rest = Strategy(events, refine=False)  # evaluated once per lattice point: no refinement
    if not rest.events:
        return None
    rho = rest.rho()
    if rho is None:
        return None
    split = pure_dp_split(rest.events)
    pure = None if split is None else (float(split[0]), math.nextafter(float(split[1]), math.inf))
    # ρ rounded up: the caps of the rest are then upper bounds for the exact ρ too
    return RestSummary(
        rest.delta,
        math.nextafter(rho, math.inf),
        pure,
        lambda: rest.method,
        lambda: rest.answered_by() is Method.LATTICE_CONDITIONING,
    )
