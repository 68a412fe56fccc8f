"""``input.on_invalid = "error"``: refuse a release on a noisy, accounted count of invalid rows.

Invalid rows are those the engines drop and count under the default
``"drop"``: a null (empty, unparsable) or out-of-domain key, a row that breaks
the public hierarchy of the tables made consistent (`dp_pipeline.query.hierarchy`),
a null privacy unit, a null, NaN or infinite summed or quantile value, and a CSV
row whose number of fields differs from its header (a malformed row). Whether a
release with such rows is published must not be a free, exact bit about the data
(a spec whose domain ends at a guessed value would otherwise binary-search the
data's maximum). So under ``"error"`` the decision is DP output:

1. The plan gives the count its noise and proves it with the tables
   (`dp_pipeline.release.plan.release_plan.InvalidCountPlan`): the count is of the privacy
   units having at least one row that breaks a rule of some table (each row its
   own unit under ``each_row``; rows whose unit cannot be read, a null unit or a
   malformed row, count together as one unit), so one unit moves it by at most 1.
2. The exact count is computed where the engine already holds the rows
   (`dp_pipeline.engines.pandas.invalid_rows`, `dp_pipeline.engines.spark.invalid_rows`),
   after the ledger reserved the whole release's spend.
3. `decide` adds noise drawn from the release's keyed stream (labels: the
   release id and digest), so a resumed run and either engine draw the same
   noise and decide the same, and refuses the release when the noisy count is
   above ``input.invalid_threshold``. The error quotes only the noisy count and
   the threshold; the run is charged whatever it decides.

Exact invalid-row counts stay in the non-private diagnostics, never printed.
"""

from __future__ import annotations

from dp_pipeline.errors import InvalidRowsRefusedError
from dp_pipeline.query.domain import Domain
from dp_pipeline.query.hierarchy import HIERARCHY_MISMATCH, HIERARCHY_RULE, HierarchyRule
from dp_pipeline.randomness import MasterKey, derive_stream
from dp_pipeline.release.plan.queries import hierarchy_rule
from dp_pipeline.release.plan.release_plan import ReleasePlan
from dp_pipeline.release.spec.model import ReleaseSpec

__all__ = ["REASONS", "InvalidRowsRefusedError", "decide", "noisy_invalid_count", "row_checks"]

# Reason code -> the rule a row breaks (the engines' `Diagnostics` count the same).
REASONS = {
    "null_key": "have a null (empty or unparsable) key",
    "out_of_domain": "have a key outside the declared domain",
    HIERARCHY_MISMATCH: HIERARCHY_RULE,
    "null_unit": "have a null privacy unit",
    "invalid_value": "hold a null, NaN or infinite value",
    "malformed": "have another number of fields than the CSV header",
}

STREAM_LABEL = "invalid-row-count"


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


def noisy_invalid_count(plan: ReleasePlan, master: MasterKey, release_digest: str, exact: int):
    """``exact`` plus one draw of the plan's invalid-count mechanism (an exact integer).

    The draw comes from the stream keyed by (master key, `STREAM_LABEL`, release id,
    release digest): the same release draws the same noise on every engine and on
    a resumed run, and no other stream of the release shares it. Privacy: the
    plan's `InvalidCountPlan` event (sensitivity 1), composed into the release.
    """
    count = plan.invalid_count
    stream = derive_stream(master, STREAM_LABEL, plan.spec.release_id, release_digest)
    (noise,) = count.mechanism.sample(1, stream)
    return int(exact) + int(noise)


def decide(plan: ReleasePlan, master: MasterKey, release_digest: str, exact: int) -> None:
    """Raise `InvalidRowsRefusedError` when the noisy invalid-row count is above the threshold.

    Does nothing without ``on_invalid = "error"``. Call after the reservation only:
    the count is DP output of the release, charged whatever is decided. The message
    holds the noisy count and the public threshold, never the exact count.
    """
    count = plan.invalid_count
    if count is None:
        return
    noisy = noisy_invalid_count(plan, master, release_digest, exact)
    if noisy <= count.threshold:
        return
    spec = plan.spec
    raise InvalidRowsRefusedError(
        [
            f"the noisy count of privacy units with an invalid row is {noisy}, above "
            f"input.invalid_threshold = {count.threshold} (its noise has a 95% margin of "
            f'±{count.margin_of_error}); input.on_invalid = "error" refuses the release: '
            f"nothing was published, and its budget is spent (the count is part of the "
            f"release); running the same release id again gives the same decision; fix the "
            f'input and run a new release id, or set input.on_invalid = "drop"'
        ],
        source=f"release {spec.release_id!r}",
    )
