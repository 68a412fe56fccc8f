"""Key-free query parameters, their run context, and the public shims generated from them."""

from __future__ import annotations

import inspect
import pickle
from fractions import Fraction

import pandas as pd
import pytest

import dp_pipeline  # noqa: F401  (registers df.dp)
from dp_pipeline import DiscreteGaussian, DiscreteLaplace, DPTypeError, MasterKey
from dp_pipeline.query.aggregations import CountQuery, MeanQuery, SumQuery
from dp_pipeline.query.context import RunContext
from dp_pipeline.query.signatures import PARAMETER_DOCS
from dp_pipeline.query.spec import QuerySpec
from dp_pipeline.release.plan.queries import table_spec
from dp_pipeline.release.plan.release_plan import plan_release
from dp_pipeline.release.spec.load import load_spec
from dp_pipeline.release.tables.engines import compute_tables  # noqa: F401  (the release's engine)
from dp_pipeline.selection.parameters import QuantileSelection, TopKSelection
from dp_pipeline.selection.query import QuantileQuery, TopKQuery

KEY = MasterKey(bytes(range(32)))
CELLS = dict(by=["g"], domains={"g": range(5)})
LABELS = dict(key=KEY, release_id="r", table="t")


def test_parameter_objects_are_built_and_costed_without_a_key():
    count = CountQuery.build(
        **CELLS, noise=None, privacy_unit="u", max_cells=3, allow_no_noise=True
    )
    assert count.count_sensitivity() == (1, 1, 1)
    total = SumQuery.build("v", bounds=(-4, 10), **CELLS, noise=DiscreteGaussian(4))
    assert total.sum_sensitivity() == (10,)  # no privacy unit: each row is one
    mean = MeanQuery.build("v", bounds=(0, 8), granularity="1/2", **CELLS, noise=DiscreteLaplace(3))
    assert [(name, vector) for name, _, vector in mean.measures()] == [
        ("sum", (16,)),
        ("count", (1,)),
    ]
    assert mean.count_noise == DiscreteLaplace(3)
    pickle.dumps(count)  # nothing secret in what is computed: it can go anywhere


def test_a_query_without_noise_cannot_run_until_calibrated():
    count = CountQuery.build(**CELLS, noise=None, allow_no_noise=True)
    with pytest.raises(Exception, match="noise was never calibrated"):
        QuerySpec.bind(count, RunContext.build(key=KEY, release_id="r", table="t"))
    with pytest.raises(TypeError, match="noise must be a DiscreteGaussian or DiscreteLaplace"):
        CountQuery.build(**CELLS, noise=None)
    calibrated = count.with_noise(DiscreteGaussian(2))
    assert QuerySpec.bind(calibrated, RunContext.build(key=KEY, release_id="r", table="t")).noise


def test_run_context_refuses_bad_keys_and_names_by_name():
    with pytest.raises(TypeError, match="key must be a dp_pipeline MasterKey, got str"):
        RunContext.build(key="00" * 32, release_id="r", table="t")
    with pytest.raises(ValueError, match="table must be a non-empty string, got ''"):
        RunContext.build(key=KEY, release_id="r", table="")
    with pytest.raises(TypeError, match="noise_partitions must be a positive integer"):
        RunContext.build(key=KEY, release_id="r", table="t", noise_partitions=1.5)


@pytest.mark.parametrize(
    ("build", "call"),
    [
        (
            lambda: QuerySpec.build("count", **CELLS, epsilon=1, **LABELS),
            'QuerySpec.build("count", ..., privacy_unit="person_id")',
        ),
        (
            lambda: QuantileQuery.build(
                "quantile", column="v", q="1/4", bounds=(0, 9), granularity=1, epsilon=1, **LABELS
            ),
            'QuantileQuery.build("quantile", ..., privacy_unit="person_id")',
        ),
        (
            lambda: TopKQuery.build(column="g", k=1, candidates=range(3), epsilon=1, **LABELS),
            'TopKQuery.build(..., privacy_unit="person_id")',
        ),
    ],
)
def test_the_query_builds_need_privacy_unit_named(build, call):
    # A default would choose silently what the guarantee protects, as in the public calls.
    with pytest.raises(DPTypeError) as info:
        build()
    message = str(info.value)
    assert "needs privacy_unit=" in message and call in message
    assert call.replace('"person_id"', "None") in message


def test_the_bound_query_keeps_its_labels_whatever_builds_it():
    spec = QuerySpec.build(
        "sum",
        column="v",
        bounds=(0, 9),
        **CELLS,
        noise=DiscreteGaussian(4),
        key=KEY,
        release_id="r",
        table="t",
        privacy_unit=None,
    )
    query = SumQuery.build("v", bounds=(0, 9), **CELLS, noise=DiscreteGaussian(4))
    bound = QuerySpec.bind(query, RunContext.build(key=KEY, release_id="r", table="t"))
    assert bound.stream_labels("sum", 3) == spec.stream_labels("sum", 3)
    assert spec.without_key().digest == spec.digest and spec.without_key().key is None


