"""Consistent tables: pure post-processing of released noisy counts.

Weighted least squares over every pairwise common margin (Hay, Rastogi, Miklau
and Suciu 2010, generalised to unequal public variances), then non-negative
integers fixed top-down along a public geography hierarchy (at each step the
closest non-negative table to the least squares estimate with the margins fixed
above, then integers that keep them). Reads only noisy
values and public facts, so it costs no privacy; deterministic.
"""

from .consistent import ConsistentTables, make_consistent
from .plan import check_combinable
from .structure import Hierarchy, NoisyCounts, PostprocessError, TableShape

__all__ = [
    "ConsistentTables",
    "Hierarchy",
    "NoisyCounts",
    "PostprocessError",
    "TableShape",
    "check_combinable",
    "make_consistent",
]
