"""The ``[hierarchy]`` and ``[postprocess]`` sections of a release spec.

``[hierarchy]`` declares public geography levels (coarsest first, e.g. state
then county) and a CSV mapping file giving each value of a finer level its
parent in the next coarser level. ``[postprocess]`` turns on the pure
post-processing of `dp_pipeline.postprocess` (consistent margins across the
count tables, non-negative integers). Both are public facts, fixed before any
data is read; the mapping's content digest is part of the release identity.

Every problem is appended to the caller's list with its field and rule (see
`dp_pipeline.release.spec.load`); nothing here raises, reads data or touches a
ledger.

The mapping is declared public, and ``dp-release plan`` (which spends nothing)
reads it, so a mapping that is in fact confidential must not leak through its
errors. A mapping that is the release's input file, or lies inside its input
folder, is refused before it is opened (`mapping_is_input`). Errors about its
rows name the rule, the level's column and the spec's own domain values; they
never quote the file's text (a value outside the domain), a line number or a
decoder's message (which holds the bytes it could not read). See
docs/security_model.md.
"""

from __future__ import annotations

import csv
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dp_pipeline.digest import digest_of
from dp_pipeline.release.spec.fields import show_value

__all__ = [
    "HIERARCHY_FIELDS",
    "POSTPROCESS_FIELDS",
    "HierarchySpec",
    "PostprocessSpec",
    "check_combined_tables",
    "mapping_is_input",
    "read_hierarchy",
    "read_postprocess",
]

HIERARCHY_FIELDS = ("levels", "mapping")
POSTPROCESS_FIELDS = ("consistent", "nonnegative", "integer", "sums")
_INTEGER_TEXT = re.compile(r"^-?[0-9]+$")
_SHOWN = 5  # values quoted in one problem before "..."
# Cells of the union of the combined tables' keys (the shared bounding's row cells);
# dp_pipeline.query.domain's largest cell domain.
MAX_SHARED_CELLS = 2**40
# A mapping has one short row per finest-level value: 2**40 values is beyond any key,
# and 512 MiB holds tens of millions of rows.
MAX_MAPPING_BYTES = 512 * 2**20


@dataclass(frozen=True)
class HierarchySpec:
    """Public geography levels below the national root, coarsest first, with their parents.

    ``parents[i][j]`` is the position (0-based, in the declared domain of
    ``levels[i]``) of the parent of position ``j`` of ``levels[i + 1]``'s domain.
    ``digest`` is the SHA-256 of the mapping's canonical content (levels and
    every child -> parent pair in domain order), so the same mapping written
    differently is the same release and a changed mapping is a new one.
    """

    levels: tuple[str, ...]
    mapping: str  # the mapping file as the spec names it (relative to the spec file)
    parents: tuple[tuple[int, ...], ...]
    digest: str
    # Where the mapping was read (for `mapping_is_input`); not part of what it means.
    location: str = field(default="", compare=False)

    def __repr__(self) -> str:
        return f"HierarchySpec(levels={self.levels!r}, mapping={self.mapping!r})"


@dataclass(frozen=True)
class PostprocessSpec:
    """What the post-processing of the count tables does (pure post-processing: no privacy).

    ``consistent``: every pair of combined count tables agrees exactly on their
    common margins (weighted least squares with the exact noise variances);
    ``nonnegative`` and ``integer``: the published estimates are non-negative
    and whole, rounded top-down so that children still sum to their parent.
    ``tables``: the count tables post-processed, in spec order.
    ``sums``: the sum tables are post-processed too, ``sum_sets`` being the sets
    combined with each other: the sum tables of one value column and one pair of
    clamping bounds (each row is clamped before it is summed, so the true sums of
    children add up to their parent's); each set is solved apart from the counts
    and from other sets, non-negative only where its lower bound is.
    """

    consistent: bool
    nonnegative: bool
    integer: bool
    tables: tuple[str, ...]
    sums: bool = False
    sum_sets: tuple[tuple[str, ...], ...] = ()

    @property
    def combined(self) -> tuple[str, ...]:
        """Every post-processed table: the count tables, then each sum set's."""
        return self.tables + tuple(name for names in self.sum_sets for name in names)

    def to_dict(self) -> dict[str, Any]:
        described: dict[str, Any] = {
            "consistent": self.consistent,
            "nonnegative": self.nonnegative,
            "integer": self.integer,
            "tables": list(self.tables),
        }
        if self.sums:  # absent when off, so a spec without sums keeps its identity
            described["sums"] = True
            described["sum_sets"] = [list(names) for names in self.sum_sets]
        return described


