"""The types a release reads and publishes, from its spec alone (never from the data).

Reading: a CSV input is read by header name on both engines. Every file's
header is checked before the ledger reserves anything (`check_input_columns`:
a header is schema, not data): it must hold the spec's columns, no name twice,
and every file of a folder the same header as the first, so no file is ever
read by position under another file's column order. The columns the spec uses
are typed from it: a key column of an integer domain as int64, of a value
list as strings; a summed or quantile column as float64; the privacy unit as
strings (an id is a label: ``"007"`` stays ``"007"``). Other columns are not
read. Every field is read as text and parsed by the same rules on both engines
(`parse_integers`, `parse_decimals`, and their Spark SQL twins in
`dp_pipeline.release.tables.on_spark.spark_typed_columns`): integers as
``java.lang.Long.parseLong`` (optional sign, ASCII digits, within int64),
numbers in decimal notation as ``Double.parseDouble``. A field that cannot
be read as its type is missing (an empty field, ``"abc"`` or ``"1.5"`` in an
integer key, ``"abc"`` in a summed column), and a row with another number of
fields than the header is malformed: the engines drop and count such rows as
invalid under the spec's ``on_invalid`` rule, so what one cell or line of the
file holds never becomes an abort, a positional misread or an error message.

Parquet: every file's footer is read before the reservation; each column the
spec uses must have one type in all files, of a kind the spec can use.

Publishing: `table_schema` is the Arrow schema of every released table: keys
int64 or string by domain, values int64 (a quantile on a fractional grid:
float64), the same on every engine and for every input format.
"""

from __future__ import annotations

import csv
from collections.abc import Sequence
from pathlib import Path, PurePath

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from dp_pipeline.query.domain import Domain
from dp_pipeline.release.sources.csv_text import (
    as_text,
    csv_rule,
    file_size,
    read_text_fields,
    undecodable_rows,
)
from dp_pipeline.release.sources.partitions import partition_columns, partition_problems
from dp_pipeline.release.sources.shown_schema import (
    MALFORMED_COLUMN,
    check_header,
    header_difference,
    missing_columns,
    repeated_columns,
    shown_type,
)
from dp_pipeline.release.sources.source import InputReadError
from dp_pipeline.release.spec.model import ReleaseSpec, SpecError, TableSpec
from dp_pipeline.release.spec.outputs import RAW_COLUMN, output_columns, quantile_grid
from dp_pipeline.release.spec.statistics import released_as_float

__all__ = [
    "DECIMAL_PATTERN",
    "INTEGER_KEY",
    "INTEGER_PATTERN",
    "MALFORMED_COLUMN",
    "NUMBER",
    "arrow_frame",
    "check_column_families",
    "check_csv_headers",
    "check_input_columns",
    "check_parquet_footers",
    "csv_columns",
    "csv_header_of",
    "csv_schema_of_header",
    "first_csv_file",
    "published_table",
    "read_csv_pandas",
    "read_csv_rows",
    "spark_csv_schema",
    "table_schema",
]

# Column kinds of a release's input.
INTEGER_KEY, STRING_KEY, NUMBER, UNIT = "integer key", "string key", "number", "unit"

# Double.parseDouble's decimal forms (it trims characters <= U+0020 and takes a d/f suffix),
# and Long.parseLong's ASCII form: one regex for Arrow (RE2) and Spark (Java), unanchored.
_NUMBER = r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?"
DECIMAL_PATTERN = rf"[\x00-\x20]*({_NUMBER})[dDfF]?[\x00-\x20]*"
_DECIMAL = rf"[\x00-\x20]*(?P<number>{_NUMBER})[dDfF]?[\x00-\x20]*"
INTEGER_PATTERN = r"[+-]?[0-9]+"
_INT64 = (-(2**63), 2**63 - 1)


def csv_columns(spec: ReleaseSpec) -> dict[str, str]:
    """Every input column the release uses -> its kind (a key's type wins over a value's)."""
    kinds: dict[str, str] = {}
    for table in spec.tables:
        for key in table.keys:
            kinds[key] = key_kind(spec, key)
    for table in spec.tables:
        if table.value is not None:
            kinds.setdefault(table.value, NUMBER)
    if spec.privacy_unit is not None:
        kinds.setdefault(spec.privacy_unit, UNIT)
    return kinds


