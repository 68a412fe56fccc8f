"""The public signatures of a session's verbs: ``df.dp``'s, without what the session holds.

``session.count(df, ...)`` takes the arguments of ``df.dp.count(...)`` (generated
from the same parameter objects by `dp_pipeline.query.signatures.public_signature`)
except the key, the release id, the table label and the privacy unit, which are the
session's; ``session.cost.count(...)`` the same without ``df``. An argument the session
holds is refused with an error saying where it is given.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable

from dp_pipeline.errors import DPTypeError, InternalError
from dp_pipeline.query.aggregations import AGGREGATIONS
from dp_pipeline.query.budget import QueryBudget
from dp_pipeline.query.context import RunContext
from dp_pipeline.query.signatures import PARAMETER_DOCS, public_doc, public_signature
from dp_pipeline.selection.parameters import QuantileSelection, TopKSelection
from dp_pipeline.selection.signatures import MEDIAN_SUMMARY
from dp_pipeline.session.plan import AGGREGATION_VERBS

__all__ = ["SESSION_HELD", "VERBS", "verb"]

# What a session holds for all of its queries (never an argument of one of them).
SESSION_HELD = ("key", "release_id", "table", "privacy_unit")
VERBS = ("count", "sum", "mean", "quantile", "median", "top_k")

_ON_INVALID_DOC = (
    '"drop" (invalid rows are dropped and counted in the diagnostics); "error" is refused '
    "in a session (whether the query fails would be an exact fact about the data)"
)
_DF_DOC = (
    "    df: the pandas or Spark DataFrame to query (read only after the query is "
    "recorded in the ledger)\n"
)


def _signature(statistic: str, leading: tuple[str, ...]) -> inspect.Signature:
    held = (*SESSION_HELD,)
    if statistic in AGGREGATION_VERBS:
        return public_signature(
            *AGGREGATIONS[statistic].parameter_sources(),
            QueryBudget.build,
            RunContext.build,
            positional=() if statistic == "count" else ("column",),
            leading=leading,
            exclude=held,
        )
    if statistic in ("quantile", "median"):
        median = statistic == "median"
        return public_signature(
            QuantileSelection.build,
            RunContext.build,
            positional=("column",) if median else ("column", "q"),
            leading=leading,
            exclude=(*held, "noise_partitions", *(("q",) if median else ())),
        )
    if statistic == "top_k":
        return public_signature(
            *TopKSelection.parameter_sources(),
            RunContext.build,
            positional=("column", "k"),
            leading=leading,
            exclude=(*held, "noise_partitions"),
        )
    raise InternalError(f"no session verb {statistic!r}")


def _summary(statistic: str) -> str | None:
    if statistic in AGGREGATION_VERBS:
        return AGGREGATIONS[statistic].__doc__
    return {
        "quantile": QuantileSelection.__doc__,
        "median": MEDIAN_SUMMARY,
        "top_k": TopKSelection.__doc__,
    }[statistic]


def verb(statistic: str, run: Callable, *, with_df: bool, returns: str) -> Callable:
    """The method ``statistic`` of a session (``with_df``) or of its ``cost``: bound by
    its signature, calling ``run(self, statistic, arguments)`` with every argument."""
    leading = ("self", "df") if with_df else ("self",)
    signature = _signature(statistic, leading)
    shown = _signature(statistic, ("self",))
    doc = public_doc(_summary(statistic), shown, returns)
    if with_df:
        doc = doc.replace("Parameters:\n", "Parameters:\n" + _DF_DOC, 1)
    doc = doc.replace(PARAMETER_DOCS["on_invalid"], _ON_INVALID_DOC)
    call_form = f"session.{'' if with_df else 'cost.'}{statistic}(...)"

    def method(*args, **kwargs):
        held = [name for name in SESSION_HELD if name in kwargs]
        if held:
            raise DPTypeError(
                f"{call_form} takes no {held[0]}=: a session holds the key, the release id, "
                f"the privacy unit and each query's stream labels for all of its queries "
                f"(give them once, to Session(...)); drop {held[0]}= from this call"
            )
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        arguments = dict(bound.arguments)
        self = arguments.pop("self")
        return run(self, statistic, arguments)

    method.__name__ = method.__qualname__ = statistic
    method.__doc__ = doc
    method.__signature__ = signature
    method.__module__ = "dp_pipeline.session.session"
    return method
