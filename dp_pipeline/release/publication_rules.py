"""The rules of a release folder that the ledger applies too: its hidden names, and the same
bytes for the same release id.

A release is written into a hidden, owner-only sibling of its final folder,
``out/.<release id>.tmp-<pid>-<token>/`` (an earlier copy being replaced is renamed to
``.<release id>.old-<pid>-<token>``); names are matched exactly: the hidden folders of
release ``x`` are never those of ``x.y``. A release id re-emits the bytes recorded at its
first publication or nothing (`check_same_bytes`). The writer
(`dp_pipeline.release.publish.manifest`) and the ledger's moves
(`dp_pipeline.release.ledger.moves`) both apply them.
"""

from __future__ import annotations

import re
from pathlib import Path

from dp_pipeline.errors import PublicationError

__all__ = ["check_same_bytes", "hidden_folders", "hidden_name", "is_hidden_name"]


def hidden_name(release_id: str, kind: str, pid: int, token: str) -> str:
    """The hidden sibling's name: ``.<id>.tmp-<pid>-<token>`` (kind "tmp" or "old")."""
    return f".{release_id}.{kind}-{pid}-{token}"


def is_hidden_name(name: str, release_id: str) -> bool:
    """Whether ``name`` is a `hidden_name` of exactly ``release_id`` (never of ``<id>.y``)."""
    pattern = rf"\.{re.escape(release_id)}\.(tmp|old)-[0-9]+-[0-9a-f]+"
    return re.fullmatch(pattern, name) is not None


def hidden_folders(final: Path) -> list[Path]:
    """The hidden folders (``tmp`` and ``old``) of exactly the release at ``final``."""
    if not final.parent.is_dir():
        return []
    return sorted(
        path
        for path in final.parent.iterdir()
        if is_hidden_name(path.name, final.name) and path.is_dir() and not path.is_symlink()
    )


def check_same_bytes(
    release_id: str,
    recorded: dict | None,
    manifest: dict,
    recorded_engine: str | None,
    engine: str,
) -> None:
    """Refuse to publish bytes other than those the ledger recorded for ``release_id``.

    The same identity (spec, input bytes, key) draws the same noise; other
    bytes under it (another engine parsing the input differently, another
    library version) would publish two noisy versions with the same noise,
    whose difference is exact. The message names no file: which tables differ
    would itself depend on the data.
    """
    if recorded is None or recorded.get("files") == manifest["files"]:
        return
    by = f" by the {recorded_engine} engine" if recorded_engine else ""
    raise PublicationError(
        f"release {release_id!r} was published{by} with other bytes than this run "
        f"({engine} engine) made from the same spec, input and key; a release id "
        "re-emits the same bytes or nothing, so nothing was published (the hidden "
        "copy is removed). Read the published copy, or run it with the engine and "
        "library version it was published with, or use a new release id"
    )
