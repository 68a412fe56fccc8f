"""The types a release reads and publishes, from its spec alone (never from the data).

Reading: a CSV input is read with an explicit schema on both engines. The
columns the spec uses are typed from it: a key column of an integer domain as
int64, of a value list as strings; a summed or quantile column as float64; the
privacy unit as strings (an id is a label: ``"007"`` stays ``"007"``). Other
columns are not read. A field that cannot be read as its type is missing, as
Spark's CSV reader makes it (``PERMISSIVE`` mode): an empty field, ``"abc"`` or
``"1.5"`` in an integer key, ``"abc"`` in a summed column. The engines then drop
and count such rows as invalid (null key, null unit, invalid value) under the
spec's ``on_invalid`` rule, so whether a release is published never depends on
what one cell of the file holds. The pandas reader below parses exactly as
Spark's does: integers as ``java.lang.Long.parseLong`` (optional sign, ASCII
digits, within int64), numbers in decimal notation as ``Double.parseDouble``.

Publishing: `table_schema` is the Arrow schema of every released table: keys
int64 or string by domain, values int64 (a quantile on a fractional grid:
float64), the same on every engine and for every input format.
"""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from dp_pipeline.query.domain import Domain
from dp_pipeline.release.consistency import RAW_COLUMN
from dp_pipeline.release.selections import output_columns, quantile_grid
from dp_pipeline.release.spec_model import ReleaseSpec, SpecError, TableSpec

__all__ = [
    "arrow_frame",
    "check_input_columns",
    "csv_columns",
    "published_table",
    "read_csv_pandas",
    "spark_csv_schema",
    "table_schema",
]

# Column kinds of a release's input.
INTEGER_KEY, STRING_KEY, NUMBER, UNIT = "integer key", "string key", "number", "unit"

# Double.parseDouble's decimal forms (it trims characters <= U+0020 and takes a d/f suffix).
_DECIMAL = (
    r"[\x00-\x20]*(?P<number>[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?)"
    r"[dDfF]?[\x00-\x20]*"
)
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
    values = spec.domains[column]
    if isinstance(values, range) or Domain(column, values).kind == "int":
        return INTEGER_KEY
    return STRING_KEY


def csv_header(path: Path) -> list[str]:
    """The column names in the first line of a CSV file (Spark's default quoting)."""
    with open(path, newline="", encoding="utf-8") as handle:
        return next(csv.reader(handle), [])


def check_input_columns(
    spec: ReleaseSpec, root: Path, files: tuple[Path, ...], input_format: str
) -> None:
    """Refuse, before any budget is reserved, an input that lacks a column the spec uses.

    Reads only the CSV header or the Parquet footer of the first listed file; a
    Parquet folder's ``name=value`` directories count as columns (Spark reads them).
    """
    if not files or not files[0].is_file():
        return  # nothing local to look at: the engine names the missing column
    if input_format == "csv":
        _check_header(csv_header(files[0]), csv_columns(spec), files[0])
        return
    names = set(pq.read_schema(files[0]).names)
    try:
        relative = files[0].parent.relative_to(root)
    except ValueError:
        relative = Path()
    names |= {part.split("=", 1)[0] for part in relative.parts if "=" in part}
    missing = [name for name in csv_columns(spec) if name not in names]
    if missing:
        raise SpecError(
            [
                f"column(s) {missing} used by the spec are not in the Parquet schema; "
                f"its columns are {sorted(names)}"
            ],
            source=f"input {str(files[0])!r}",
        )


def _check_header(header: list[str], kinds: dict[str, str], path: Path) -> None:
    missing = [name for name in kinds if name not in header]
    if missing:
        raise SpecError(
            [
                f"column(s) {missing} used by the spec are not in the CSV header; "
                f"its columns are {header}"
            ],
            source=f"input {str(path)!r}",
        )


def spark_csv_schema(spec: ReleaseSpec, path: Path) -> str:
    """The DDL schema of a CSV file for ``spark.read.schema``: every header column, in order.

    Spark maps a CSV schema onto the columns by position, so the schema lists all of
    them: the spec's columns typed from the spec, the others as strings (never parsed).
    """
    header = csv_header(path)
    kinds = csv_columns(spec)
    _check_header(header, kinds, path)
    types = {INTEGER_KEY: "BIGINT", NUMBER: "DOUBLE"}
    escaped = ["`" + name.replace("`", "``") + "`" for name in header]
    return ", ".join(
        f"{name} {types.get(kinds.get(column, ''), 'STRING')}"
        for name, column in zip(escaped, header, strict=True)
    )


def read_csv_pandas(spec: ReleaseSpec, path: Path) -> pd.DataFrame:
    """The spec's columns of a CSV file, typed as `spark_csv_schema` types them on Spark.

    Integer keys: nullable ``Int64``; numbers: float64 (NaN where missing); string
    keys and units: strings (None where missing). An empty field is missing. The
    file is read as text by pyarrow's CSV reader and parsed with Arrow kernels.
    """
    import pyarrow.csv as pcsv

    kinds = csv_columns(spec)
    _check_header(csv_header(path), kinds, path)
    text = pcsv.read_csv(
        path,
        convert_options=pcsv.ConvertOptions(
            include_columns=list(kinds),
            column_types=dict.fromkeys(kinds, pa.string()),
            strings_can_be_null=True,
            null_values=[""],
        ),
    )
    columns = {}
    for name, kind in kinds.items():
        strings = text.column(name).combine_chunks()
        if kind == INTEGER_KEY:
            columns[name] = parse_integers(strings)
        elif kind == NUMBER:
            columns[name] = parse_decimals(strings)
        else:
            columns[name] = strings.to_pandas()  # object strings, None where missing
    return pd.DataFrame(columns)


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
    (``raw_value``, int64; `dp_pipeline.release.consistency`), and its ``value`` is
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
        elif column == "value" and raw and not spec.postprocess.integer:
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
    released = frame[schema.names].copy()
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
