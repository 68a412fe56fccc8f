"""What a DP selection computes, key-free: `QuantileSelection` (quantile, median), `TopKSelection`.

Built and checked whole before any data is read (bad input raises naming the
argument, the value and the rule); no master key, labels or partitions: those are
the run context (`dp_pipeline.query.context.RunContext`), joined to a selection by
`dp_pipeline.selection.query`.

- quantile / median: candidates are the public grid ``lo, lo + g, ... <= hi``,
  one selection per declared group of ``by``; `BaseTwoExponential` with Δu = the
  rows one unit keeps in a group (``max_per_cell``; 1 without a privacy unit),
  not monotone (``ε = 2·η·ln2·Δu`` per run), one run per group a unit can change.
- top-k: the bounded per-candidate counts of a `CountQuery` (``count by
  [column]`` over the candidate domain, ``max_candidates`` = ``max_cells``,
  ``max_per_candidate`` = ``max_per_cell``); its noise is the one-shot discrete
  Laplace at `one_shot_scale` (used only by ``method="one_shot"``).
  ``mechanism`` is the per-round `BaseTwoExponential` (peeling) or that Laplace.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

from dp_pipeline.accounting import PrivacyEvent, margin_of_error
from dp_pipeline.errors import DPTypeError, DPValueError
from dp_pipeline.mechanisms import BaseTwoExponential, DiscreteLaplace
from dp_pipeline.mechanisms.registry import mechanism_to_dict
from dp_pipeline.query.aggregations import CountQuery
from dp_pipeline.query.budget import selection_epsilon
from dp_pipeline.query.domain import (
    DEFAULT_CELL_LIMIT,
    CellDomain,
    Domains,
    DomainValues,
    KeyColumns,
    build_cell_domain,
    positive_int,
)
from dp_pipeline.query.quantile_grid import (
    TOP_K_METHODS,
    check_positive_int,
    check_value_bounds,
    quantile_candidates,
    quantile_positions,
)
from dp_pipeline.query.sensitivity import NEIGHBOURING
from dp_pipeline.rational import RationalLike, exact_rational, positive_rational
from dp_pipeline.selection.algorithms import (
    checked_quantile_mechanism,
    one_shot_scale,
    quantile_mechanism,
    quantile_rank_error_bound,
    top_k_mechanism,
)
from dp_pipeline.selection.info import SelectionInfo

__all__ = ["QuantileSelection", "TopKSelection", "top_k_counts"]

_ON_INVALID = ("drop", "error")


def _check_common(on_invalid, confidence) -> Fraction:
    if on_invalid not in _ON_INVALID:
        raise DPValueError(f"on_invalid must be one of {_ON_INVALID}, got {on_invalid!r}")
    confidence = exact_rational(confidence, "confidence")
    if not 0 < confidence < 1:
        raise DPValueError(f"confidence must be in (0, 1), got {confidence}")
    return confidence


def top_k_counts(
    column: str,
    candidates: DomainValues,
    *,
    by: KeyColumns | None = None,
    domains: Domains | None = None,
    privacy_unit: str | None = None,
    max_candidates: int = 1,
    max_per_candidate: int = 1,
    neighbouring: str = "add_remove",
    on_invalid: str = "drop",
    cell_limit: int = DEFAULT_CELL_LIMIT,
    confidence: RationalLike = Fraction(95, 100),
) -> CountQuery:
    """The bounded per-candidate counts a top-k selects from, before its noise is set.

    ``count by [*by, column]`` over the groups' domains and the candidates (the
    candidate the least significant key), with ``max_candidates`` as L0 and
    ``max_per_candidate`` as L∞: the release planner costs exactly this query.
    """
    groups = [] if by is None else ([by] if isinstance(by, str) else list(by))
    if by is None and domains is not None:
        raise DPValueError("domains declare the groups of by=; give by= too, or no domains")
    if column in groups:
        raise DPValueError(f"top-k column {column!r} cannot also be a group (by) column")
    if domains is not None and column in domains:
        raise DPValueError(
            f"domains has the top-k column {column!r}: its domain is candidates=; "
            f"domains declare the groups of by="
        )
    return CountQuery.build(
        by=[*groups, column],
        domains={**(domains or {}), column: candidates},
        noise=None,
        privacy_unit=privacy_unit,
        max_cells=max_candidates,
        max_per_cell=max_per_candidate,
        neighbouring=neighbouring,
        on_invalid=on_invalid,
        cell_limit=cell_limit,
        confidence=confidence,
        allow_no_noise=True,
    )


@dataclass(frozen=True)
class QuantileSelection:
    """ε-DP ``q``-quantile of ``column`` (base-2 exponential mechanism): [by...,] quantile, column.

    Candidates are the public grid ``lo, lo + granularity, ... <= hi`` of
    ``bounds``; values are clamped into ``bounds``. With ``by`` (and ``domains``),
    one quantile per declared group, every group released (an empty group gets a
    draw from the grid too). Each privacy unit keeps at most ``max_per_cell`` rows
    in each of at most ``max_cells`` groups (the keyed rule of ``df.dp.count``);
    ``privacy_unit=None`` makes every row its own unit (a per-record guarantee).
    A unit then moves a group's rank losses by at most ``max_per_cell`` (the
    mechanism's Δu) and changes at most ``max_cells`` groups (twice that under
    ``neighbouring="replace"``, never more than the groups): the groups' runs
    share ε equally. ``epsilon`` is the total target (the spent
    ``attrs["dp"].epsilon`` is never above it) or a per-group `BaseTwoExponential`.
    Null, NaN and ±inf values, null keys and units and keys outside the domains
    are dropped (counted in the diagnostics) or, with ``on_invalid="error"``,
    refused. ``attrs["dp"].margin_of_error`` is each group's rank error at
    ``confidence``.
    """

    statistic: str
    column: str
    q: Fraction
    bounds: tuple[Fraction, Fraction]
    granularity: Fraction
    candidates: tuple[Fraction, ...]
    mechanism: BaseTwoExponential  # one group's run
    on_invalid: str
    confidence: Fraction
    groups: CellDomain | None = None  # None: one quantile over every row
    privacy_unit: str | None = None
    max_cells: int = 1
    max_per_cell: int = 1
    neighbouring: str = "add_remove"

    @classmethod
    def build(
        cls,
        statistic: str,
        *,
        column: str,
        q: RationalLike,
        bounds: tuple[RationalLike, RationalLike],
        granularity: RationalLike,
        by: KeyColumns | None = None,
        domains: Domains | None = None,
        epsilon: RationalLike | BaseTwoExponential | None = None,
        rho: RationalLike | None = None,
        privacy_unit: str | None = None,
        max_cells: int = 1,
        max_per_cell: int = 1,
        neighbouring: str = "add_remove",
        on_invalid: str = "drop",
        cell_limit: int = DEFAULT_CELL_LIMIT,
        confidence: RationalLike = Fraction(95, 100),
    ) -> QuantileSelection:
        """Validate everything that does not need the data; raise before any work.

        ``epsilon`` is a target ε for all groups together (what is spent is the
        accountant's reading of `info`, never more) or a ready per-group
        `BaseTwoExponential` (Δu >= ``max_per_cell``, not monotone).
        """
        if statistic not in ("quantile", "median"):
            raise DPValueError(f"statistic must be 'quantile' or 'median', got {statistic!r}")
        if not isinstance(column, str) or not column:
            raise DPTypeError(f"column must be a column name, got {column!r}")
        q_exact = exact_rational(q, "q")
        if not 0 <= q_exact <= 1:
            raise DPValueError(f"q must be in [0, 1], got {q!r}")
        low, high = check_value_bounds(bounds)
        step = positive_rational(granularity, "granularity")
        candidates = tuple(quantile_candidates((low, high), step))
        groups = _quantile_groups(column, by, domains, privacy_unit, len(candidates), cell_limit)
        if privacy_unit is not None and not isinstance(privacy_unit, str):
            raise DPTypeError(f"privacy_unit must be a column name or None, got {privacy_unit!r}")
        if privacy_unit == column:
            raise DPValueError(f"privacy_unit {privacy_unit!r} cannot also be the quantile column")
        if neighbouring not in NEIGHBOURING:
            raise DPValueError(f"neighbouring must be one of {NEIGHBOURING}, got {neighbouring!r}")
        shape = dict(
            groups=groups,
            privacy_unit=privacy_unit,
            max_cells=positive_int(max_cells, "max_cells"),
            max_per_cell=positive_int(max_per_cell, "max_per_cell"),
            neighbouring=neighbouring,
        )
        runs = _quantile_runs(**shape)
        per_row = shape["max_per_cell"] if privacy_unit is not None else 1
        if isinstance(epsilon, BaseTwoExponential):
            mechanism = checked_quantile_mechanism(epsilon, per_row)
        else:
            total = positive_rational(
                selection_epsilon(epsilon, rho, Fraction(1, 8 * runs)), "epsilon"
            )
            mechanism = quantile_mechanism(total / runs, utility_sensitivity=per_row)
        return cls(
            statistic=statistic,
            column=column,
            q=q_exact,
            bounds=(low, high),
            granularity=step,
            candidates=candidates,
            mechanism=mechanism,
            on_invalid=on_invalid,
            confidence=_check_common(on_invalid, confidence),
            **shape,
        )

    @property
    def group_count(self) -> int:
        return 1 if self.groups is None else self.groups.total

    @property
    def runs(self) -> int:
        """Groups whose selection one unit can change: the runs its ε composes over."""
        return _quantile_runs(
            self.groups, self.privacy_unit, self.max_cells, self.max_per_cell, self.neighbouring
        )

    @property
    def effective_max_cells(self) -> int:
        """Groups one unit keeps rows in (1 per unit without a privacy unit: a row)."""
        return 1 if self.privacy_unit is None else min(self.max_cells, self.group_count)

    @property
    def effective_max_per_cell(self) -> int:
        """Rows one unit keeps in one group: the rank losses' sensitivity Δu."""
        return 1 if self.privacy_unit is None else self.max_per_cell

    def canonical(self) -> dict:
        """Every parameter that can change the selected value (not the key or the names)."""
        canonical = {
            "statistic": self.statistic,
            "column": self.column,
            "q": str(self.q),
            "bounds": [str(self.bounds[0]), str(self.bounds[1])],
            "granularity": str(self.granularity),
            "mechanism": mechanism_to_dict(self.mechanism),
        }
        if self.groups is not None:
            canonical["groups"] = [domain.canonical() for domain in self.groups.domains]
        if self.privacy_unit is not None:
            canonical["privacy_unit"] = self.privacy_unit
            canonical["max_cells"] = self.max_cells
            canonical["max_per_cell"] = self.max_per_cell
        return canonical

    def positions(self, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Grid position of each finite value and the out-of-bounds mask (`quantile_positions`)."""
        return quantile_positions(values, self.bounds, self.granularity)

    def info(self) -> SelectionInfo:
        beta = 1 - self.confidence
        return SelectionInfo(
            statistic=self.statistic,
            method="exponential",
            event=PrivacyEvent(self.mechanism, (1,), self.runs),
            candidates=len(self.candidates),
            margin_of_error=quantile_rank_error_bound(self.mechanism, len(self.candidates), beta),
            confidence=self.confidence,
            privacy_unit=self.privacy_unit,
            contribution_bounds={
                "max_cells": self.effective_max_cells,
                "max_per_cell": self.effective_max_per_cell,
            },
        )


def _quantile_groups(column, by, domains, privacy_unit, candidates, cell_limit):
    """The declared groups (None without ``by``), refused past ``cell_limit`` buckets."""
    if by is None:
        if domains is not None:
            raise DPValueError("domains declare the groups of by=; give by= too, or no domains")
        return None
    groups = build_cell_domain(by, domains if domains is not None else {}, cell_limit)
    if column in groups.columns:
        raise DPValueError(f"quantile column {column!r} cannot also be a group (by) column")
    if privacy_unit is not None and privacy_unit in groups.columns:
        raise DPValueError(f"privacy_unit {privacy_unit!r} cannot also be a key column")
    if groups.total * candidates > cell_limit:
        raise DPValueError(
            f"{groups.total} groups x {candidates} candidates is more than cell_limit = "
            f"{cell_limit} buckets; use a coarser granularity, fewer groups or a larger "
            f"cell_limit"
        )
    return groups


def _quantile_runs(groups, privacy_unit, max_cells, max_per_cell, neighbouring) -> int:
    """Groups one unit's rows can change (parallel composition over the other groups)."""
    count = 1 if groups is None else groups.total
    touched = 1 if privacy_unit is None else max_cells
    if neighbouring == "replace":
        touched *= 2  # the unit's old groups and its new ones
    return min(touched, count)


@dataclass(frozen=True)
class TopKSelection:
    """ε-DP ``k`` most frequent ``column`` values among ``candidates``: rank, column[, count].

    ``candidates`` is the public domain (list or range); rows outside it
    are dropped (or refused). With ``by`` (and ``domains``), the top k of
    every declared group (k rows per group, every group released). Each unit
    counts in at most ``max_candidates`` (group, candidate) cells, at most
    ``max_per_candidate`` times each (enforced as in ``df.dp.count``).
    ``method="peeling"``: k exponential-mechanism rounds per group at
    ε/(k·runs), runs = the groups one unit can change; ``"one_shot"``:
    discrete Laplace noisy counts at scale Δ₁/ε over every cell and each
    group's top k (the winners' noisy counts are returned in ``count``). See
    `dp_pipeline.selection.algorithms` for when to prefer which.
    """

    column: str
    k: int
    method: str
    counts: CountQuery
    mechanism: BaseTwoExponential | DiscreteLaplace
    epsilon: Fraction

    @classmethod
    def build(
        cls,
        column: str,
        k: int,
        *,
        candidates: DomainValues,
        epsilon: RationalLike | None = None,
        rho: RationalLike | None = None,
        method: str = "peeling",
        **count_bounds: Any,
    ) -> TopKSelection:
        """Validate everything that does not need the data; raise before any work.

        ``count_bounds``: the arguments of `top_k_counts` (privacy unit, contribution
        bounds, neighbouring, invalid rows, cell limit, confidence).
        """
        if not isinstance(column, str) or not column:
            raise DPTypeError(f"column must be a column name, got {column!r}")
        check_positive_int(k, "k")
        if method not in TOP_K_METHODS:
            raise DPValueError(f"method must be one of {TOP_K_METHODS}, got {method!r}")
        if epsilon is not None or rho is None:
            epsilon = positive_rational(selection_epsilon(epsilon, rho, Fraction(1)), "epsilon")
        if isinstance(candidates, list | tuple | range) and len(candidates) == 0:
            raise DPValueError(
                f"candidates for column {column!r} is empty: top-k needs at least one candidate"
            )
        counts = top_k_counts(column, candidates, **count_bounds)
        per_group = counts.cells.domains[-1].size
        if k > per_group:
            raise DPValueError(f"k = {k} is larger than the number of candidates ({per_group})")
        runs = _top_k_group_runs(counts)
        vector = counts.count_sensitivity()
        l1 = sum(vector)
        if epsilon is None:  # zCDP: peeling k·runs·(ε/(k·runs))²/8, one-shot Σm²ε²/(2·Δ₁²)
            per_epsilon2 = (
                Fraction(1, 8 * k * runs)
                if method == "peeling"
                else Fraction(sum(m * m for m in vector), 2 * l1 * l1)
            )
            epsilon = selection_epsilon(None, rho, per_epsilon2)
        noise = DiscreteLaplace(one_shot_scale(epsilon, l1))
        counts = counts.with_noise(noise)
        if method == "peeling":
            mechanism = top_k_mechanism(
                positive_rational(epsilon, "epsilon") / runs,
                k,
                utility_sensitivity=counts.effective_max_per_cell,
                monotone=counts.neighbouring == "add_remove",
            )
        else:
            mechanism = noise
        return cls(
            column=column, k=k, method=method, counts=counts, mechanism=mechanism, epsilon=epsilon
        )

    @classmethod
    def parameter_sources(cls) -> tuple:
        """The builds whose parameters make the public signature."""
        return (TopKSelection.build, top_k_counts)

    @property
    def groups(self) -> CellDomain | None:
        """The declared groups of ``by`` (None: one top-k over every row)."""
        domains = self.counts.cells.domains[:-1]
        return CellDomain(domains) if domains else None

    @property
    def group_count(self) -> int:
        return self.counts.cells.total // self.counts.cells.domains[-1].size

    @property
    def runs(self) -> int:
        """Groups whose selection one unit can change (peeling: k rounds in each)."""
        return _top_k_group_runs(self.counts)

    def labels(self) -> list:
        """The candidates in cell-index order (the order of one group's count array)."""
        domain = self.counts.cells.domains[-1]
        values = domain.values_at(np.arange(domain.size, dtype=np.int64))
        return [v.item() if isinstance(v, np.generic) else v for v in values]

    def info(self) -> SelectionInfo:
        counts = self.counts
        if self.method == "peeling":
            return SelectionInfo(
                statistic="top_k",
                method="peeling",
                event=PrivacyEvent(self.mechanism, (1,), self.k * self.runs),
                candidates=counts.cells.domains[-1].size,
                margin_of_error=None,
                confidence=counts.confidence,
                **_unit_and_bounds(counts),
            )
        sensitivity = counts.count_sensitivity()
        return SelectionInfo(
            statistic="top_k",
            method="one_shot",
            event=PrivacyEvent(self.mechanism, tuple(sensitivity), 1),
            candidates=counts.cells.domains[-1].size,
            margin_of_error=margin_of_error(self.mechanism, confidence=counts.confidence),
            confidence=counts.confidence,
            **_unit_and_bounds(counts),
        )


def _top_k_group_runs(counts: CountQuery) -> int:
    """Groups whose counts one unit can change: its cells (twice under replace), at most
    every group; one without groups."""
    groups = counts.cells.total // counts.cells.domains[-1].size
    touched = counts.effective_max_cells * (2 if counts.neighbouring == "replace" else 1)
    return min(touched, groups)


def _unit_and_bounds(counts: CountQuery) -> dict:
    """The privacy unit of a top-k and the bounds of its candidates' counts."""
    return {
        "privacy_unit": counts.privacy_unit,
        "contribution_bounds": {
            "max_candidates": counts.effective_max_cells,
            "max_per_candidate": counts.effective_max_per_cell,
        },
    }