def key_kind(spec: ReleaseSpec, column: str) -> str:
    """`INTEGER_KEY` or `STRING_KEY`: the kind of the key column's declared domain."""
    values = spec.typed_domain(column)
    if isinstance(values, range) or Domain(column, values).kind == "int":
        return INTEGER_KEY
    return STRING_KEY


def csv_header_of(line: str) -> list[str] | None:
    """The column names of a CSV header line (Spark's default quoting), or None."""
    try:
        return next(csv.reader([line.rstrip("\r\n")]), None)
    except csv.Error:
        return None


def csv_header(path: Path | str, filesystem=None) -> list[str] | None:
    """The column names in the first line of a CSV file (Spark's default quoting).

    ``filesystem``: the ``pyarrow.fs`` file system ``path`` is on (None: local).
    None when the first line cannot be read as a header (not UTF-8 text, or no line).
    Only the first line's bytes are used: what follows is data, and must not decide
    anything before the reservation.
    """
    if filesystem is None:
        with open(path, "rb") as handle:
            line = handle.readline(_HEADER_BYTES)
    else:
        with filesystem.open_input_stream(str(path), compression=None) as handle:
            line = _first_line(handle)
    try:
        return next(csv.reader([line.decode("utf-8").rstrip("\r\n")]), None)
    except (UnicodeDecodeError, csv.Error):
        return None


_HEADER_BYTES = 1 << 20  # a header line longer than this is not read as one
_HEADER_BLOCK = 1 << 16


def _first_line(handle) -> bytes:
    """The first line of a ``pyarrow`` stream (read in blocks; at most `_HEADER_BYTES`)."""
    line = b""
    while len(line) < _HEADER_BYTES:
        block = handle.read(_HEADER_BLOCK)
        end = block.find(b"\n")
        if end >= 0:
            return (line + block[: end + 1])[:_HEADER_BYTES]
        if not block:
            break
        line += block
    return line[:_HEADER_BYTES]


def check_input_columns(
    spec: ReleaseSpec, root: Path, files: tuple[Path, ...], input_format: str
) -> None:
    """Refuse, before any budget is reserved, an input whose schema does not fit the spec.

    CSV: every listed file's header (`check_header`). Parquet: every listed file's
    footer; a Parquet folder's ``name=value`` directories count as columns (Spark
    and pyarrow read them). Reads no row. Raises `SpecError` naming the file and column.
    """
    local = [file for file in files if file.is_file()]
    if not local:
        return  # nothing local to look at: the engine names the missing column
    if input_format == "csv":
        # An empty part file (Spark writes one for an empty partition) holds no header
        # and no row: the engines read nothing from it.
        local = [file for file in local if file.stat().st_size > 0] or local[:1]
        check_csv_headers(spec, [(str(file), csv_header(file)) for file in local])
        return
    check_parquet_footers(spec, root, local)


def check_parquet_footers(
    spec: ReleaseSpec, root: PurePath, files: Sequence[PurePath], filesystem=None
) -> None:
    """Every Parquet file's footer against the spec, before the reservation (no row read).

    ``files`` on ``filesystem`` (``pyarrow.fs``; None: local), under the input's ``root``
    (its ``name=value`` folders are columns). Raises `SpecError` naming the file and column.
    """
    kinds = csv_columns(spec)
    integers = [name for name, kind in kinds.items() if kind in (INTEGER_KEY, NUMBER)]
    problems = partition_problems(root, files, integers)
    if problems:
        raise SpecError(problems, source=f"input {str(root)!r}")
    types: dict[str, tuple[pa.DataType, PurePath]] = {}
    for file in files:
        _check_footer(spec, root, file, kinds, types, filesystem)


