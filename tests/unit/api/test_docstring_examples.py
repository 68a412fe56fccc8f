"""The examples in the public docstrings run and print what they say.

Each ``>>>`` block of ``df.dp.*``, ``dp_pipeline.spark``, the accountant and the
accounting functions is run by `doctest` on a fresh namespace (the examples make their
own data). The shims' docstrings are generated, so they are collected from the callables
themselves rather than by module discovery.
"""

from __future__ import annotations

import doctest

import pandas as pd
import pytest

import dp_pipeline
import dp_pipeline.accounting as accounting

VERBS = ("count", "sum", "mean", "quantile", "median", "top_k")


def run_examples(name: str, docstring: str | None) -> doctest.TestResults:
    """Run the ``>>>`` examples of ``docstring``; fail naming the first that does not hold."""
    test = doctest.DocTestParser().get_doctest(docstring or "", {}, name, None, 0)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    failures: list[str] = []
    runner.run(test, out=failures.append)
    assert runner.failures == 0, "".join(failures)
    return doctest.TestResults(runner.failures, runner.tries)


@pytest.mark.parametrize("verb", VERBS)
def test_df_dp_examples_run(verb):
    function = getattr(pd.DataFrame.dp, verb)
    assert run_examples(f"df.dp.{verb}", function.__doc__).attempted >= 3


@pytest.mark.parametrize("verb", VERBS)
def test_spark_function_examples_run(verb):
    pytest.importorskip("pyspark")  # the examples build queries: no session starts
    from dp_pipeline import spark

    function = getattr(spark, f"dp_{verb}")
    assert run_examples(f"dp_{verb}", function.__doc__).attempted >= 3


@pytest.mark.parametrize(
    "function",
    [
        dp_pipeline.PrivacyAccountant,
        accounting.discrete_gaussian_rho,
        accounting.calibrate_discrete_laplace,
        accounting.margin_of_error,
    ],
    ids=lambda function: function.__name__,
)
def test_accounting_examples_run(function):
    assert run_examples(function.__name__, function.__doc__).attempted >= 2


def test_a_wrong_example_fails():
    with pytest.raises(AssertionError, match=r"Expected:\s+3\s+Got:\s+2"):
        run_examples("wrong", ">>> 1 + 1\n3\n")
