"""Tables grouped by keys selected from the data, end to end through `run_release`.

The published tables hold exactly the keys the selection core releases on the same
rows with the release's key material (pandas and Spark, byte for byte); the reports
show the threshold and the keys kept, never how many keys the data had; null keys are
invalid rows; a column of another type is refused before anything is reserved; a
selection that releases nothing publishes empty tables.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from release_specs import operator_paths

from dp_pipeline.datasets.payments import payments_frame
from dp_pipeline.keyselect import select_keys
from dp_pipeline.randomness import MasterKey
from dp_pipeline.release.ledger.store import Ledger
from dp_pipeline.release.plan.key_selections import selection_plans
from dp_pipeline.release.run import Progress, read_release, run_release
from dp_pipeline.release.spec.load import load_spec
from dp_pipeline.release.spec.model import SpecError
from dp_pipeline.release.tables.selected_keys import selection_materials

QUIET = Progress(quiet=True)
KEY_HEX = "57af74b97b8dca150c88eab838b51b745293770fb15167e0b7f938bd350df2e2"

SPEC = """
[release]
id = "payments-1"
noise = "{noise}"
noise_partitions = 3

[population]
name = "payers"
cap = {{ epsilon = 8, delta = 1e-7 }}

[privacy_unit]
column = "payer_id"
max_cells_per_table = 2
max_per_cell = 2

[budget]
epsilon = 2
delta = 1e-8

[input]
path = "{input}"

[output]
dir = "{tmp}/out"

[run]
engine = "{engine}"
master = "local[2]"
ledger = "{tmp}/ledger.sqlite"
key_file = "{tmp}/master.key"

[domains]
merchant = "from_data"
channel = ["web", "shop", "app"]

[key_selection.merchant]
type = "{kind}"
max_cells = 2
share = "1/4"

[[tables]]
name = "payments_by_merchant"
keys = ["merchant"]
share = "3/8"

[[tables]]
name = "amount_by_merchant_channel"
keys = ["merchant", "channel"]
statistic = "sum"
value = "amount"
lower = 0
upper = 500
share = "3/8"
"""


@pytest.fixture(autouse=True)
def fixed_key(monkeypatch):
    monkeypatch.setenv("DP_PIPELINE_MASTER_KEY", KEY_HEX)


def payments(folder: Path, frame: pd.DataFrame | None = None, name="payments.csv") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    frame = payments_frame(3000, seed=7) if frame is None else frame
    if name.endswith(".csv"):
        frame.to_csv(path, index=False)
    else:
        frame.to_parquet(path, index=False)
    return path


def release(tmp_path, input_path, *, engine="pandas", spark=None, kind="string", **format):
    folder = tmp_path / engine
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "spec.toml"
    values = {"noise": "discrete_gaussian", **format}
    path.write_text(SPEC.format(input=input_path, tmp=folder, engine=engine, kind=kind, **values))
    spec = load_spec(path, **operator_paths(folder))
    return spec, run_release(spec, progress=QUIET, spark=spark)


def expected_keys(spec, result, frame: pd.DataFrame) -> list:
    """What the selection core releases on these rows with the release's key material."""
    master = MasterKey(bytes.fromhex(KEY_HEX))
    digest = result.report["release_digest"]
    key, salt = selection_materials(spec, master, digest, "merchant")
    plan = selection_plans(result.plan)[0].selection
    chosen = select_keys(
        frame, key="merchant", privacy_unit="payer_id", plan=plan, selection_key=key, salt=salt
    )
    return sorted(chosen.keys.tolist())


def test_tables_hold_exactly_the_released_keys(tmp_path):
    frame = payments_frame(3000, seed=7)
    spec, result = release(tmp_path, payments(tmp_path / "data", frame))
    tables = read_release(result.output)
    keys = expected_keys(spec, result, frame)
    assert 3 <= len(keys) < frame["merchant"].nunique()  # some kept, most not
    counts = tables["payments_by_merchant"]
    assert counts["merchant"].tolist() == keys
    sums = tables["amount_by_merchant_channel"]
    assert sums[["merchant", "channel"]].values.tolist() == [
        [merchant, channel] for merchant in keys for channel in ("web", "shop", "app")
    ]
    # Popular merchants are counted: between their distinct payers and their payments
    # (at most 2 per payer and merchant are kept), give or take the noise (margin ±tens).
    kept = frame[frame["merchant"].isin(keys)].groupby("merchant")
    value = counts.set_index("merchant")["value"]
    assert (value >= kept["payer_id"].nunique() - 100).all()
    assert (value <= kept.size() + 100).all()

    report = json.loads((result.output / "privacy_report.json").read_text())
    (entry,) = report["key_selections"]
    threshold = selection_plans(result.plan)[0].selection.threshold
    assert entry["keys_kept"] == len(keys) and entry["threshold"] == threshold
    assert {t["name"]: t["cells"] for t in report["tables"]} == {
        "payments_by_merchant": len(keys),
        "amount_by_merchant_channel": 3 * len(keys),
    }
    # How many merchants the data had appears nowhere.
    candidates = str(frame["merchant"].nunique())
    html = (result.output / "report.html").read_text()
    assert "Keys selected from the data" in html
    assert f"<td>merchant</td><td>{len(keys)}</td><td>{threshold}</td>" in html
    for text in (json.dumps(report), html):
        assert f" {candidates} " not in text and f">{candidates}<" not in text
    # The ledger holds the selection's event, composed with the tables'.
    (recorded,) = Ledger(spec.ledger_path).history()
    kinds = [event["mechanism"]["type"] for event in recorded.accountant["events"]]
    assert kinds.count("key_selection") == 1 and len(kinds) == 3