def check_csv_headers(
    spec: ReleaseSpec, headers: Sequence[tuple[str, list[str] | None]]
) -> list[str]:
    """Every file's CSV header against the spec and the first file's (before the reservation).

    ``headers``: each file's name as messages may show it, and its header (`csv_header`;
    None when its first line is not one), in the engine's order, empty files left out.
    Each must be a header holding the spec's columns, no name twice, and all the same
    as the first, so no file is read by position under another file's column order.
    Returns the header. Raises `SpecError` naming the file, the declared columns and
    the rule, never a name or text read from a file (`shown_schema`).
    """
    kinds = csv_columns(spec)
    first_name, first_header = headers[0]
    first = check_header(first_header, kinds, first_name)
    for name, found in headers[1:]:
        header = check_header(found, kinds, name)
        if header != first:
            raise SpecError(
                [
                    f"its header differs from the first file's ({first_name!r}): "
                    f"{header_difference(header, first, kinds)}; the files of a CSV folder "
                    "must have one header, in one column order"
                ],
                source=f"input {name!r}",
            )
    return first


_KIND_TYPES = {
    INTEGER_KEY: ("an integer or floating-point type", ("integer", "floating")),
    STRING_KEY: ("a string type", ("string",)),
    NUMBER: ("an integer or floating-point type", ("integer", "floating")),
    UNIT: ("an integer or string type", ("integer", "string")),
}


def _type_family(data_type: pa.DataType) -> str:
    if pa.types.is_dictionary(data_type):
        data_type = data_type.value_type
    if pa.types.is_integer(data_type):
        return "integer"
    if pa.types.is_floating(data_type):
        return "floating"
    if pa.types.is_string(data_type) or pa.types.is_large_string(data_type):
        return "string"
    return str(data_type)


def _check_footer(
    spec, root: PurePath, file: PurePath, kinds: dict[str, str], types: dict, filesystem=None
) -> None:
    source = f"input {str(file)!r}"
    try:
        schema = pq.read_schema(str(file), filesystem=filesystem)
    except (pa.ArrowException, OSError):
        raise SpecError(
            ["its Parquet footer cannot be read (not a Parquet file, or a truncated one)"],
            source=source,
        ) from None
    partitions = partition_columns(root, file)
    names = set(schema.names) | partitions
    missing = [name for name in kinds if name not in names]
    if missing:
        raise SpecError([missing_columns(missing, "its Parquet schema", len(names))], source)
    repeated = repeated_columns(schema.names, kinds, "its Parquet schema")
    if repeated is not None:
        raise SpecError([repeated], source)
    problems = []
    for name, kind in kinds.items():
        if name in partitions and name not in schema.names:
            continue  # a directory's value: typed by the reader, checked per row
        data_type = schema.field(name).type
        rule, families = _KIND_TYPES[kind]
        if _type_family(data_type) not in families:
            problems.append(
                f"column {name!r} has type {shown_type(data_type)}; as the spec's {kind} it "
                f"must have {rule}"
            )
        elif name in types and types[name][0] != data_type:
            first_type, first_file = types[name]
            problems.append(
                f"column {name!r} has type {shown_type(data_type)} but "
                f"{shown_type(first_type)} in "
                f"{str(first_file)!r}: every file of the input must give a column one type "
                f"(rewrite the files with one schema)"
            )
        else:
            types.setdefault(name, (data_type, file))
    if problems:
        raise SpecError(problems, source=source)


def check_column_families(spec: ReleaseSpec, families: dict[str, str], source: str) -> None:
    """The spec's columns against a schema given as column -> type family (before reading).

    Families: "integer", "floating", "string", or another type's name (a nested
    type's kind only: its fields' names are the input's text). Raises `SpecError`
    naming each missing declared column or declared column of a type the spec cannot
    use, never a column the spec did not declare.
    """
    kinds = csv_columns(spec)
    missing = [name for name in kinds if name not in families]
    if missing:
        raise SpecError([missing_columns(missing, "its schema", len(families))], source=source)
    problems = []
    for name, kind in kinds.items():
        rule, allowed = _KIND_TYPES[kind]
        if families[name] not in allowed:
            problems.append(
                f"column {name!r} has type {families[name]}; as the spec's {kind} it must "
                f"have {rule}"
            )
    if problems:
        raise SpecError(problems, source=source)


def first_csv_file(files: tuple[Path, ...]) -> Path:
    """The file whose header names a CSV input's columns: the first that is not empty."""
    return next((file for file in files if file.is_file() and file.stat().st_size > 0), files[0])