def read_postprocess(section: dict, problems: list[str]) -> dict[str, bool] | None:
    """The flags of ``[postprocess]`` (None when absent); the table list is added later."""
    if not section:
        return None
    flags = {}
    for name in ("consistent", "nonnegative", "integer"):
        value = section.get(name, True)
        if not isinstance(value, bool):
            problems.append(f"postprocess.{name} = {show_value(value)}: must be true or false")
            value = True
        flags[name] = value
    sums = section.get("sums", False)
    if not isinstance(sums, bool):
        problems.append(f"postprocess.sums = {show_value(sums)}: must be true or false")
        sums = False
    flags["sums"] = sums
    return flags


def read_hierarchy(
    section: dict, domains: dict, base_dir: Path, problems: list[str], input_path: str = ""
) -> HierarchySpec | None:
    """``[hierarchy]``: levels with domains and a mapping file that is a function onto them.

    ``input_path``: the release's input; a mapping that is it (or inside it) is refused
    unread.
    """
    if not section:
        return None
    levels = section.get("levels")
    if (
        not isinstance(levels, list)
        or len(levels) < 2
        or not all(isinstance(level, str) for level in levels)
    ):
        problems.append(
            f"hierarchy.levels = {show_value(levels)}: must list at least two key columns, "
            'coarsest first, e.g. ["state", "county"]'
        )
        return None
    if len(set(levels)) != len(levels):
        problems.append(f"hierarchy.levels = {levels!r}: a level appears twice")
        return None
    before = len(problems)
    for level in levels:
        if level not in domains:
            problems.append(
                f"hierarchy.levels: level {level!r} has no domain; declare it under [domains] "
                "(every parent and child value must be known before reading data)"
            )
    mapping = section.get("mapping")
    if not isinstance(mapping, str) or not mapping.strip():
        problems.append(
            f"hierarchy.mapping = {show_value(mapping)}: must name a CSV file (relative to "
            "the spec file) with one column per level and one row per finest-level value"
        )
        return None
    if len(problems) > before:
        return None
    if input_path and mapping_is_input(base_dir / mapping, input_path):
        problems.append(mapping_input_problem(mapping, input_path))
        return None
    location = base_dir / mapping
    if location.exists() and not location.is_file():
        # A device or a pipe (/dev/zero) would be read without end.
        problems.append(f"hierarchy.mapping = {mapping!r}: not a regular file; name a CSV file")
        return None
    if location.is_file() and location.stat().st_size > MAX_MAPPING_BYTES:
        problems.append(
            f"hierarchy.mapping = {mapping!r}: larger than {MAX_MAPPING_BYTES // 2**20} MiB; "
            "a mapping has one short row per finest-level value"
        )
        return None
    rows = _read_mapping_rows(location, mapping, levels, problems)
    if rows is None:
        return None
    parents = _parents(rows, levels, domains, problems)
    if parents is None:
        return None
    pairs = []
    for upper, level in enumerate(parents):
        children, owners = domains[levels[upper + 1]], domains[levels[upper]]
        pairs.append([[_json(children[j]), _json(owners[p])] for j, p in enumerate(level)])
    content = {"levels": list(levels), "parents": pairs}
    absolute = str(Path(os.path.abspath(location)))
    return HierarchySpec(tuple(levels), mapping, parents, digest_of(content), absolute)


def mapping_is_input(mapping: str | os.PathLike[str], input_path: str) -> bool:
    """Whether the mapping file is the input (the same file, by any path) or inside it.

    A local input only: a URI (``s3://...``) is read by Spark, never by the spec.
    """
    if not input_path or "://" in input_path:
        return False
    mapping_path, input_root = Path(mapping), Path(input_path)
    try:
        both = mapping_path.exists() and input_root.exists()
        if both and os.path.samefile(mapping_path, input_root):  # links, hard links too
            return True
        resolved, root = mapping_path.resolve(), input_root.resolve()
    except OSError:
        return False
    return resolved == root or root in resolved.parents


def mapping_input_problem(mapping: str, input_path: str) -> str:
    return (
        f"hierarchy.mapping = {mapping!r}: is the input {input_path!r} or inside it; the "
        "mapping is public (it is read by dp-release plan, which spends no budget, and "
        "its errors describe it), so it cannot be the confidential input: give a "
        "separate CSV of the public geography (one row per finest-level value)"
    )


def _json(value: Any) -> Any:
    return value if isinstance(value, int | str) else str(value)


