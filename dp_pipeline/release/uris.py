"""Output locations as text: a local path or a ``scheme://`` URI, shown without credentials."""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit

__all__ = ["display_uri", "is_uri", "join_uri", "split_uri"]


def is_uri(output: str) -> bool:
    """Whether ``output`` names a file system by scheme (``viewfs://...``), not a local path."""
    return "://" in str(output)


def display_uri(uri: str) -> str:
    """``uri`` without its user information (``s3a://key:secret@bucket`` -> ``s3a://bucket``)."""
    text = str(uri)
    if not is_uri(text):
        return text
    parts = urlsplit(text)
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit((parts.scheme, host, parts.path, "", ""))


def join_uri(root: str, *names: str) -> str:
    """``root/name/...`` (a URI is joined with ``/`` whatever the local separator).

    The names go into the URI's path, before its query: a store's options
    (``s3://bucket/out?endpoint_override=host:9000``) stay options, so
    ``s3://bucket/out/<id>?endpoint_override=host:9000``.
    """
    text = str(root)
    if not is_uri(text):
        return "/".join([text.rstrip("/"), *names])
    parts = urlsplit(text)
    path = "/".join([parts.path.rstrip("/"), *names])
    return urlunsplit((parts.scheme, parts.netloc, path, parts.query, parts.fragment))


def split_uri(uri: str) -> tuple[str, str]:
    """``(parent, name)`` of a URI's last path segment, its query kept on the parent
    (``s3://b/out/r-1?region=x`` -> ``("s3://b/out?region=x", "r-1")``)."""
    parts = urlsplit(str(uri))
    parent, _, name = parts.path.rstrip("/").rpartition("/")
    return urlunsplit((parts.scheme, parts.netloc, parent, parts.query, parts.fragment)), name
