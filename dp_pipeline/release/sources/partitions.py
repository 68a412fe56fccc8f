"""A Parquet folder's ``name=value`` partition folders: the columns they add, and their types.

Spark and pyarrow read a folder ``year=2020/`` as a column ``year`` whose type
each infers from every folder's value: integers give an integer column, any
other value turns the whole column into text (pyarrow) or another inferred type
(Spark). A folder ``year=abc/`` beside ``year=2020/`` therefore changes the type
of a column the spec uses as an integer key, and the engines would refuse it only
after reading, with the budget reserved. `partition_problems` finds that before
the reservation from the folder names alone (no file is opened) and describes it
by the declared column and the rule, never by a folder's value: the values are
the data's own text.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import PurePath

__all__ = ["HIVE_NULL", "partition_columns", "partition_problems", "partition_values"]

# The folder value both readers read as null.
HIVE_NULL = "__HIVE_DEFAULT_PARTITION__"
_INTEGER = re.compile(r"[+-]?[0-9]+")


def partition_values(root: PurePath, file: PurePath) -> dict[str, str]:
    """The ``name=value`` folders between ``root`` and ``file``: name -> value."""
    try:
        relative = file.parent.relative_to(root)
    except ValueError:
        return {}
    return dict(part.split("=", 1) for part in relative.parts if "=" in part)


def partition_columns(root: PurePath, file: PurePath) -> set[str]:
    """The columns ``file``'s partition folders under ``root`` add (their names)."""
    return set(partition_values(root, file))


def partition_problems(
    root: PurePath, files: Sequence[PurePath], integers: Sequence[str]
) -> list[str]:
    """One line per declared column in ``integers`` (an integer key or a summed column) that
    comes from partition folders whose values are not all integers (or the null folder);
    names the column and the rule, never a folder's value."""
    problems = []
    for name in integers:
        values = {partition_values(root, file).get(name) for file in files} - {None, HIVE_NULL}
        if any(not _INTEGER.fullmatch(value) for value in values):
            problems.append(
                f"column {name!r} comes from its {name}=... partition folders, whose values "
                "are not all integers (the readers would infer conflicting types, or text); "
                "as the spec uses it, every folder's value must be an integer: rename or "
                "move the other folders"
            )
    return problems