def _read_mapping_rows(
    path: Path, name: str, levels: list[str], problems: list[str]
) -> list[tuple[int, dict[str, str]]] | None:
    """(line number, row) of the mapping CSV, or None after a problem."""
    try:
        with path.open(newline="", encoding="utf-8") as handle:
            reader = csv.DictReader(handle)
            header = reader.fieldnames or []
            missing = [level for level in levels if level not in header]
            if missing:
                # The first line is not quoted: in a file without a header it is a row.
                problems.append(
                    f"hierarchy.mapping = {name!r}: its first line names no column "
                    f"{missing[0]!r}; the mapping's header names one column per level "
                    f"{levels!r}"
                )
                return None
            rows = [(reader.line_num, row) for row in reader]
    except FileNotFoundError:
        problems.append(f"hierarchy.mapping = {name!r}: file {str(path)!r} does not exist")
        return None
    except (OSError, UnicodeDecodeError, csv.Error) as error:
        # The error's type only: a decoder's message quotes the bytes it could not read.
        problems.append(
            f"hierarchy.mapping = {name!r}: cannot read the file as a UTF-8 CSV "
            f"({type(error).__name__})"
        )
        return None
    if not rows:
        problems.append(f"hierarchy.mapping = {name!r}: the file has no rows")
        return None
    return rows


def _parents(rows, levels, domains, problems) -> tuple[tuple[int, ...], ...] | None:
    """Each level's parent positions, checking every value and that the map is a function."""
    before = len(problems)
    positions = []  # per row: the domain position of each level's value
    for level in levels:
        domain = domains[level]
        lookup = {value: index for index, value in enumerate(domain)}
        integer = isinstance(domain, range) or isinstance(domain[0], int)
        outside = False
        column = []
        for _, row in rows:
            text = (row.get(level) or "").strip()
            value: Any = int(text) if integer and _INTEGER_TEXT.match(text) else text
            position = lookup.get(value)
            outside = outside or position is None
            column.append(position)
        if outside:
            # Neither the text nor its line: a value outside the spec's domain is the
            # file's own content (see the module docstring).
            kind = "an integer of" if integer else "one of the values of"
            problems.append(
                f"hierarchy.mapping: column {level!r} holds a value outside domains.{level}; "
                f"every value of the column must be {kind} domains.{level}, written as the "
                "domain writes it"
            )
        positions.append(column)
    if len(problems) > before:
        return None
    parents = []
    for upper in range(len(levels) - 1):
        parent_level, child_level = levels[upper], levels[upper + 1]
        child_domain, parent_domain = domains[child_level], domains[parent_level]
        parent_of: dict[int, tuple[int, int]] = {}  # child position -> (parent, row)
        conflicts = []
        for child, parent in zip(positions[upper + 1], positions[upper], strict=True):
            seen = parent_of.setdefault(child, (parent, 0))
            if seen[0] != parent:
                # The spec's domain values only (no line number): see the module docstring.
                conflicts.append(
                    f"{child_level} {child_domain[child]!r} is in {parent_level} "
                    f"{parent_domain[seen[0]]!r} and {parent_domain[parent]!r}"
                )
        if conflicts:
            problems.append(
                f"hierarchy.mapping is not a function: {_some(conflicts)}; each "
                f"{child_level} must have exactly one {parent_level}"
            )
            continue
        missing = [repr(child_domain[j]) for j in range(len(child_domain)) if j not in parent_of]
        if missing:
            problems.append(
                f"hierarchy.mapping: {child_level} value(s) {_some(missing)} of "
                f"domains.{child_level} are missing from the mapping; every {child_level} "
                f"needs its {parent_level}"
            )
            continue
        childless = sorted(set(range(len(parent_domain))) - {p for p, _ in parent_of.values()})
        if childless:
            problems.append(
                f"hierarchy.mapping: {parent_level} value(s) "
                f"{_some([repr(parent_domain[p]) for p in childless])} have no {child_level} "
                f"in the mapping; every {parent_level} needs at least one {child_level}"
            )
            continue
        parents.append(tuple(parent_of[j][0] for j in range(len(child_domain))))
    if len(problems) > before:
        return None
    return tuple(parents)


def _some(items: list[str]) -> str:
    shown = ", ".join(items[:_SHOWN])
    return shown + (f" and {len(items) - _SHOWN} more" if len(items) > _SHOWN else "")