def test_null_keys_are_invalid_rows_never_a_key(tmp_path):
    frame = payments_frame(3000, seed=7)
    top = frame["merchant"].value_counts().index[0]
    frame.loc[frame["merchant"] == top, "merchant"] = None  # the most paid merchant, blanked
    frame = pd.concat(
        [
            frame,
            pd.DataFrame(
                {
                    "payer_id": ["z"] * 3,
                    "merchant": [""] * 3,
                    "channel": ["web"] * 3,
                    "amount": [5] * 3,
                }
            ),
        ]
    )
    spec, result = release(tmp_path, payments(tmp_path / "data", frame))
    released = read_release(result.output)["payments_by_merchant"]["merchant"]
    assert released.notna().all() and "" not in set(released) and top not in set(released)
    assert released.tolist() == expected_keys(spec, result, frame.dropna(subset=["merchant"]))


def test_selection_that_releases_nothing_publishes_empty_tables(tmp_path):
    rows = 400  # every merchant paid by one payer: far below any threshold
    frame = pd.DataFrame(
        {
            "payer_id": [f"p{i}" for i in range(rows)],
            "merchant": [f"m{i}" for i in range(rows)],
            "channel": ["web"] * rows,
            "amount": np.arange(rows),
        }
    )
    _, result = release(tmp_path, payments(tmp_path / "data", frame))
    tables = read_release(result.output)
    assert tables["payments_by_merchant"].empty
    assert list(tables["amount_by_merchant_channel"].columns) == ["merchant", "channel", "value"]
    report = json.loads((result.output / "privacy_report.json").read_text())
    assert report["key_selections"][0]["keys_kept"] == 0


def test_key_column_of_another_type_is_refused_before_reserving(tmp_path):
    frame = payments_frame(500, seed=3)
    frame["merchant"] = np.linspace(0.5, 9.5, len(frame))  # floats where strings are declared
    path = payments(tmp_path / "data", frame, name="payments.parquet")
    with pytest.raises(SpecError) as caught:
        release(tmp_path, path)
    assert caught.value.problems == [
        "column 'merchant' has type double; as the spec's string key it must have a string type"
    ]
    assert (
        not Path(tmp_path / "pandas" / "ledger.sqlite").exists()
        or not Ledger(tmp_path / "pandas" / "ledger.sqlite").history()
    )


def test_integer_keys_selected_from_parquet(tmp_path):
    frame = payments_frame(3000, seed=7)
    frame["merchant"] = frame["merchant"].str[1:].astype(np.int64)
    path = payments(tmp_path / "data", frame, name="payments.parquet")
    spec, result = release(tmp_path, path, kind="integer")
    released = read_release(result.output)["payments_by_merchant"]
    assert released["merchant"].dtype == np.int64
    assert released["merchant"].tolist() == expected_keys(spec, result, frame)


@pytest.mark.parametrize("kind", ["string", "integer"])
def test_spark_publishes_the_same_bytes_as_pandas(tmp_path, spark, monkeypatch, kind):
    frame = payments_frame(3000, seed=7)
    if kind == "integer":
        frame["merchant"] = frame["merchant"].str[1:].astype(np.int64)
    path = payments(tmp_path / "data", frame, name="payments.parquet")
    _, expected = release(tmp_path, path, kind=kind)
    monkeypatch.setenv("DP_PIPELINE_HOME", str(tmp_path / "spark-home"))  # its own ledger's
    monkeypatch.setenv("HOME", str(Path(tmp_path / "spark-home") / "user"))  # a user of its own
    _, result = release(tmp_path, path, engine="spark", spark=spark, kind=kind)
    for name in ("payments_by_merchant", "amount_by_merchant_channel"):
        published = (result.output / f"{name}.parquet").read_bytes()
        assert published == (expected.output / f"{name}.parquet").read_bytes()
    assert len(read_release(result.output)["payments_by_merchant"]) >= 3


CENSUS = """
[release]
id = "counties-1"
noise_partitions = 2

[population]
name = "people"
cap = {{ epsilon = 8, delta = 1e-7 }}

[privacy_unit]
column = "person_id"

[budget]
epsilon = 4
delta = 1e-8

[input]
synthetic_persons = 20000

[output]
dir = "{tmp}/out"

[run]
engine = "pandas"
ledger = "{tmp}/ledger.sqlite"
key_file = "{tmp}/master.key"

[domains]
county = "from_data"
sex = ["F", "M"]

[key_selection.county]
type = "integer"
share = "1/2"

[[tables]]
name = "county_sex"
keys = ["county", "sex"]
share = "1/2"
"""