def spark_csv_schema(spec: ReleaseSpec, path: Path) -> str:
    """The DDL schema of a CSV file for ``spark.read.schema``: every header column, as text.

    Spark maps a CSV schema onto the columns by position, so the schema lists all of
    them in the header's order (every file's header is the same: `check_input_columns`),
    every one as a string, then `MALFORMED_COLUMN`, Spark's corrupt-record column: a row
    whose field count differs from the header sets it, and nothing else can, because no
    field is parsed while reading. `spark_typed_columns` then types the spec's columns.
    """
    return csv_schema_of_header(spec, csv_header(path), str(path))


def csv_schema_of_header(spec: ReleaseSpec, header: list[str] | None, path: str) -> str:
    """`spark_csv_schema` from a header already read (a file outside the local file system)."""
    header = check_header(header, csv_columns(spec), path)
    escaped = ["`" + name.replace("`", "``") + "`" for name in [*header, MALFORMED_COLUMN]]
    return ", ".join(f"{name} STRING" for name in escaped)


def read_csv_pandas(spec: ReleaseSpec, path: Path) -> pd.DataFrame:
    """The spec's columns of a CSV file (`read_csv_rows` without the malformed-row count)."""
    return read_csv_rows(spec, path)[0]


def read_csv_rows(spec: ReleaseSpec, path: Path | str, filesystem=None) -> tuple[pd.DataFrame, int]:
    """The spec's columns of a CSV file, typed as `spark_typed_columns` types them on Spark.

    Integer keys: nullable ``Int64``; numbers: float64 (NaN where missing); string
    keys and units: strings (None where missing). An empty field is missing. The
    file is read as text by pyarrow's CSV reader and parsed with Arrow kernels. A row
    whose field count differs from the header, or with a used field that is not
    UTF-8 text (`dp_pipeline.release.sources.csv_text`), is skipped and counted
    (returned second): it is malformed, never read by position. A row of any length
    is read (as Spark reads it). A file the reader cannot
    parse raises `dp_pipeline.release.sources.source.InputReadError`, naming the file and
    the rule, never a line, a record or a value of it. ``filesystem``: the
    ``pyarrow.fs`` file system ``path`` is on (None: local).
    """
    import pyarrow.csv as pcsv

    kinds = csv_columns(spec)
    check_header(csv_header(path, filesystem), kinds, path)
    malformed = [0]

    def skip(_row) -> str:  # the row's text is never kept or shown
        malformed[0] += 1
        return "skip"

    def read(block: int) -> pa.Table:
        malformed[0] = 0  # counted again by each attempt
        opened = path if filesystem is None else filesystem.open_input_stream(str(path))
        return pcsv.read_csv(
            opened,
            read_options=pcsv.ReadOptions(block_size=block),
            parse_options=pcsv.ParseOptions(invalid_row_handler=skip),
            convert_options=pcsv.ConvertOptions(
                include_columns=list(kinds),
                # Bytes, decoded below: a field that is not UTF-8 is a malformed row.
                column_types=dict.fromkeys(kinds, pa.binary()),
                strings_can_be_null=True,
                null_values=[""],
            ),
        )

    try:
        text = read_text_fields(read, file_size(path, filesystem))
    except pa.ArrowException as error:
        raise InputReadError(path, csv_rule(error)) from None
    undecodable = undecodable_rows([text.column(name) for name in kinds])
    columns = {}
    for name, kind in kinds.items():
        strings = as_text(text.column(name), ~undecodable)
        if kind == INTEGER_KEY:
            columns[name] = parse_integers(strings)
        elif kind == NUMBER:
            columns[name] = parse_decimals(strings)
        else:
            columns[name] = strings.to_pandas()  # object strings, None where missing
    return pd.DataFrame(columns), malformed[0] + int(undecodable.sum())


def _strings(text: pd.Series | pa.Array) -> pa.Array:
    if isinstance(text, pa.Array):
        return text
    return pa.array(text.to_numpy(dtype=object, na_value=None), type=pa.string())


def _mask(condition: pa.Array) -> np.ndarray:
    return pc.fill_null(condition, False).to_numpy(zero_copy_only=False)