def test_the_planner_costs_exactly_the_query_the_engines_run(tmp_path):
    spec = load_spec("conf/census_selections.toml")
    plan = plan_release(spec)
    for table_plan in plan.tables:
        table = table_plan.table
        if table.statistic in ("count", "sum"):
            query = table_spec(spec, table, table_plan.mechanism, KEY)
            assert query.measures()[0][2] == table_plan.sensitivity
        elif table.statistic == "top_k" and table.method == "one_shot":
            selection = TopKSelection.build(
                table.keys[0],
                table.k,
                candidates=spec.domains[table.keys[0]],
                epsilon=table_plan.epsilon,
                privacy_unit=spec.privacy_unit,
                max_candidates=table.max_cells,
                max_per_candidate=table.max_per_cell,
                neighbouring=spec.neighbouring,
            )
            assert selection.counts.count_sensitivity() == table_plan.sensitivity


# ------------------------------------------------------------------------- shims

EXPECTED_COUNT = (
    "(*, by, domains, privacy_unit, key, release_id, table, noise=None, "
    "max_cells=1, max_per_cell=1, neighbouring='add_remove', on_invalid='drop', "
    "cell_limit=10000000, confidence=Fraction(19, 20), delta=None, epsilon=None, rho=None, "
    "allow_large_delta=False, selection_epsilon=None, selection_delta=None, "
    "selection_noise='laplace', selection_max_units=None, noise_partitions=16)"
)


def _unannotated(signature: inspect.Signature) -> inspect.Signature:
    return signature.replace(
        parameters=[
            p.replace(annotation=inspect.Parameter.empty) for p in signature.parameters.values()
        ],
        return_annotation=inspect.Signature.empty,
    )


def _pandas_shims():
    frame = pd.DataFrame({"g": [1], "v": [2.0]})
    return {
        name: getattr(frame.dp, name)
        for name in ("count", "sum", "mean", "quantile", "median", "top_k")
    }


def test_shims_show_the_documented_parameters_and_defaults():
    shims = _pandas_shims()
    count = inspect.signature(shims["count"])
    assert str(_unannotated(count)).startswith(EXPECTED_COUNT)
    total = inspect.signature(shims["sum"]).parameters
    assert (
        next(iter(total)) == "column"
        and total["column"].kind is inspect.Parameter.POSITIONAL_OR_KEYWORD
    )
    assert total["granularity"].default == 1 and total["bounds"].default is inspect.Parameter.empty
    assert inspect.signature(shims["mean"]).parameters["count_noise"].default is None
    assert list(inspect.signature(shims["quantile"]).parameters)[:2] == ["column", "q"]
    assert "q" not in inspect.signature(shims["median"]).parameters
    top_k = inspect.signature(shims["top_k"]).parameters
    assert list(top_k)[:2] == ["column", "k"] and top_k["method"].default == "peeling"
    assert "noise_partitions" not in top_k


def test_every_shim_parameter_is_documented_once_in_its_help():
    for name, function in _pandas_shims().items():
        for parameter in inspect.signature(function).parameters:
            assert parameter in PARAMETER_DOCS
            assert f"    {parameter}" in function.__doc__, (name, parameter)
    assert "Noisy row count of every declared cell" in _pandas_shims()["count"].__doc__


def test_a_shim_refuses_a_call_its_signature_refuses():
    frame = pd.DataFrame({"g": [1], "v": [2.0]})
    with pytest.raises(TypeError, match="missing a required argument: 'by'"):
        frame.dp.count(
            domains={"g": range(3)}, noise=DiscreteGaussian(1), key=KEY, release_id="r", table="t"
        )
    with pytest.raises(TypeError, match="got an unexpected keyword argument 'colum'"):
        frame.dp.sum(
            "v",
            colum="v",
            bounds=(0, 1),
            **CELLS,
            noise=DiscreteGaussian(1),
            key=KEY,
            release_id="r",
            table="t",
        )
    with pytest.raises(TypeError, match="too many positional arguments"):
        frame.dp.count(["g"])


def test_spark_functions_have_the_call_shape_of_df_dp():
    # One call shape per operation: the same names, kinds (the value column positional
    # where df.dp takes it so), order and defaults; only df.dp's bound DataFrame is not there.
    pytest.importorskip("pyspark")
    from dp_pipeline import spark as spark_functions

    def shape(function):
        return [
            (p.name, p.kind, p.default) for p in inspect.signature(function).parameters.values()
        ]

    for name, function in _pandas_shims().items():
        assert shape(getattr(spark_functions, f"dp_{name}")) == shape(function), name
    positional = inspect.Parameter.POSITIONAL_OR_KEYWORD
    assert [p for p, kind, _ in shape(spark_functions.dp_sum) if kind is positional] == ["column"]
    assert [p for p, kind, _ in shape(spark_functions.dp_top_k) if kind is positional] == [
        "column",
        "k",
    ]


def test_selection_parameters_are_key_free():
    selection = QuantileSelection.build(
        "median", column="v", q=Fraction(1, 2), bounds=(0, 10), granularity=1, epsilon=1
    )
    assert len(selection.candidates) == 11
    pickle.dumps(selection)
    top = TopKQuery.build(
        privacy_unit=None,
        column="g",
        k=2,
        candidates=range(5),
        epsilon=1,
        key=KEY,
        release_id="r",
        table="t",
    )
    assert top.counts.key is KEY and top.selection.counts.cells.total == 5