def test_synthetic_release_reports_kept_keys_with_its_accuracy(tmp_path):
    """Synthetic input: the truth is compared on the kept counties only, and accuracy.json
    carries the threshold and the keys kept (the persons bound the units per key)."""
    path = tmp_path / "spec.toml"
    path.write_text(CENSUS.format(tmp=tmp_path))
    spec = load_spec(path, **operator_paths(tmp_path))
    result = run_release(spec, progress=QUIET)
    table = read_release(result.output)["county_sex"]
    kept = selection_plans(result.plan)[0].kept
    assert kept >= 3 and len(table) == 2 * kept
    assert table["county"].dtype == np.int64 and table["county"].is_monotonic_increasing
    accuracy = json.loads((result.output / "accuracy.json").read_text())
    (row,) = accuracy["accuracy_vs_truth"]
    assert row["table"] == "county_sex" and row["cells"] == 2 * kept
    assert row["within_margin"] >= 0.8
    (entry,) = accuracy["key_selections"]
    assert entry["keys_kept"] == kept
    assert entry["threshold"] == selection_plans(result.plan)[0].selection.threshold


def test_each_row_its_own_unit_selects_by_rows(tmp_path):
    """privacy_unit.each_row: a key's count is its rows (each row one unit, one key)."""
    frame = payments_frame(3000, seed=7).drop(columns="payer_id")
    path = payments(tmp_path / "data", frame)
    folder = tmp_path / "rows"
    folder.mkdir()
    text = SPEC.format(
        input=path, tmp=folder, engine="pandas", kind="string", noise="discrete_gaussian"
    )
    text = text.replace(
        'column = "payer_id"\nmax_cells_per_table = 2\nmax_per_cell = 2', "each_row = true"
    ).replace("max_cells = 2\nshare", "share")
    (folder / "spec.toml").write_text(text)
    spec = load_spec(folder / "spec.toml", **operator_paths(folder))
    result = run_release(spec, progress=QUIET)
    released = read_release(result.output)["payments_by_merchant"]
    master = MasterKey(bytes.fromhex(KEY_HEX))
    key, salt = selection_materials(spec, master, result.report["release_digest"], "merchant")
    rows = frame.assign(row=np.arange(len(frame)))
    plan = selection_plans(result.plan)[0].selection
    expected = select_keys(
        rows, key="merchant", privacy_unit="row", plan=plan, selection_key=key, salt=salt
    )
    assert released["merchant"].tolist() == sorted(expected.keys.tolist())
    assert len(released) >= 3


def test_spark_csv_input_and_an_empty_selection_publish_pandas_bytes(tmp_path, spark, monkeypatch):
    """A CSV input typed by Spark SQL, where no merchant clears the threshold: the same
    empty tables, byte for byte."""
    rows = 400
    frame = pd.DataFrame(
        {
            "payer_id": [f"p{i}" for i in range(rows)],
            "merchant": [f"m{i % 200}" for i in range(rows)],
            "channel": ["web", "app"] * (rows // 2),
            "amount": np.arange(rows),
        }
    )
    path = payments(tmp_path / "data", frame)
    _, expected = release(tmp_path, path)
    monkeypatch.setenv("DP_PIPELINE_HOME", str(tmp_path / "spark-home"))  # its own ledger's
    monkeypatch.setenv("HOME", str(Path(tmp_path / "spark-home") / "user"))  # a user of its own
    _, result = release(tmp_path, path, engine="spark", spark=spark)
    assert selection_plans(result.plan)[0].kept == 0
    for name in ("payments_by_merchant", "amount_by_merchant_channel"):
        published = (result.output / f"{name}.parquet").read_bytes()
        assert published == (expected.output / f"{name}.parquet").read_bytes()


def test_spark_synthetic_release_equals_pandas_with_its_truth(tmp_path, spark, monkeypatch):
    """Synthetic input on the Spark pass: the same table bytes and accuracy.json."""
    outputs = {}
    for engine in ("pandas", "spark"):
        folder = tmp_path / engine
        folder.mkdir()
        monkeypatch.setenv("DP_PIPELINE_HOME", str(folder / "home"))  # one ledger per home
        monkeypatch.setenv("HOME", str(Path(folder / "home") / "user"))  # a user of its own
        (folder / "spec.toml").write_text(
            CENSUS.format(tmp=folder).replace('engine = "pandas"', f'engine = "{engine}"')
        )
        spec = load_spec(folder / "spec.toml", **operator_paths(folder))
        outputs[engine] = run_release(spec, progress=QUIET, spark=spark).output
    for name in ("county_sex.parquet", "accuracy.json"):
        assert (outputs["spark"] / name).read_bytes() == (outputs["pandas"] / name).read_bytes()
