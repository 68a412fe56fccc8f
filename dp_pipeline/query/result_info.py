"""``result.attrs["dp"]``: what a ``df.dp`` result spent, in a form that saves safely.

pandas carries a frame's ``attrs`` into its copies (``copy``, and ``__finalize__``
after most operations, each a ``deepcopy``; ``concat`` of frames with equal attrs),
into its pickles (``DataFrame.__getstate__``: ``to_pickle``, ``pickle.dumps``) and,
through pyarrow, into Parquet metadata as JSON (``to_parquet``). The value kept
there is a `ResultInfo`: a ``dict`` of the info's public summary (all that
``json.dumps``, hence ``to_parquet``, writes) that also holds the info object
itself, with its diagnostics, for whoever looks at the result in memory (attribute
access reads the info: ``result.attrs["dp"].epsilon``, ``.diagnostics``).

The diagnostics are exact counts of the input (not differentially private), so
every way out of memory drops them: `ResultInfo.__reduce__` (pickles),
``__copy__`` and ``__deepcopy__`` (pandas copies) give the public form, the info
without diagnostics, and the JSON form is the public summary. No copy, pickle or
file of a result carries an exact count.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

__all__ = ["ResultInfo", "attach_info"]


class ResultInfo(dict):
    """The public summary of ``info`` (a ``dict``), and ``info`` itself in memory only.

    ``info`` is a `dp_pipeline.query.cost.ReleaseInfo` or a
    `dp_pipeline.selection.info.SelectionInfo`: anything with ``public_summary()``,
    ``with_diagnostics(...)`` and ``diagnostics``. Its attributes are read through
    this object; a copy or pickle of it holds ``info.with_diagnostics(None)``.
    """

    __slots__ = ("_info",)

    def __init__(self, info: Any) -> None:
        super().__init__(info.public_summary())
        self._info = info

    @property
    def info(self) -> Any:
        """The info object (with the diagnostics while this is the in-memory original)."""
        return self._info

    def public(self) -> ResultInfo:
        """This info without its diagnostics: what every copy and pickle holds."""
        if self._info.diagnostics is None:
            return self
        return ResultInfo(self._info.with_diagnostics(None))

    def __getattr__(self, name: str) -> Any:
        # Only called when normal lookup fails; never for the slot itself (an object
        # being unpickled or copied has no _info yet).
        if name == "_info" or name.startswith("__"):
            raise AttributeError(name)
        return getattr(self._info, name)

    def __reduce__(self):
        return (ResultInfo, (self._info.with_diagnostics(None),))

    def __copy__(self) -> ResultInfo:
        return self.public()

    def __deepcopy__(self, memo: dict) -> ResultInfo:
        return self.public()

    def __eq__(self, other: object) -> bool:
        if isinstance(other, ResultInfo):
            return self._info == other._info
        return dict.__eq__(self, other)

    def __ne__(self, other: object) -> bool:
        return not self == other

    __hash__ = None  # a dict: unhashable

    def __repr__(self) -> str:  # the public summary only: reprs reach logs
        return f"ResultInfo({dict.__repr__(self)})"


def attach_info(frame: pd.DataFrame, info: Any) -> None:
    """Set ``frame.attrs["dp"]`` to a `ResultInfo` of ``info`` (a ``df.dp`` result's info)."""
    frame.attrs["dp"] = ResultInfo(info)
