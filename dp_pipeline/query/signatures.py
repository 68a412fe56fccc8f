"""Public call signatures and docstrings generated from the parameter objects' ``build``.

``df.dp.*``, ``dp_pipeline.spark.dp_*``, ``Session.*`` and ``Session.cost.*`` are thin
shims made from one table (`dp_pipeline.surface.verbs`): their parameters are those of a
parameter object's ``build`` (`dp_pipeline.query.aggregations`,
`dp_pipeline.selection.parameters`) and of `dp_pipeline.query.context.RunContext.build`,
merged by `public_signature`; each parameter is described once, in `PARAMETER_DOCS`. A
shim binds its call with that signature (so a wrong argument fails as it would on a
written-out function) and ``inspect.signature`` / ``help()`` show the real parameters.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from dp_pipeline.errors import DPTypeError, InternalError

__all__ = [
    "EXPLICIT",
    "PARAMETER_DOCS",
    "REQUIRED",
    "explicit_argument_error",
    "public_doc",
    "public_signature",
    "require_explicit",
    "shim",
]

Result = TypeVar("Result")

# Arguments of the builds that no public call takes.
INTERNAL = ("statistic", "allow_no_noise", "release_digest")
# Arguments every public call names, even as None: a default would choose silently what
# the guarantee protects (a unit with all of its rows, or each row alone).
EXPLICIT = ("privacy_unit",)

PARAMETER_DOCS = {
    "self": "",
    "df": "the Spark DataFrame read (eagerly) by this call",
    "column": "the summed (quantile, top-k: selected) column",
    "q": "the quantile level in [0, 1] (an exact rational or a string such as '1/4')",
    "k": "how many candidates are selected",
    "by": "key columns (a name or a list of names)",
    "domains": "{column: range or list}: the declared cells, every one released; or "
    "{column: dp_pipeline.FROM_DATA} for one key whose released values are selected "
    "privately from the data (those whose noisy count of distinct units clears an exact "
    "threshold; needs selection_epsilon and selection_delta)",
    "selection_epsilon": "with a FROM_DATA key: the ε of its private key selection (composed "
    "with the statistic's by the accountant; each unit counts in at most max_cells keys)",
    "selection_delta": "with a FROM_DATA key: the δ of its key selection (an upper bound on "
    "the chance a key held by max_cells units or fewer is released, and its noise's δ); at "
    "most 1e-4 unless allow_large_delta",
    "selection_noise": 'with a FROM_DATA key: "laplace" (the truncated geometric per key, '
    "optimal for one key per unit, or Laplace thresholding, whichever has the smaller "
    'threshold) or "gaussian" (Gaussian thresholding, better for large max_cells)',
    "selection_max_units": "with a FROM_DATA key: the most distinct units a key can have "
    "(public, e.g. the population's size); a budget whose threshold exceeds it is refused "
    "before reading, naming the threshold and the least selection_epsilon that would do",
    "bounds": "(lower, upper) of the values; values are clamped into them, never taken "
    "from the data",
    "granularity": "values are rounded to integer multiples of it (an exact rational)",
    "candidates": "the public candidate values (a list or range); other rows are dropped "
    "or refused",
    "noise": "a DiscreteGaussian or DiscreteLaplace (exact rational parameters); or give "
    "a budget instead (epsilon, delta, rho), never both",
    "rho": "a zCDP budget instead of epsilon: a count, sum or mean gets the least discrete "
    "Gaussian σ² meeting it (exact, rounded up); a selection the largest pure ε whose "
    "zCDP cost is at most rho (ε²/8 per exponential-mechanism run)",
    "count_noise": "the mechanism of a mean's count (default: the same as noise)",
    "epsilon": "the budget ε of this one query, calibrated by the accountant: a count, sum "
    "or mean gets with delta the least discrete Gaussian σ² meeting (ε, δ), alone discrete "
    "Laplace at pure ε; a selection the exponential mechanism at pure ε (spent: its "
    "pure_epsilon, never above; or pass a ready BaseTwoExponential)",
    "method": '"peeling" (k exponential-mechanism rounds at ε/k) or "one_shot" (discrete '
    "Laplace noisy counts at scale Δ₁/ε and their top k)",
    "key": "a MasterKey (the noise is reproducible under the same key and labels)",
    "release_id": "names the noise streams, with table and what is measured (the statistic "
    "and a digest of the query): the same query under the same key and labels redraws the "
    "same noise, any other query draws independent noise and spends its own budget",
    "table": "names the noise streams, with release_id",
    "privacy_unit": "required: the column whose value is one privacy unit (the guarantee "
    "covers a unit with all of its rows), or None to make every row its own unit (a "
    "per-record guarantee)",
    "max_cells": "L0 bound: cells (a quantile's groups) one unit may contribute to",
    "max_per_cell": "L∞ bound: rows one unit may contribute to one cell (a quantile's group)",
    "max_candidates": "L0 bound: candidates (with by=: (group, candidate) cells) one unit "
    "may count in",
    "max_per_candidate": "L∞ bound: times one unit may count in one candidate",
    "neighbouring": '"add_remove" (a unit is added or removed) or "replace"',
    "on_invalid": '"drop" (counted in the diagnostics) or "error" (refused, naming the column)',
    "noise_partitions": "how many noise partitions (streams) the cells are dealt to",
    "cell_limit": "the most cells a query may declare",
    "confidence": "of the margins of error",
    "delta": "with epsilon, the budget's δ (the least discrete Gaussian σ² whose tight δ at "
    "epsilon is at most it); with noise or rho, the δ at which ε is reported (default "
    "1e-6); at most 1e-4 unless allow_large_delta",
    "allow_large_delta": "True accepts a delta above 1e-4, the large-delta limit, on "
    "purpose (noise calibrated to a large delta protects almost nothing); False (the "
    "default) refuses it",
}


def public_signature(
    *builds: Callable,
    positional: Sequence[str] = (),
    leading: Sequence[str] = (),
    exclude: Sequence[str] = (),
    returns: object = inspect.Signature.empty,
) -> inspect.Signature:
    """The merged signature of ``builds``: ``leading`` then ``positional`` parameters, then
    keyword-only ones (required first, each group in the builds' order). A build that
    forwards ``**arguments`` to the next one lists only its own parameters."""
    merged: dict[str, inspect.Parameter] = {}
    for build in builds:
        for parameter in inspect.signature(build, eval_str=True).parameters.values():
            if parameter.name in (*INTERNAL, *exclude) or parameter.kind is parameter.VAR_KEYWORD:
                continue
            known = merged.setdefault(parameter.name, parameter)
            if known.default != parameter.default:  # a build forwarding to another
                raise InternalError(f"parameter {parameter.name!r} has two defaults")
    for name in EXPLICIT:
        if name in merged:
            merged[name] = merged[name].replace(default=inspect.Parameter.empty)
    kind = inspect.Parameter.POSITIONAL_OR_KEYWORD
    front = [inspect.Parameter(name, kind) for name in leading]
    front += [merged.pop(name).replace(kind=kind) for name in positional]
    rest = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in merged.values()]
    required = [p for p in rest if p.default is inspect.Parameter.empty]
    optional = [p for p in rest if p.default is not inspect.Parameter.empty]
    return inspect.Signature([*front, *required, *optional], return_annotation=returns)


def public_doc(
    summary: str | None,
    signature: inspect.Signature,
    returns: str = "",
    *,
    docs: Mapping[str, str] = PARAMETER_DOCS,
    first: Sequence[str] = (),
) -> str:
    """``summary`` (a parameter object's docstring), the return value, then one line per
    parameter (``first``, then those of ``signature``) from ``docs``."""
    lines = [inspect.cleandoc(summary or ""), ""]
    if returns:
        lines += [f"Returns {returns}", ""]
    lines += ["Parameters:"]
    shown = [(name, inspect.Parameter.empty) for name in first]
    shown += [(name, p.default) for name, p in signature.parameters.items() if name != "self"]
    for name, default in shown:
        if name not in docs:
            raise InternalError(f"parameter {name!r} has no entry in PARAMETER_DOCS")
        optional = "" if default is inspect.Parameter.empty else " (optional)"
        lines.append(f"    {name}{optional}: {docs[name]}")
    return "\n".join(lines) + "\n"


class Required:
    """The default of a keyword every call must name (a constructor's ``privacy_unit``):
    the stubs show such a parameter as required, the call refuses its absence with
    `explicit_argument_error`."""

    def __repr__(self) -> str:
        return "<required>"


REQUIRED: Any = Required()


def explicit_argument_error(call: str, name: str) -> TypeError:
    """The error of a public call ``call`` (``{}`` for its arguments) without ``name``."""
    if name != "privacy_unit":  # the one EXPLICIT argument
        raise InternalError(f"no explanation of the explicit argument {name!r}")
    per_unit = call.format('..., privacy_unit="person_id"')
    per_record = call.format("..., privacy_unit=None")
    return DPTypeError(
        f"{call.format('...')} needs privacy_unit=: the column whose value identifies one "
        f"person (or other unit), so that the guarantee covers each unit with all of its "
        f"rows (bounded by max_cells and max_per_cell), e.g. {per_unit}; or, to protect "
        f"each row alone (a per-record guarantee, weaker when a unit has several rows), "
        f"say so: {per_record}"
    )


def require_explicit(call: str, arguments: dict) -> None:
    """Refuse a call ``call`` (``{}`` for its arguments) whose ``arguments`` lack an
    `EXPLICIT` one, with `explicit_argument_error`."""
    for name in EXPLICIT:
        if name not in arguments:
            raise explicit_argument_error(call, name)


def shim(
    name: str,
    signature: inspect.Signature,
    doc: str,
    run: Callable[..., Result],
    module: str,
    *,
    call_form: str | None = None,
    check: Callable[[dict[str, Any]], None] | None = None,
) -> Callable[..., Result]:
    """A function ``module.name`` called as ``signature`` says, calling ``run(**arguments)``
    with every argument bound (defaults applied); ``help()`` shows ``signature`` and ``doc``.

    ``check`` sees the keyword arguments first (a session refuses those it holds). An
    `EXPLICIT` parameter missing from a call is refused with an error showing how to
    write it, as ``call_form`` (``{}`` for the arguments; default ``name({})``)."""
    explicit = [p for p in EXPLICIT if p in signature.parameters]
    form = call_form or f"{name}({{}})"

    def call(*args: Any, **kwargs: Any) -> Result:
        if check is not None:
            check(kwargs)
        missing = [parameter for parameter in explicit if parameter not in kwargs]
        # What the signature refuses is refused first, as a written-out function would.
        try:
            bound = signature.bind(*args, **kwargs, **dict.fromkeys(missing))
        except TypeError as error:  # Python's own message, as one of ours (a DPError)
            raise DPTypeError(f"{name}(): {error}") from None
        if missing:
            raise explicit_argument_error(form, missing[0])
        bound.apply_defaults()
        return run(**bound.arguments)

    call.__name__ = call.__qualname__ = name
    call.__doc__ = doc
    call.__signature__ = signature  # type: ignore[attr-defined]
    call.__module__ = module
    return call
