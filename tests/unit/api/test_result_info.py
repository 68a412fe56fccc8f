"""A df.dp result saves safely: the exact diagnostics stay in memory, on the result itself.

``to_parquet`` writes the noisy table with the public summary as Parquet metadata;
``copy``, ``deepcopy``, frames derived by pandas operations, ``concat``, ``to_pickle``
and ``pickle.dumps`` keep what was spent without the diagnostics.
"""

from __future__ import annotations

import copy
import json
import pickle

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

import dp_pipeline  # noqa: F401  (registers df.dp)
from dp_pipeline import DiscreteGaussian, MasterKey
from dp_pipeline.query.cost import ReleaseInfo
from dp_pipeline.query.result_info import ResultInfo
from dp_pipeline.selection.info import SelectionInfo

KEY = MasterKey(bytes(range(3, 35)))
COMMON = dict(key=KEY, release_id="save", privacy_unit="person")


def people() -> pd.DataFrame:
    rng = np.random.default_rng(8)  # test data only
    return pd.DataFrame(
        {
            "person": rng.integers(0, 300, 1000),
            "age": rng.integers(0, 90, 1000),
            "county": rng.choice([1, 2, 3], 1000),
        }
    )


def results() -> dict[str, pd.DataFrame]:
    df = people()
    cells = dict(by="county", domains={"county": [1, 2, 3]}, noise=DiscreteGaussian(4))
    return {
        "count": df.dp.count(**cells, table="c", **COMMON),
        "mean": df.dp.mean("age", bounds=(0, 99), **cells, table="m", **COMMON),
        "median": df.dp.median(
            "age",
            bounds=(0, 99),
            granularity=1,
            epsilon=1,
            by="county",
            domains={"county": [1, 2, 3]},
            table="q",
            **COMMON,
        ),
        "top_k": df.dp.top_k("county", 2, candidates=[1, 2, 3], epsilon=1, table="t", **COMMON),
    }


RESULTS = results()


def exact_free(payload: bytes) -> bool:
    """No trace of the diagnostics (their class or fields) in serialized bytes."""
    return b"Diagnostics" not in payload and b"rows_used" not in payload


@pytest.mark.parametrize("name", list(RESULTS))
def test_in_memory_the_result_shows_its_cost_and_diagnostics(name):
    result = RESULTS[name]
    shown = result.attrs["dp"]
    assert isinstance(shown, ResultInfo)
    assert isinstance(shown.info, ReleaseInfo | SelectionInfo)
    assert shown.diagnostics.rows_in == 1000  # in memory, for the notebook user
    assert result.dp.info is shown.info and result.dp.info.diagnostics is not None
    assert dict(shown) == shown.info.public_summary()
    assert "rows_in" not in repr(shown) and "Diagnostics" not in repr(result.attrs)


@pytest.mark.parametrize("name", list(RESULTS))
def test_to_parquet_writes_the_noisy_table_and_the_public_summary(name, tmp_path):
    result = RESULTS[name]
    path = tmp_path / f"{name}.parquet"
    result.to_parquet(path)  # raised TypeError (ReleaseInfo is not JSON serializable)
    assert exact_free(path.read_bytes())
    back = pd.read_parquet(path)
    pd.testing.assert_frame_equal(back, result)
    assert back.attrs == {"dp": json.loads(json.dumps(result.attrs["dp"].public_summary()))}
    metadata = json.loads(pq.read_schema(path).metadata[b"pandas"])
    assert metadata["attributes"]["dp"]["epsilon"] == str(result.attrs["dp"].epsilon)


@pytest.mark.parametrize("name", list(RESULTS))
def test_pickles_keep_the_cost_without_the_diagnostics(name, tmp_path):
    result = RESULTS[name]
    payload = pickle.dumps(result)
    assert exact_free(payload)
    restored = pickle.loads(payload)
    pd.testing.assert_frame_equal(restored, result)
    assert restored.attrs["dp"].diagnostics is None
    assert restored.attrs["dp"].epsilon == result.attrs["dp"].epsilon
    assert restored.dp.margin_of_error == result.dp.margin_of_error
    path = tmp_path / "result.pkl"
    result.to_pickle(path)  # kept the diagnostics in attrs
    assert exact_free(path.read_bytes())
    assert pd.read_pickle(path).attrs["dp"].diagnostics is None
    assert exact_free(pickle.dumps(result.attrs["dp"]))
    assert result.attrs["dp"].diagnostics is not None  # the original keeps them


@pytest.mark.parametrize("name", list(RESULTS))
@pytest.mark.parametrize(
    "derive",
    [
        lambda frame: frame.copy(),
        lambda frame: frame.copy(deep=False),
        copy.copy,
        copy.deepcopy,
        lambda frame: frame.head(2),
        lambda frame: frame.iloc[::-1],
        lambda frame: frame.iloc[:, -1],
        lambda frame: pd.concat([frame, frame]),
        lambda frame: frame.assign(extra=1),
    ],
)
def test_copies_and_derived_frames_drop_the_diagnostics(name, derive):
    result = RESULTS[name]
    derived = derive(result)
    shown = derived.attrs.get("dp")
    assert shown is not None and shown.diagnostics is None
    assert shown.epsilon == result.attrs["dp"].epsilon and dict(shown) == dict(result.attrs["dp"])
    assert exact_free(pickle.dumps(derived))
    assert result.attrs["dp"].diagnostics is not None


def test_a_result_read_back_still_answers_dp_info():
    result = RESULTS["count"]
    restored = pickle.loads(pickle.dumps(result))
    assert restored.dp.info == result.dp.info.with_diagnostics(None)
    with pytest.raises(ValueError, match="carries no attrs"):
        _ = pd.DataFrame().dp.info
