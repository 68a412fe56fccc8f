"""The [hierarchy] and [postprocess] spec sections: the shipped mapping, and every refusal."""

from __future__ import annotations

import copy
from decimal import Decimal
from pathlib import Path

import numpy as np
import pytest

from dp_pipeline.datasets.synthetic import COUNTIES, STATES, census_chunk
from dp_pipeline.release.ledger.identity import release_identity
from dp_pipeline.release.spec.load import load_spec, parse_spec
from dp_pipeline.release.spec.model import SpecError

ROOT = Path(__file__).resolve().parents[4]


def test_shipped_mapping_is_the_synthetic_generators_map():
    lines = (ROOT / "conf" / "census_demo_counties.csv").read_text().splitlines()
    assert lines[0] == "county,state"
    pairs = np.array([[int(v) for v in line.split(",")] for line in lines[1:]])
    # The generator derives each person's state from the county; its map is the file's.
    chunk = census_chunk(2026, 0, 20_000)
    county = chunk.column("county").to_numpy()
    state = chunk.column("state").to_numpy()
    assert np.array_equal(pairs[:, 0], np.arange(1, COUNTIES + 1))
    assert np.array_equal(pairs[county - 1, 1], state)
    assert set(pairs[:, 1]) == set(range(1, STATES + 1))


def test_shipped_demo_enables_the_hierarchy_and_post_processing():
    spec = load_spec(ROOT / "conf" / "census_demo.toml")
    assert spec.hierarchy.levels == ("state", "county")
    parents = np.array(spec.hierarchy.parents[0])
    assert np.array_equal(parents, np.arange(COUNTIES) * STATES // COUNTIES)
    assert spec.postprocess.consistent and spec.postprocess.nonnegative
    assert spec.postprocess.integer
    # Count tables are combined; the sum table stays as released.
    assert "state_income" not in spec.postprocess.tables
    assert len(spec.postprocess.tables) == 5


def write_mapping(folder: Path, rows: list[tuple], header: str = "county,state") -> str:
    path = folder / "map.csv"
    path.write_text(header + "\n" + "".join(",".join(map(str, r)) + "\n" for r in rows))
    return path.name


GOOD_ROWS = [(1, "a"), (2, "a"), (3, "b"), (4, "b")]


def document(mapping: str | None = "map.csv") -> dict:
    result = {
        "release": {"id": "geo-1"},
        "population": {"name": "people", "cap": {"rho": 1}},
        "privacy_unit": {"column": "person_id"},
        "budget": {"rho": Decimal("0.5")},
        "domains": {
            "county": {"start": 1, "stop": 4},
            "state": ["a", "b"],
            "sex": ["F", "M"],
        },
        "hierarchy": {"levels": ["state", "county"], "mapping": mapping},
        "postprocess": {"consistent": True},
        "tables": [
            {"name": "county_sex", "keys": ["county", "sex"], "share": "1/2"},
            {"name": "state_sex", "keys": ["state", "sex"], "share": "1/4"},
            {
                "name": "state_income",
                "keys": ["state"],
                "statistic": "sum",
                "value": "income",
                "lower": 0,
                "upper": 10,
                "share": "1/4",
            },
        ],
    }
    if mapping is None:
        del result["hierarchy"]["mapping"]
    return result


def problems_of(doc: dict, folder: Path) -> str:
    with pytest.raises(SpecError) as info:
        parse_spec(doc, base_dir=folder)
    return str(info.value)


def test_a_valid_hierarchy_gives_parent_positions(tmp_path):
    write_mapping(tmp_path, GOOD_ROWS)
    spec = parse_spec(document(), base_dir=tmp_path)
    assert spec.hierarchy.parents == ((0, 0, 1, 1),)
    assert spec.postprocess.tables == ("county_sex", "state_sex")
    # The same mapping written in another order and with extra columns is the same mapping.
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "map.csv").write_text("state,name,county\nb,x,4\na,y,1\nb,z,3\na,w,2\n")
    same = parse_spec(document(), base_dir=tmp_path / "other")
    assert same.hierarchy.digest == spec.hierarchy.digest


