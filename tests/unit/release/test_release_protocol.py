"""The release protocol's one module: its states, allowed moves and crash points."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from dp_pipeline.errors import LedgerError
from dp_pipeline.release.protocol import (
    FORWARD,
    HELD,
    TRANSITIONS,
    Checkpoint,
    State,
    check_move,
    may_abort,
    row_state,
)

MUST_READ = "it must be reading before it is noised"
ONLY_NOISED = "only a noised release can be published"
PACKAGE = Path(__file__).resolve().parents[3] / "dp_pipeline"


def test_aborted_is_reachable_from_reserved_only():
    assert [s for s in State if State.ABORTED in TRANSITIONS[s]] == [State.RESERVED]
    assert [s for s in State if may_abort(s)] == [State.RESERVED]
    assert TRANSITIONS[State.COMMITTED] == TRANSITIONS[State.ABORTED] == frozenset()


def test_a_run_holds_the_states_that_are_neither_final_nor_refused():
    assert State.COMMITTED not in HELD and State.REFUSED not in HELD
    assert set(FORWARD) - {State.COMMITTED} == HELD


def test_no_move_leads_back_to_a_state_before_reading():
    # Once data may have been read, no move returns the row to where its spend could go back.
    for state in State:
        if state not in (State.PLANNED, State.RESERVED):
            assert not TRANSITIONS[state] & {State.PLANNED, State.RESERVED, State.ABORTED}


@pytest.mark.parametrize(
    ("current", "to", "written"),
    [
        ("reserved", "reading", True),
        ("reading", "noised", True),
        ("noised", "publishing", True),
        ("publishing", "publishing", True),  # a resumed run re-records the same bytes
        ("publishing", "committed", True),
        ("noised", "reading", False),  # a resumed run repeating a step changes nothing
        ("publishing", "noised", False),
        ("committed", "committed", False),
        ("reading", "refused", True),
        ("noised", "refused", True),
        ("refused", "reading", True),  # a re-run of a refused id reads again
    ],
)
def test_allowed_moves_are_written_or_left_in_place(current, to, written):
    assert check_move(current, to, "r-1") is written


@pytest.mark.parametrize(
    ("current", "to", "message"),
    [
        ("reserved", "noised", "release id 'r-1' is reserved; " + MUST_READ),
        ("reading", "publishing", "release id 'r-1' is reading; " + ONLY_NOISED),
        ("refused", "publishing", "release id 'r-1' is refused; " + ONLY_NOISED),
        (
            "noised",
            "committed",
            "release id 'r-1' is noised; only a release whose publication was recorded "
            "(mark_publishing) can be committed",
        ),
        ("reserved", "refused", "release id 'r-1' is reserved"),
        ("publishing", "refused", "release id 'r-1' is publishing"),
    ],
)
def test_a_refused_move_names_the_state_and_the_rule(current, to, message):
    with pytest.raises(LedgerError) as caught:
        check_move(current, to, "r-1")
    assert str(caught.value) == message


def test_a_result_is_returned_only_from_reading():
    assert check_move("reading", "committed", "q-1", returned=True)
    with pytest.raises(LedgerError, match=r"is noised; only a release that is reading can hand"):
        check_move("noised", "committed", "q-1", returned=True)


def test_rows_older_than_the_state_column_get_their_most_charged_state():
    row = {"state": None, "status": "reserved", "published_at": None}
    assert row_state(row) == "reading"
    assert row_state({**row, "published_at": "2020-01-01T00:00:00"}) == "publishing"
    assert row_state({**row, "status": "committed"}) == "committed"
    assert row_state({**row, "state": "noised"}) == "noised"
    assert FORWARD[0] == State.RESERVED and FORWARD[-1] == State.COMMITTED


def _checkpoints_called() -> set[str]:
    """Every ``Checkpoint.X`` the package passes to a checkpoint call."""
    found = set()
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Call)
                and getattr(node.func, "attr", getattr(node.func, "id", None)) == "checkpoint"
                and node.args
                and isinstance(node.args[0], ast.Attribute)
                and getattr(node.args[0].value, "id", None) == "Checkpoint"
            ):
                found.add(node.args[0].attr)
    return found


def test_every_crash_point_is_named_once_and_each_name_is_passed():
    assert _checkpoints_called() == {point.name for point in Checkpoint}


def test_the_package_has_one_checkpoint_function():
    defined = [
        path.relative_to(PACKAGE).as_posix()
        for path in PACKAGE.rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.FunctionDef) and node.name in ("checkpoint", "_checkpoint")
    ]
    assert defined == ["release/protocol.py"]
