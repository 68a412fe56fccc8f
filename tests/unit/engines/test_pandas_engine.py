"""The pandas engine's own input checks: column presence and dtypes, the empty frame.

Bounding, dropped rows, domain completion and noise are the engine contract
(tests/contract/test_engine_contract.py), run on every engine path.
"""

from __future__ import annotations

import pandas as pd
import pytest
from engine_queries import make_spec

from dp_pipeline.engines.pandas.aggregate import run_pandas


@pytest.mark.parametrize(
    ("df", "statistic", "error", "message"),
    [
        (
            pd.DataFrame({"state": ["0"], "sex": ["f"]}),
            "count",
            TypeError,
            # object on pandas 2, str on pandas 3
            f"key column 'state' has dtype {pd.Series(['0']).dtype} but its domain holds "
            "integers; it must have an integer dtype (or a float dtype holding integers and NaN)",
        ),
        (
            pd.DataFrame({"state": [0], "sex": [1]}),
            "count",
            TypeError,
            "key column 'sex' has dtype int64 but its domain holds strings",
        ),
        (
            pd.DataFrame({"state": [0], "gender": ["f"]}),
            "count",
            ValueError,
            "key column 'sex' is not in the DataFrame",
        ),
        (
            pd.DataFrame({"state": [0], "sex": ["f"], "income": ["a"]}),
            "sum",
            TypeError,
            "summed column 'income' has dtype",
        ),
        (
            pd.DataFrame({"state": [0], "sex": ["f"]}),
            "sum",
            ValueError,
            "summed column 'income' is not in the DataFrame",
        ),
    ],
)
def test_bad_columns_and_dtypes(df, statistic, error, message):
    with pytest.raises(error) as info:
        run_pandas(df, make_spec(statistic))
    assert message in str(info.value)


def test_empty_dataframe_releases_every_cell_with_noise_only():
    df = pd.DataFrame({"state": pd.array([], dtype="Int64"), "sex": pd.Series([], dtype=object)})
    out, diagnostics = run_pandas(df, make_spec())
    assert len(out) == 8
    assert diagnostics.rows_in == 0 and diagnostics.rows_used == 0


def test_the_backend_returns_dense_cell_aggregates_that_keep_their_values_out_of_reprs():
    from dp_pipeline.engines.backend import CellAggregates, aggregate

    df = pd.DataFrame({"state": [1, 1, 3], "sex": ["m", "m", "f"], "income": [5.0, 7.0, 1.0]})
    count, total = make_spec(), make_spec("sum")
    results = aggregate(df, [count, total])
    assert all(isinstance(result, CellAggregates) for result in results)
    assert results[0].count.tolist() == [0, 0, 0, 2, 0, 0, 1, 0] and results[0].sum is None
    assert results[1].sum.tolist() == [0, 0, 0, 12, 0, 0, 1, 0]
    assert results[1].diagnostics.rows_used == 3
    assert repr(results[1]) == "CellAggregates(8 cells, sum=True)"
    with pytest.raises(ValueError, match="derived columns are for Spark inputs"):
        aggregate(df, [count], derived={"x": None})