def test_the_mapping_is_relative_to_the_spec_file(tmp_path):
    import tomllib

    write_mapping(tmp_path, GOOD_ROWS)
    text = (ROOT / "conf" / "census_demo.toml").read_text()
    text = text.replace("census_demo_counties.csv", "x.csv")
    (tmp_path / "spec.toml").write_text(text)
    with pytest.raises(SpecError, match=r"hierarchy.mapping = 'x.csv': file .* does not exist"):
        load_spec(tmp_path / "spec.toml")
    assert tomllib.loads(text)["hierarchy"]["mapping"] == "x.csv"


MAPPING_CASES = [
    (
        [*GOOD_ROWS, (2, "b")],
        "hierarchy.mapping is not a function: county 2 is in state 'a' and 'b'; each county "
        "must have exactly one state",
    ),
    (
        GOOD_ROWS[:3],
        "hierarchy.mapping: county value(s) 4 of domains.county are missing from the mapping; "
        "every county needs its state",
    ),
    (
        [*GOOD_ROWS, (9, "a")],
        "hierarchy.mapping: column 'county' holds a value outside domains.county; every "
        "value of the column must be an integer of domains.county",
    ),
    (
        [(1, "a"), (2, "a"), (3, "c"), (4, "b")],
        "hierarchy.mapping: column 'state' holds a value outside domains.state; every value "
        "of the column must be one of the values of domains.state",
    ),
    (
        [(1, "a"), (2, "a"), (3, "a"), (4, "a")],
        "hierarchy.mapping: state value(s) 'b' have no county in the mapping",
    ),
    (
        [("1.0", "a"), (2, "a"), (3, "b"), (4, "b")],
        "column 'county' holds a value outside domains.county",
    ),
]


@pytest.mark.parametrize("rows, message", MAPPING_CASES)
def test_mapping_errors_name_the_rule_and_the_column(tmp_path, rows, message):
    write_mapping(tmp_path, rows)
    assert message in problems_of(document(), tmp_path)


def test_mapping_file_missing_unreadable_or_without_the_level_columns(tmp_path):
    assert "hierarchy.mapping = 'map.csv': file" in problems_of(document(), tmp_path)
    assert "does not exist" in problems_of(document(), tmp_path)
    write_mapping(tmp_path, GOOD_ROWS, header="county,region")
    assert "hierarchy.mapping = 'map.csv': its first line names no column 'state'" in problems_of(
        document(), tmp_path
    )
    (tmp_path / "map.csv").write_bytes(b"county,state\n1,\xff\xfe\n")
    assert (
        "hierarchy.mapping = 'map.csv': cannot read the file as a UTF-8 CSV "
        "(UnicodeDecodeError)" in problems_of(document(), tmp_path)
    )
    (tmp_path / "map.csv").unlink()
    (tmp_path / "map.csv").mkdir()
    assert "hierarchy.mapping = 'map.csv': not a regular file" in problems_of(document(), tmp_path)
    assert "hierarchy.mapping = '/dev/zero': not a regular file" in problems_of(
        document(mapping="/dev/zero"), tmp_path
    )
    assert "hierarchy.mapping = None: must name a CSV file" in problems_of(
        document(mapping=None), tmp_path
    )


def mutated(tmp_path, change) -> str:
    write_mapping(tmp_path, GOOD_ROWS)
    doc = copy.deepcopy(document())
    change(doc)
    return problems_of(doc, tmp_path)


