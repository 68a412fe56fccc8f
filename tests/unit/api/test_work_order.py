"""The order in which the workers get the tests (tests/support/work_order.py): the measured
slowest modules first, then the other process-starting tests, then the rest; a module
sharing a fixture is one unit of work unless it is one of the few split ones."""

from __future__ import annotations

from pathlib import Path

from work_order import SLOWEST, SPLIT, in_start_order, work_unit

ROOT = next(p for p in Path(__file__).resolve().parents if p.name == "tests").parent


def test_the_slowest_modules_start_first_then_system_tests_each_in_collection_order():
    ids = [
        "tests/unit/a.py::test_one",
        "tests/unit/b.py::test_spawns",
        f"{SLOWEST[1]}::test_x",
        "tests/unit/a.py::test_two",
        f"{SLOWEST[0]}::test_y",
        f"{SLOWEST[1]}::test_z",
    ]
    system = [False, True, True, False, True, True]
    order = [ids[i] for i in in_start_order(ids, system)]
    assert order == [
        f"{SLOWEST[0]}::test_y",
        f"{SLOWEST[1]}::test_x",
        f"{SLOWEST[1]}::test_z",
        "tests/unit/b.py::test_spawns",
        "tests/unit/a.py::test_one",
        "tests/unit/a.py::test_two",
    ]


def test_a_module_sharing_a_fixture_is_one_unit_unless_it_is_split():
    def shares(module: str) -> bool:
        return module != "tests/unit/a.py"

    assert work_unit("tests/unit/a.py::test_one", shares) == "tests/unit/a.py::test_one"
    assert work_unit("tests/unit/c.py::test_one[x]", shares) == "tests/unit/c.py"
    (split,) = sorted(SPLIT)[:1]
    assert work_unit(f"{split}::test_one", shares) == f"{split}::test_one"


def test_every_listed_module_exists_and_a_split_module_starts_early():
    """A renamed module would silently start late: the list names existing files, and a
    split module is among the slowest (its tests then go out together, so each worker
    runs its share in one stretch and builds the module's fixture once)."""
    missing = [module for module in SLOWEST if not (ROOT / module).is_file()]
    assert missing == []
    assert len(set(SLOWEST)) == len(SLOWEST)
    assert SPLIT.issubset(SLOWEST)