def check_combined_tables(
    tables, domains, hierarchy, privacy_unit, problems, *, sums: bool = False
) -> tuple[tuple[str, ...], tuple[tuple[str, ...], ...]]:
    """The tables post-processing combines, after checking their margins can agree.

    Returns the count tables and (with ``sums``) the sets of sum tables combined
    with each other: one set per value column and pair of clamping bounds, since
    only sums of the same clamped values add up (each row is clamped to
    ``[lower, upper]`` before it is summed, so the true sums of a state's counties
    are the state's true sum).

    Margins of two tables can only agree on the truth when every table counts
    the same rows: one privacy unit for the release, and (with a privacy-unit
    column) one kept row per unit in every table (``max_cells = max_per_cell =
    1``), which the bounding rule then picks identically for all combined
    tables. A table keys at most one hierarchy level (its geography).
    """
    levels = set(hierarchy.levels) if hierarchy is not None else set()
    counts: list[str] = []
    sum_sets: dict[tuple, list[str]] = {}
    for index, table in enumerate(tables):
        if table.statistic == "count":
            kind = "count"
        elif sums and table.statistic == "sum":
            kind = "sum"
        else:
            continue
        path = f"tables[{index}]"
        if kind == "sum" and table.granularity is not None:
            # The solver weighs each table by its noise variance in noised units and
            # publishes raw_value as integers: both hold for whole units of the value only.
            problems.append(
                f"{path}.granularity = {table.granularity}: post-processing combines the sum "
                f"tables in whole units of the value (weighed by their noise variances in "
                f"those units, raw_value an integer column), and table {table.name!r} is "
                "noised in units of its granularity; remove its granularity or set "
                "[postprocess] sums = false"
            )
            continue
        if privacy_unit is not None:
            for name in ("max_cells", "max_per_cell"):
                if getattr(table, name) != 1:
                    problems.append(
                        f"{path}.{name} = {getattr(table, name)}: post-processing combines "
                        f"the {kind} tables, which must all keep the same single row of each "
                        f"{privacy_unit!r} (max_cells = max_per_cell = 1) so that their true "
                        f"margins agree; set 1 or remove [postprocess]"
                    )
        geography = [key for key in table.keys if key in levels]
        if len(geography) > 1:
            problems.append(
                f"{path}.keys = {list(table.keys)!r}: a combined table keys at most one "
                f"hierarchy level, it has {geography!r} (the finer one determines the coarser)"
            )
        if kind == "count":
            counts.append(table.name)
        else:
            sum_sets.setdefault((table.value, table.lower, table.upper), []).append(table.name)
    if not counts and not sum_sets:
        what = "count or sum table" if sums else "count table"
        problems.append(f"postprocess: the release has no {what} to post-process")
    combined = {*counts, *(name for names in sum_sets.values() for name in names)}
    union = {
        key: size
        for table in tables
        if table.name in combined
        for key, size in zip(table.keys, _sizes(table, domains), strict=True)
    }
    if privacy_unit is not None and math.prod(union.values()) > MAX_SHARED_CELLS:
        problems.append(
            f"postprocess: the combined tables' keys {list(union)} span "
            f"{math.prod(union.values()):,} cells, above {MAX_SHARED_CELLS:,}; the bounding "
            f"ranks each row by its cell over them, so combine fewer or coarser tables"
        )
    if not problems:  # the shapes are only worth checking in a sound spec
        if counts:
            _check_solvable(tables, counts, domains, hierarchy, problems, "the count tables")
        for (value, lower, upper), names in sum_sets.items():
            label = f"the sum tables of {value!r} clamped to [{lower}, {upper}]"
            _check_solvable(tables, names, domains, hierarchy, problems, label)
    return tuple(counts), tuple(tuple(names) for names in sum_sets.values())


def _check_solvable(tables, combined, domains, hierarchy, problems, label: str) -> None:
    """`dp_pipeline.postprocess.check_combinable` on the shapes: margins that can agree."""
    import numpy as np

    from dp_pipeline.postprocess import Hierarchy, PostprocessError, TableShape, check_combinable

    shapes = [
        TableShape(table.name, table.keys, tuple(_sizes(table, domains)))
        for table in tables
        if table.name in combined
    ]
    try:
        solved = None
        if hierarchy is not None:
            solved = Hierarchy(
                levels=hierarchy.levels,
                sizes=tuple(len(domains[level]) for level in hierarchy.levels),
                parents=tuple(np.asarray(p, dtype=np.int64) for p in hierarchy.parents),
            )
        check_combinable(shapes, solved)
    except PostprocessError as error:
        problems.append(f"postprocess: {label} cannot be combined: {error}")


def _sizes(table, domains) -> list[int]:
    return [len(domains[key]) for key in table.keys]
