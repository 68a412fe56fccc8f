"""The one table of verbs: what ``df.dp``, `dp_pipeline.spark`, `Session` and ``Session.cost`` call.

`VERBS` names each verb (count, sum, mean, var, std, quantile, median, top_k) with the builds whose
parameters it takes, its positional parameters, what it leaves out and its summary. A
`Surface` says how one public place shows the verbs: leading parameters (``self``,
``df``), the arguments it holds itself (a session's key and labels), its return type and
text, and how a call is written in its errors. `signature_of` and `method_of` are the
one generator: every surface's signature and docstring come from the table and
`dp_pipeline.query.signatures.PARAMETER_DOCS`, so the four surfaces cannot drift, and the
stubs type checkers read (`dp_pipeline.surface.stubs`) are written from the same functions.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from dp_pipeline.errors import DPTypeError
from dp_pipeline.query.aggregations import AGGREGATIONS
from dp_pipeline.query.budget import QueryBudget
from dp_pipeline.query.context import RunContext
from dp_pipeline.query.key_selection import KeySelectionParameters
from dp_pipeline.query.signatures import PARAMETER_DOCS, public_doc, public_signature, shim
from dp_pipeline.query.variance import VARIANCE_SUMMARIES
from dp_pipeline.selection.parameters import QuantileSelection, TopKSelection

__all__ = ["VERBS", "Surface", "Verb", "method_of", "signature_of"]

# Selections draw from one stream: their run context has no noise partitions.
_ONE_STREAM = ("noise_partitions",)
# A count, sum, mean, variance or std may select a key from the data (FROM_DATA).
_SELECTED_KEYS = KeySelectionParameters.build


@dataclass(frozen=True)
class Verb:
    """One verb: its statistic, the builds its parameters come from (in order), its
    positional parameters after the surface's leading ones, the build parameters it
    does not take, whether it selects (quantile, median, top-k) and its summary."""

    statistic: str
    sources: tuple[Callable[..., Any], ...]
    positional: tuple[str, ...]
    exclude: tuple[str, ...]
    selection: bool
    summary: str


def _aggregation(statistic: str) -> Verb:
    query = AGGREGATIONS[statistic]
    return Verb(
        statistic,
        (*query.parameter_sources(), QueryBudget.build, _SELECTED_KEYS, RunContext.build),
        # The value column is the one positional argument; a count has none.
        () if statistic == "count" else ("column",),
        (),
        False,
        inspect.cleandoc(query.__doc__ or ""),
    )


def _variance(statistic: str) -> Verb:
    # A mean's parameters: the estimator (`dp_pipeline.query.variance`) reads the same ones.
    return Verb(
        statistic,
        (
            *AGGREGATIONS["mean"].parameter_sources(),
            QueryBudget.build,
            _SELECTED_KEYS,
            RunContext.build,
        ),
        ("column",),
        (),
        False,
        VARIANCE_SUMMARIES[statistic],
    )


VERBS: dict[str, Verb] = {
    "count": _aggregation("count"),
    "sum": _aggregation("sum"),
    "mean": _aggregation("mean"),
    "var": _variance("var"),
    "std": _variance("std"),
    "quantile": Verb(
        "quantile",
        (QuantileSelection.build, RunContext.build),
        ("column", "q"),
        _ONE_STREAM,
        True,
        inspect.cleandoc(QuantileSelection.__doc__ or ""),
    ),
    "median": Verb(
        "median",
        (QuantileSelection.build, RunContext.build),
        ("column",),
        (*_ONE_STREAM, "q"),
        True,
        """`quantile` at q = 1/2 (its own stream label "median").""",
    ),
    "top_k": Verb(
        "top_k",
        (*TopKSelection.parameter_sources(), RunContext.build),
        ("column", "k"),
        _ONE_STREAM,
        True,
        inspect.cleandoc(TopKSelection.__doc__ or ""),
    ),
}


@dataclass(frozen=True)
class Surface:
    """How one public place shows the verbs.

    ``name`` formats a verb's function name (``"dp_{}"``), ``call`` how a call is written
    in errors (``{verb}`` the verb, ``{{}}`` its arguments); ``leading`` parameters come
    first (``leading_types`` annotates them); ``held`` are arguments the surface holds
    itself, refused in a call with ``held_reason``; ``returns`` / ``selection_returns``
    the return annotations of an aggregation / a selection, ``returns_text`` /
    ``selection_returns_text`` their docs; ``verb_returns`` a verb's own (annotation,
    text) where it returns another type; ``docs`` overrides `PARAMETER_DOCS` entries;
    ``module`` is where the functions say they live."""

    name: str
    call: str
    module: str
    returns: object
    returns_text: str
    selection_returns: object
    selection_returns_text: str
    leading: tuple[str, ...] = ()
    leading_types: Mapping[str, object] = field(default_factory=dict)
    held: tuple[str, ...] = ()
    held_reason: str = ""
    docs: Mapping[str, str] = field(default_factory=dict)
    examples: Mapping[str, str] = field(default_factory=dict)
    verb_returns: Mapping[str, tuple[object, str]] = field(default_factory=dict)

    def returns_of(self, verb: Verb) -> tuple[object, str]:
        """(return annotation, its doc) of ``verb`` on this surface."""
        if verb.statistic in self.verb_returns:
            return self.verb_returns[verb.statistic]
        if verb.selection:
            return self.selection_returns, self.selection_returns_text
        return self.returns, self.returns_text


def signature_of(verb: Verb, surface: Surface, *, shown: bool = False) -> inspect.Signature:
    """``verb``'s signature on ``surface`` (``shown``: only ``self`` leading, as its doc
    lists the parameters)."""
    leading = surface.leading[:1] if shown else surface.leading
    signature = public_signature(
        *verb.sources,
        positional=verb.positional,
        leading=leading,
        exclude=(*verb.exclude, *surface.held),
        returns=surface.returns_of(verb)[0],
    )
    typed = [
        p.replace(annotation=surface.leading_types.get(p.name, p.annotation))
        for p in signature.parameters.values()
    ]
    return signature.replace(parameters=typed)


def _doc(verb: Verb, surface: Surface) -> str:
    shown = signature_of(verb, surface, shown=True)
    returns = surface.returns_of(verb)[1]
    docs = {**PARAMETER_DOCS, **surface.docs}
    extra = [name for name in surface.leading[1:] if name in docs]  # e.g. a session's df
    doc = public_doc(verb.summary, shown, returns, docs=docs, first=extra)
    return doc + surface.examples.get(verb.statistic, "")


def method_of(verb: Verb, surface: Surface, run: Callable[..., Any]) -> Callable[..., Any]:
    """``verb`` on ``surface``: called as `signature_of` says, refusing an argument the
    surface holds (naming where it is given), then ``run(**arguments)`` with every
    argument bound (defaults applied)."""
    name = surface.name.format(verb.statistic)
    call = surface.call.format(verb=verb.statistic)
    held = surface.held

    def refuse_held(arguments: Mapping[str, Any]) -> None:
        given = [argument for argument in held if argument in arguments]
        if given:
            raise DPTypeError(
                f"{call.format('...')} takes no {given[0]}=: {surface.held_reason}; drop "
                f"{given[0]}= from this call"
            )

    return shim(
        name,
        signature_of(verb, surface),
        _doc(verb, surface),
        run,
        surface.module,
        call_form=call,
        check=refuse_held if held else None,
    )
