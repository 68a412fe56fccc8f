"""The public signatures of the selections (quantile, median, top-k) for both engines' shims.

Generated from `dp_pipeline.selection.parameters` and the run context's build by
`dp_pipeline.query.signatures.public_signature`; ``leading`` is ``self`` for
``df.dp`` and nothing for `dp_pipeline.spark`.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence

from dp_pipeline.query.context import RunContext
from dp_pipeline.query.signatures import public_doc, public_signature
from dp_pipeline.selection.parameters import QuantileSelection, TopKSelection

__all__ = [
    "MEDIAN_SUMMARY",
    "SPARK_RETURNS",
    "quantile_signature",
    "selection_doc",
    "top_k_signature",
]

# Selections run in a context without noise partitions (the mechanism draws from one stream).
_SELECTION_CONTEXT = ("noise_partitions",)
MEDIAN_SUMMARY = """`quantile` at q = 1/2 (its own stream label "median")."""
RETURNS = (
    "a small pandas DataFrame whose attrs['dp'] is a SelectionInfo (mechanism, pure ε, "
    "margin; diagnostics: never publish them)."
)
SPARK_RETURNS = (
    "a SparkDPSelection: a DataFrame -> DataFrame function for df.transform (its .info the "
    "SelectionInfo); the same inputs as df.dp give the same selection."
)


def quantile_signature(statistic: str, leading: Sequence[str]) -> inspect.Signature:
    """``(column, q, *, bounds, ...)``; a median has no ``q``."""
    median = statistic == "median"
    return public_signature(
        QuantileSelection.build,
        RunContext.build,
        positional=("column",) if median else ("column", "q"),
        leading=leading,
        exclude=(*_SELECTION_CONTEXT, *(("q",) if median else ())),
    )


def top_k_signature(leading: Sequence[str]) -> inspect.Signature:
    """``(column, k, *, candidates, epsilon, ...)``."""
    return public_signature(
        *TopKSelection.parameter_sources(),
        RunContext.build,
        positional=("column", "k"),
        leading=leading,
        exclude=_SELECTION_CONTEXT,
    )


def selection_doc(statistic: str, signature: inspect.Signature, *, spark: bool = False) -> str:
    """The docstring of a selection shim, from its parameter object's (``spark``: of
    `dp_pipeline.spark`'s, which returns a query for ``df.transform``)."""
    summary = {
        "quantile": QuantileSelection.__doc__,
        "median": MEDIAN_SUMMARY,
        "top_k": TopKSelection.__doc__,
    }[statistic]
    return public_doc(summary, signature, SPARK_RETURNS if spark else RETURNS)
