"""``result.dp.info`` is one short line in a notebook (ε rounded up at its δ, the margins,
the unit), never the diagnostics; ``details()`` lists every field."""

from __future__ import annotations

import pandas as pd

import dp_pipeline  # noqa: F401  (registers df.dp)
from dp_pipeline import DiscreteGaussian, MasterKey

PEOPLE = pd.DataFrame({"person_id": [1, 1, 2, 3], "sex": ["F", "F", "M", "F"], "age": [3, 4, 5, 6]})
KEY = MasterKey(bytes(range(32)))


def test_a_count_s_info_is_one_line_with_a_valid_pair_and_no_diagnostics():
    counts = PEOPLE.dp.count(
        by="sex",
        domains={"sex": ["F", "M"]},
        noise=DiscreteGaussian(4),
        key=KEY,
        release_id="r",
        table="t",
        privacy_unit="person_id",
    )
    info = counts.dp.info
    line = repr(info)
    assert "\n" not in line and len(line) < 160
    # ε 2.2757932... rounded UP to three digits, at the exact δ it holds at.
    assert line == (
        "<ReleaseInfo count: count: discrete_gaussian; margin count ±4; ε ≤ 2.28 at "
        "δ = 1e-6; unit person_id; .details() for all>"
    )
    assert "rows_in" not in line and "Diagnostics" not in line
    details = info.details()
    assert details.splitlines()[0] == "ReleaseInfo:"
    assert "rows_in=4" in details and "epsilon = 2.275793208324151" in details


def test_a_median_s_info_is_one_line_with_its_pure_epsilon():
    medians = PEOPLE.dp.median(
        "age",
        bounds=(0, 10),
        granularity=1,
        epsilon=1,
        key=KEY,
        release_id="m",
        table="t",
        privacy_unit="person_id",
    )
    line = repr(medians.dp.info)
    assert line.startswith("<SelectionInfo median: base2_exponential; margin ±")
    assert "ε ≤ " in line and "(pure)" in line and line.endswith(".details() for all>")
