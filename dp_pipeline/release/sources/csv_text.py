"""A CSV file's fields as the pandas engine reads them: rows of any length, and fields that
are not text flagged as malformed, as the Spark engine reads them.

Spark's CSV reader takes a row of any length and decodes each line as UTF-8, putting
U+FFFD (the replacement character) for bytes that are not UTF-8; pyarrow's reader
refuses a row longer than its block and a field that is not UTF-8. Left so, one record
(a 2 MiB field, one stray byte in an id) would make the pandas engine refuse the run
after reading while Spark publishes: an outcome decided by one record, outside the
accountant. Here:

- `read_text_fields` reads the file again with a larger block when a row is longer
  than the block (up to the file's size), so every row is read as Spark reads it.
- `undecodable_rows` flags each row whose used field is not UTF-8 or holds U+FFFD,
  the rule `MALFORMED_TEXT` states and Spark's side applies to its decoded text; such
  a row is malformed on both engines (dropped, and counted with the rows whose
  number of fields differs from the header under the spec's ``on_invalid`` rule).

No message here quotes a row or a field: a failure names the rule only.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

__all__ = [
    "MALFORMED_TEXT",
    "REPLACEMENT",
    "as_text",
    "csv_rule",
    "file_size",
    "read_text_fields",
    "undecodable_rows",
]

# What a UTF-8 decoder puts for bytes it cannot read (Spark's CSV reader does).
REPLACEMENT = "\ufffd"
MALFORMED_TEXT = "hold a field that is not UTF-8 text (or holds U+FFFD, the replacement character)"

_BLOCK = 1 << 20  # pyarrow's default block
_LARGEST_BLOCK = 2**31 - 1  # pyarrow holds a block's size in an int32


def read_text_fields(read: Callable[[int], pa.Table], size: int | None) -> pa.Table:
    """``read(block_size)``, again with a larger block while a row straddles blocks.

    ``size``: the file's size in bytes (None: unknown); a block of the whole file holds
    every row. Other errors, and a row longer than the largest block, are raised.
    """
    block = _BLOCK
    ceiling = min(_LARGEST_BLOCK, max(_BLOCK, (size or _LARGEST_BLOCK) + 1))
    while True:
        try:
            return read(block)
        except pa.ArrowInvalid as error:
            # Matched, never shown: the reader's message can quote the row.
            if "straddl" not in str(error) or block >= ceiling:
                raise
            block = min(ceiling, block * 16)


def file_size(path, filesystem=None) -> int | None:
    """The size of the file ``path`` (on ``filesystem``, None: local), or None."""
    try:
        if filesystem is None:
            return os.path.getsize(path)
        return filesystem.get_file_info(str(path)).size
    except (OSError, pa.ArrowException):
        return None


def csv_rule(error: BaseException) -> str:
    """The rule a CSV file broke, from the reader's error type (never its text's content)."""
    message = str(error)
    if "UTF8" in message or "UTF-8" in message:
        return "it is not valid UTF-8 text"
    if "straddl" in message or "block" in message:
        return "a row is longer than the reader's largest block (2 GiB)"
    return "it is not CSV the reader can parse (an unbalanced quote, or another syntax error)"


def _bad_positions(values: pa.Array, offset: int, found: list[int]) -> None:
    """Positions of ``values`` (binary) that are not UTF-8: halves cast until each bad
    value is alone, so a clean block costs one vectorized cast."""
    try:
        pc.cast(values, pa.string())
        return
    except pa.ArrowInvalid:
        pass
    if len(values) == 1:
        found.append(offset)
        return
    half = len(values) // 2
    _bad_positions(values.slice(0, half), offset, found)
    _bad_positions(values.slice(half), offset + half, found)


def undecodable_rows(columns: Sequence[pa.ChunkedArray]) -> np.ndarray:
    """A boolean mask of the rows where one of ``columns`` (binary, nulls allowed) is not
    UTF-8 or holds U+FFFD (`MALFORMED_TEXT`)."""
    rows = len(columns[0]) if columns else 0
    bad = np.zeros(rows, dtype=bool)
    for column in columns:
        start = 0
        for chunk in column.chunks:
            found: list[int] = []
            _bad_positions(chunk, 0, found)
            bad[[start + position for position in found]] = True
            replaced = pc.fill_null(pc.match_substring(chunk, REPLACEMENT), False)
            bad[start : start + len(chunk)] |= replaced.to_numpy(zero_copy_only=False)
            start += len(chunk)
    return bad


def as_text(column: pa.ChunkedArray, keep: np.ndarray) -> pa.Array:
    """The rows ``keep`` of a binary column (all UTF-8 there) as one string array."""
    kept = column.filter(pa.array(keep)).combine_chunks()
    return pc.cast(kept, pa.string())