SECTION_CASES = [
    (
        lambda d: d["domains"].pop("state") and d["tables"].pop(1) and d["tables"].pop(1),
        "hierarchy.levels: level 'state' has no domain; declare it under [domains]",
    ),
    (
        lambda d: d["hierarchy"].update(levels=["county"]),
        "hierarchy.levels = ['county']: must list at least two key columns",
    ),
    (
        lambda d: d["hierarchy"].update(levels=["state", "state"]),
        "hierarchy.levels = ['state', 'state']: a level appears twice",
    ),
    (
        lambda d: d["hierarchy"].update(colour=1),
        "hierarchy.colour: unknown field; allowed fields are levels, mapping",
    ),
    (
        lambda d: d["postprocess"].update(integer="yes"),
        "postprocess.integer = 'yes': must be true or false",
    ),
    (
        lambda d: d["postprocess"].update(sums="yes"),
        "postprocess.sums = 'yes': must be true or false",
    ),
    (
        lambda d: d["postprocess"].update(sums=True) or d["tables"][2].update(max_per_cell=2),
        "tables[2].max_per_cell = 2: post-processing combines the sum tables, which must all "
        "keep the same single row of each 'person_id'",
    ),
    (
        lambda d: (
            d["postprocess"].update(sums=True)
            or d["tables"].__setitem__(slice(0, 2), [])
            or d["tables"][0].update(statistic="median", lower=0, upper=10, share=1)
        ),
        "postprocess: the release has no count or sum table to post-process",
    ),
    (
        lambda d: d.pop("postprocess"),
        "hierarchy: only post-processing uses the hierarchy; add a [postprocess] section",
    ),
    (
        lambda d: d["tables"][0].update(max_cells=2),
        "tables[0].max_cells = 2: post-processing combines the count tables, which must all "
        "keep the same single row of each 'person_id' (max_cells = max_per_cell = 1)",
    ),
    (
        lambda d: d["privacy_unit"].update(max_per_cell=3),
        "tables[1].max_per_cell = 3: post-processing combines the count tables",
    ),
    (
        lambda d: d["tables"][1].update(keys=["state", "county", "sex"]),
        "tables[1].keys = ['state', 'county', 'sex']: a combined table keys at most one "
        "hierarchy level, it has ['state', 'county']",
    ),
    (
        lambda d: d["tables"].__setitem__(slice(0, 2), []) or d["tables"][0].update(share=1),
        "postprocess: the release has no count table to post-process",
    ),
]


@pytest.mark.parametrize("change, message", SECTION_CASES, ids=[c[1][:40] for c in SECTION_CASES])
def test_section_errors_name_the_field_value_and_rule(tmp_path, change, message):
    assert message in mutated(tmp_path, change)


def test_different_contribution_bounds_with_each_row_units_are_fine(tmp_path):
    write_mapping(tmp_path, GOOD_ROWS)
    doc = document()
    doc["privacy_unit"] = {"each_row": True}
    assert parse_spec(doc, base_dir=tmp_path).postprocess.tables == ("county_sex", "state_sex")


def test_identity_names_a_changed_mapping_and_post_processing(tmp_path):
    write_mapping(tmp_path, GOOD_ROWS)
    spec = parse_spec(document(), base_dir=tmp_path)
    first = release_identity(spec, {}, "input", "key")
    write_mapping(tmp_path, [(1, "a"), (2, "b"), (3, "b"), (4, "b")])
    moved = release_identity(parse_spec(document(), base_dir=tmp_path), {}, "input", "key")
    assert moved.digest != first.digest
    assert first.differences(moved) == ["hierarchy changed"]
    doc = document()
    doc["postprocess"]["integer"] = False
    write_mapping(tmp_path, GOOD_ROWS)
    other = release_identity(parse_spec(doc, base_dir=tmp_path), {}, "input", "key")
    assert first.differences(other) == ["post-processing changed"]
    # A release without the sections keeps the identity it had before they existed.
    doc = document()
    del doc["hierarchy"], doc["postprocess"]
    plain = release_identity(parse_spec(doc), {}, "input", "key")
    assert "hierarchy" not in plain.parts and "post-processing" not in plain.parts


def test_structures_that_cannot_agree_exactly_are_refused_before_any_budget(tmp_path):
    write_mapping(tmp_path, GOOD_ROWS)
    doc = document()
    doc["domains"]["tenure"] = ["owned", "rented"]
    doc["tables"] = [
        {"name": name, "keys": keys, "share": "1/4"}
        for name, keys in (
            ("sex_tenure", ["sex", "tenure"]),
            ("state_sex", ["state", "sex"]),
            ("state_tenure", ["state", "tenure"]),
            ("state_sex_tenure", ["state", "sex", "tenure"]),
        )
    ]
    message = problems_of(doc, tmp_path)
    assert "postprocess: the count tables cannot be combined: table 'state_sex_tenure'" in message
    assert "3 fixed margins that are not nested" in message
