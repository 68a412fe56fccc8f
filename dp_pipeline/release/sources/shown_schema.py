"""What a message about an input's schema may show: the spec's names, counts and rules.

A spec is hostile input and names the file it reads, so a message built from a
file's first line or footer would hand its author the file's content: the
master key named as a CSV input, ``/proc/self/environ``, the first record of a
confidential CSV without a header, a Parquet column named after a secret. The
messages here name the file (as the caller shows it), the columns *the spec
declared*, counts (a header's field count) and types of declared columns (a
primitive type's name, or its family: never a nested type's field names or a
time zone, which are text of the file). A name read from the file that the spec
did not declare is never shown.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import pyarrow as pa

from dp_pipeline.release.spec.model import SpecError

__all__ = [
    "MALFORMED_COLUMN",
    "check_header",
    "header_difference",
    "missing_columns",
    "repeated_columns",
    "shown_type",
]

# The flag (Spark: the corrupt-record column) of a CSV row whose field count differs
# from its header; a header may not use the name.
MALFORMED_COLUMN = "_dp_malformed_row"


def _names(names: Iterable[str]) -> str:
    return ", ".join(repr(name) for name in names)


def missing_columns(missing: Sequence[str], what: str, count: int) -> str:
    """The line for declared columns ``missing`` from ``what`` (e.g. "its CSV header"),
    which holds ``count`` names: its count, never its names."""
    plural = "column" if len(missing) == 1 else "columns"
    return (
        f"{what} has {count} field(s) and lacks the declared {plural} {_names(missing)}; "
        "every column the spec uses must be named there (the file's own names are not "
        "shown: they can be data)"
    )


def repeated_columns(names: Sequence[str], declared: Iterable[str], what: str) -> str | None:
    """The line for a name that appears more than once in ``names`` (None: none does).

    Names a repeated column only if the spec declared it."""
    repeated = {name for name in names if names.count(name) > 1}
    if not repeated:
        return None
    shown = sorted(repeated & set(declared))
    which = (
        f"the declared column(s) {_names(shown)}"
        if shown
        else "a column the spec does not use (not shown)"
    )
    return f"{what} names {which} more than once; name each column once"


def check_header(header: list[str] | None, declared: Iterable[str], path) -> list[str]:
    """``header`` (`csv_header`) if it is a CSV header holding every ``declared`` column
    once, no name twice and no `MALFORMED_COLUMN`; else `SpecError` naming the file
    ``path`` and the rule, and no name the spec did not declare."""
    source = f"input {str(path)!r}"
    declared = list(declared)
    if not header:
        raise SpecError(
            ["its first line is not a CSV header (the file is empty or not UTF-8 text)"], source
        )
    repeated = repeated_columns(header, declared, "its CSV header")
    if repeated is not None:
        raise SpecError([repeated], source)
    if MALFORMED_COLUMN in header:
        raise SpecError(
            [f"column {MALFORMED_COLUMN!r} is reserved (it flags malformed rows); rename it"],
            source,
        )
    missing = [name for name in declared if name not in header]
    if missing:
        raise SpecError([missing_columns(missing, "its CSV header", len(header))], source)
    return header


def header_difference(header: list[str], first: list[str], declared: Iterable[str]) -> str:
    """How ``header`` differs from the ``first`` file's, by counts and declared names only."""
    if len(header) != len(first):
        return f"it has {len(header)} field(s), the first file's {len(first)}"
    for name in declared:
        here, there = header.index(name), first.index(name)
        if here != there:
            return (
                f"the declared column {name!r} is field {here + 1} here and field {there + 1} there"
            )
    return "a column the spec does not use has another name or place (not shown)"


def shown_type(data_type: pa.DataType) -> str:
    """``data_type`` as a message may show it: a primitive type's name, a nested type's
    kind (its fields' names are the file's text), a timestamp without its time zone."""
    if pa.types.is_dictionary(data_type):
        return f"dictionary of {shown_type(data_type.value_type)}"
    if pa.types.is_struct(data_type):
        return "a struct type"
    if pa.types.is_map(data_type):
        return "a map type"
    if pa.types.is_union(data_type):
        return "a union type"
    if (
        pa.types.is_list(data_type)
        or pa.types.is_large_list(data_type)
        or pa.types.is_fixed_size_list(data_type)
    ):
        return "a list type"
    if pa.types.is_timestamp(data_type):
        return f"timestamp[{data_type.unit}]"
    if isinstance(data_type, pa.ExtensionType):
        return "an extension type"
    return str(data_type)
