"""The small query both the pandas engine tests and the engine contract suite build."""

from __future__ import annotations

from dp_pipeline import DiscreteGaussian, MasterKey
from dp_pipeline.query.spec import QuerySpec

KEY = MasterKey.from_hex("33" * 32)
DOMAINS = {"state": range(0, 4), "sex": ["f", "m"]}


def make_spec(statistic="count", **overrides):
    params = dict(
        by=["state", "sex"],
        domains=DOMAINS,
        noise=DiscreteGaussian(9),
        key=KEY,
        release_id="rel-1",
        table="persons",
        privacy_unit=None,
    )
    if statistic != "count":
        params.update(column="income", bounds=(0, 100))
    params.update(overrides)
    return QuerySpec.build(statistic, **params)
