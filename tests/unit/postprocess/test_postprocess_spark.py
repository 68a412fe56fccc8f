"""Consistent tables on Spark, one task per state: the driver's integers bit for bit."""

from __future__ import annotations

import numpy as np
import pytest

from dp_pipeline.postprocess import make_consistent
from dp_pipeline.postprocess.group_solver import group_solver
from tests.support.postprocess_cases import DEMO_HIERARCHY, demo_truth, noisy_demo
from tests.unit.postprocess.test_postprocess_groups import (
    _national_age_sex,
    _no_national,
    _with_national,
)

pytestmark = pytest.mark.spark


def _on_spark(spark, tables, hierarchy, **options):
    from dp_pipeline.engines.spark.postprocess import cells_frame, consistent_cells, table_values

    solver = group_solver(tables, hierarchy, **options)
    with cells_frame(spark, solver.cells([t.values for t in tables])) as frame:
        fitted, diagnostics = consistent_cells(frame, solver)
        values = dict(table_values(fitted, [t.values.size for t in tables]))
    return {t.name: values[i] for i, t in enumerate(tables)}, diagnostics


def test_demo_on_spark_equals_the_driver_bit_for_bit(spark):
    tables = noisy_demo(demo_truth(20_000), seed=3)
    driver = make_consistent(tables, DEMO_HIERARCHY)
    on_spark, diagnostics = _on_spark(spark, tables, DEMO_HIERARCHY)
    for table in tables:
        assert on_spark[table.name].dtype == np.int64
        np.testing.assert_array_equal(on_spark[table.name], driver.values[table.name])
    assert diagnostics["iterations"] == driver.wls_iterations
    assert diagnostics["max_residual"] == driver.wls_max_residual


@pytest.mark.parametrize(
    "options", [{}, {"integer": False}, {"nonnegative": False, "integer": False}]
)
def test_three_levels_on_spark_equal_the_driver(spark, options):
    tables, hierarchy = _no_national()
    driver = make_consistent(tables, hierarchy, **options)
    on_spark, _ = _on_spark(spark, tables, hierarchy, **options)
    for table in tables:
        assert on_spark[table.name].dtype == driver.values[table.name].dtype
        np.testing.assert_array_equal(on_spark[table.name], driver.values[table.name])


def test_only_county_tables_on_spark_equal_the_driver(spark):
    tables, hierarchy = _no_national()
    driver = make_consistent(tables[:2], hierarchy)
    on_spark, _ = _on_spark(spark, tables[:2], hierarchy)
    for table in tables[:2]:
        np.testing.assert_array_equal(on_spark[table.name], driver.values[table.name])


def test_demo_with_a_national_table_on_spark_equals_the_driver_bit_for_bit(spark):
    truth = demo_truth(20_000)
    tables = [*noisy_demo(truth, seed=3), _national_age_sex(truth)]
    driver = make_consistent(tables, DEMO_HIERARCHY)
    on_spark, diagnostics = _on_spark(spark, tables, DEMO_HIERARCHY)
    for table in tables:
        assert on_spark[table.name].dtype == np.int64
        np.testing.assert_array_equal(on_spark[table.name], driver.values[table.name])
    assert diagnostics["max_residual"] == driver.wls_max_residual
    # The least squares alone, the same bits: every covariance and the multiplier agree.
    real = {"nonnegative": False, "integer": False}
    driver = make_consistent(tables, DEMO_HIERARCHY, **real)
    on_spark, _ = _on_spark(spark, tables, DEMO_HIERARCHY, **real)
    for table in tables:
        np.testing.assert_array_equal(on_spark[table.name], driver.values[table.name])


@pytest.mark.parametrize(
    "options", [{}, {"integer": False}, {"nonnegative": False, "integer": False}]
)
def test_a_national_table_on_spark_equals_the_driver(spark, options):
    tables, hierarchy = _no_national()
    tables = _with_national(tables, hierarchy)
    driver = make_consistent(tables, hierarchy, **options)
    on_spark, _ = _on_spark(spark, tables, hierarchy, **options)
    for table in tables:
        assert on_spark[table.name].dtype == driver.values[table.name].dtype
        np.testing.assert_array_equal(on_spark[table.name], driver.values[table.name])