def parse_integers(text: pd.Series | pa.Array) -> pd.arrays.IntegerArray:
    """``Long.parseLong`` of every string (missing where it fails), as a nullable Int64 array."""
    strings = _strings(text)
    values = np.zeros(len(strings), dtype=np.int64)
    # Up to 18 digits always fit in int64; Arrow's cast takes no leading "+".
    short = _mask(pc.match_substring_regex(strings, r"^[+-]?[0-9]{1,18}$"))
    if short.any():
        unsigned = pc.replace_substring_regex(strings, r"^\+", "")
        values[short] = pc.cast(pc.filter(unsigned, pa.array(short)), pa.int64()).to_numpy()
    valid = short.copy()
    longer = _mask(pc.match_substring_regex(strings, r"^[+-]?[0-9]{19,}$"))
    for row in np.flatnonzero(longer):  # rare: many digits, maybe beyond int64
        number = int(strings[int(row)].as_py())
        if _INT64[0] <= number <= _INT64[1]:
            values[row], valid[row] = number, True
    return pd.arrays.IntegerArray(values, ~valid)


def parse_decimals(text: pd.Series | pa.Array) -> np.ndarray:
    """``Double.parseDouble`` of every string in decimal notation (NaN where missing or not)."""
    core = pc.struct_field(pc.extract_regex(_strings(text), f"^{_DECIMAL}$"), [0])
    return pc.cast(core, pa.float64()).to_numpy(zero_copy_only=False)


def table_schema(spec: ReleaseSpec, table: TableSpec, raw: bool = False) -> pa.Schema:
    """The Arrow schema of ``table``'s published file, from the spec alone.

    Keys: int64 for integer domains, string for value lists. Values: int64, except
    a quantile or median on a fractional grid (float64, as `release_selection` makes it).
    ``raw``: the table also publishes its noisy values before the consistency step
    (``raw_value``, int64; `dp_pipeline.release.tables.consistency`), and its ``value`` is
    the consistent estimate: float64 unless ``[postprocess] integer`` rounds it.
    """
    fields = []
    for column in [*output_columns(table), *([RAW_COLUMN] if raw else [])]:
        if column in table.keys:
            integer = key_kind(spec, column) == INTEGER_KEY
            fields.append(pa.field(column, pa.int64() if integer else pa.string()))
        elif column == "value" and table.statistic in ("quantile", "median"):
            integer_grid = all(value.denominator == 1 for value in quantile_grid(table)[:2])
            fields.append(pa.field(column, pa.int64() if integer_grid else pa.float64()))
        elif column == "value" and (
            released_as_float(table) or (raw and not spec.postprocess.integer)
        ):
            fields.append(pa.field(column, pa.float64()))
        else:
            fields.append(pa.field(column, pa.int64()))
    return pa.schema(fields)


def published_table(spec: ReleaseSpec, table: TableSpec, frame: pd.DataFrame) -> pa.Table:
    """``frame``'s released columns as the Arrow table written to ``<table>.parquet``.

    The schema is `table_schema` (the spec's, not the engine's or the input's) and
    the file carries no pandas metadata, so the same released values give
    byte-identical files whichever engine and input format produced them.
    """
    schema = table_schema(spec, table, raw=RAW_COLUMN in frame)
    released = frame[schema.names]  # a new frame: the caller's keeps its attrs
    released.attrs = {}  # engine metadata is reported in privacy_report.json instead
    arrow = pa.Table.from_pandas(released, schema=schema, preserve_index=False)
    return arrow.replace_schema_metadata(None)


_NULLABLE_INTEGERS = {
    pa.int8(): pd.Int8Dtype(),
    pa.int16(): pd.Int16Dtype(),
    pa.int32(): pd.Int32Dtype(),
    pa.int64(): pd.Int64Dtype(),
    pa.uint8(): pd.UInt8Dtype(),
    pa.uint16(): pd.UInt16Dtype(),
    pa.uint32(): pd.UInt32Dtype(),
    pa.uint64(): pd.UInt64Dtype(),
}


def arrow_frame(table: pa.Table) -> pd.DataFrame:
    """An Arrow table as pandas, integer columns nullable (a null id stays an integer column).

    pyarrow's default turns an integer column with a null into float64, which would
    make a unit id 5 hash as "5.0" (Spark hashes "5") and a key column float.
    """
    return table.to_pandas(types_mapper=_NULLABLE_INTEGERS.get)
