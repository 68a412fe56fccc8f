"""``input.on_invalid = "error"``: refuse a release whose input has an invalid row.

Invalid rows are those the engines drop and count under the default
``"drop"``: a null (empty, unparsable) or out-of-domain key, a row that breaks
the public hierarchy of the tables made consistent (`dp_pipeline.query.hierarchy`),
a null privacy unit, a null, NaN or infinite summed or quantile value. Under ``"error"`` the
input is read once before the ledger is touched (`refuse_invalid_rows`, called
between the release's identity and its reservation): a release with any such row
stops with an error naming the column, the reason code and the rule, and nothing
is reserved or written. The message quotes no count or value from the data.

The rule is a gate on publication, not part of the release's identity: a
release it lets through has no invalid row, so ``"drop"`` would have dropped
nothing and published the same numbers (`dp_pipeline.release.identity`).
"""

from __future__ import annotations

from dp_pipeline.engines.pandas.invalid_rows import first_broken_check as pandas_broken_check
from dp_pipeline.query.domain import Domain
from dp_pipeline.query.hierarchy import HIERARCHY_MISMATCH, HIERARCHY_RULE, HierarchyRule
from dp_pipeline.release.pandas_tables import read_pandas
from dp_pipeline.release.queries import hierarchy_rule
from dp_pipeline.release.spec_model import ReleaseSpec, SpecError

__all__ = ["REASONS", "refuse_invalid_rows", "row_checks"]

# Reason code -> the rule a row breaks (the engines' `Diagnostics` count the same).
REASONS = {
    "null_key": "have a null (empty or unparsable) key",
    "out_of_domain": "have a key outside the declared domain",
    HIERARCHY_MISMATCH: HIERARCHY_RULE,
    "null_unit": "have a null privacy unit",
    "invalid_value": "hold a null, NaN or infinite value",
}


def row_checks(spec: ReleaseSpec) -> list[tuple[str, str, Domain | HierarchyRule | None]]:
    """Every ``(reason, column, domain)`` the spec's tables need, in table and key order.

    A ``hierarchy_mismatch`` check names the rule's finest column and carries the
    `dp_pipeline.query.hierarchy.HierarchyRule` in place of a domain.
    """
    checks: dict[tuple[str, str], Domain | HierarchyRule | None] = {}
    rule = hierarchy_rule(spec)
    for table in spec.tables:
        for key in table.keys:
            domain = Domain.from_spec(key, spec.domains[key])
            checks.setdefault(("null_key", key), domain)
            checks.setdefault(("out_of_domain", key), domain)
        if rule is not None and table.name in spec.postprocess.combined:
            checks.setdefault((HIERARCHY_MISMATCH, rule.finest.column), rule)
        if spec.privacy_unit is not None:
            checks.setdefault(("null_unit", spec.privacy_unit), None)
        if table.value is not None:
            checks.setdefault(("invalid_value", table.value), None)
    return [(reason, column, domain) for (reason, column), domain in checks.items()]


def refuse_invalid_rows(spec: ReleaseSpec, source) -> None:
    """Under ``on_invalid = "error"``, raise `SpecError` if a row of ``source`` is invalid.

    ``source`` is the release's `dp_pipeline.release.engines.OpenedInput`; its
    engine reads it (pandas, or Spark with the spec's CSV schema) exactly as the
    release will. Does nothing under ``"drop"``.
    """
    if spec.on_invalid != "error":
        return
    checks = row_checks(spec)
    if source.engine == "pandas":
        broken = pandas_broken_check(read_pandas(spec, source), checks)
    else:
        # PySpark is optional: the Spark side loads only for a Spark release.
        from dp_pipeline.engines.spark.invalid_rows import first_broken_check
        from dp_pipeline.release.spark_tables import spark_input_frame

        broken = first_broken_check(spark_input_frame(spec, source), checks)
    if broken is None:
        return
    reason, column = broken
    raise SpecError(
        [
            f"column {column!r}: some rows {REASONS[reason]} (reason code {reason}); "
            f'input.on_invalid = "error" refuses a release with any invalid row, so nothing '
            f"was reserved or written (the message quotes no count or value from the data); "
            f'set input.on_invalid = "drop" to drop such rows and count them in the '
            f"non-private diagnostics"
        ],
        source=f"release {spec.release_id!r}, input {str(source.path)!r}",
    )
