"""Why a store refused or failed an input or an output, from an error (its text never shown).

Spark's, Hadoop's and pyarrow's messages can quote credentials (a URI's user info,
a signed request), internal addresses and bucket or key names, so none is shown:
`failure_rule` matches the error's class and text against known kinds of failure
(no file system for the scheme, no such table, no such path, refused credentials or
permissions, an unreachable store) and returns the one-line rule a message names,
with its fix; None when the failure is of no known kind. `output_failure_rule`
says the same of an output (`release.publish.filesystems`): by the kind of the
error (`error_kind`: a Python ``OSError``'s class and number, as pyarrow raises
them, else the text of the error and of its Java causes, as Hadoop raises them),
with an output's fix.
"""

from __future__ import annotations

import contextlib
import errno
import re

from dp_pipeline.engines.spark.session.failures import java_causes

__all__ = ["error_kind", "error_text", "failure_kind", "failure_rule", "output_failure_rule"]

# The kinds of failure, by the patterns their class and text show; the first that
# matches names the problem.
_KINDS = (
    ("scheme", r"UnsupportedFileSystemException|No FileSystem for scheme"),
    (
        "table",
        r"TABLE_OR_VIEW_NOT_FOUND|NoSuchTableException|SCHEMA_NOT_FOUND|NoSuchDatabaseException",
    ),
    (
        "path",
        r"PATH_NOT_FOUND|FileNotFoundException|Path does not exist|NO_SUCH_BUCKET|"
        r"NoSuchBucket|NoSuchKey",
    ),
    (
        "access",
        r"AccessDenied|ACCESS_DENIED|AccessControlException|Forbidden|\b403\b|\b401\b|"
        r"Unauthori[sz]ed|[Cc]redential|InvalidAccessKey|INVALID_ACCESS_KEY|"
        r"SignatureDoesNotMatch|SIGNATURE_DOES_NOT_MATCH|ExpiredToken|EXPIRED_TOKEN|"
        r"Permission denied|LoginException|Login failed|Login incorrect",
    ),
    (
        "unreachable",
        r"ConnectException|UnknownHost|NoRouteToHost|SocketTimeout|ConnectTimeout|"
        r"Connection refused|timed out|Unable to execute HTTP request|NETWORK_CONNECTION|"
        r"Could not connect|Couldn't connect|Could not resolve host",
    ),
)

# What an input's message says of each kind, with its fix.
_INPUT_RULES = {
    "scheme": "no file system is configured for the scheme {scheme!r}; configure one for the "
    "session (its Hadoop settings, e.g. spark.hadoop.fs.{scheme}.impl, under "
    "[run.spark_conf] or dp-release run --conf) or give a URI of a file system it has",
    "table": "no such table in the session's catalog; check input.table (the database and "
    "table name) and the session's catalog settings (spark.sql.catalogImplementation, "
    "spark.sql.warehouse.dir) under [run.spark_conf] or --conf",
    "path": "no such file or folder on its file system; give the path of the input "
    "(input.path or --input)",
    "access": "access was refused (missing or failing credentials, or no permission to list "
    "it); check the credentials the session uses (set them in the environment or a "
    "credential provider, not in the spec) and the permissions of the path",
    "unreachable": "its file system cannot be reached (connection refused, unknown host or a "
    "timeout); check the URI's host and port, the network, and that the store is up",
}

# What an output's message says of each kind, with its fix.
_OUTPUT_RULES = {
    "scheme": _INPUT_RULES["scheme"],
    "path": "no such file, folder or bucket on its file system, and the folder cannot be "
    "created there; give an output whose bucket or parent folder exists (output.dir or "
    "--output)",
    "access": "access was refused (missing or failing credentials, or no permission to "
    "write there); check the credentials the session uses (set them in the environment "
    "or a credential provider, not in the spec or the URI), and grant this job write "
    "access there or name another output",
    "unreachable": _INPUT_RULES["unreachable"],
}

# Python's errors whose class or number names a kind (pyarrow raises OSError's subclasses).
_ERRNO_KINDS = {
    errno.ENOENT: "path",
    errno.ENOTDIR: "path",
    errno.EACCES: "access",
    errno.EPERM: "access",
    errno.ECONNREFUSED: "unreachable",
    errno.ECONNRESET: "unreachable",
    errno.EHOSTUNREACH: "unreachable",
    errno.ENETUNREACH: "unreachable",
    errno.ETIMEDOUT: "unreachable",
}


def failure_kind(text: str) -> str | None:
    """The kind of failure ``text`` shows (``scheme``, ``table``, ``path``, ``access``,
    ``unreachable``), or None; ``text`` is only matched, never returned."""
    for kind, pattern in _KINDS:
        if re.search(pattern, text):
            return kind
    return None


def failure_rule(text: str, scheme: str = "") -> str | None:
    """The rule (one line, with its fix) of the first kind of failure ``text`` shows, or None.

    ``text`` is the error's class and message (Spark: also the Java exception's); it
    is only matched, never returned. ``scheme`` fills the no-file-system rule.
    """
    kind = failure_kind(text)
    return None if kind is None else _INPUT_RULES[kind].format(scheme=scheme)


def error_text(error: BaseException, depth: int = 8) -> str:
    """``error``'s class and message, with its Java causes' classes and messages (py4j) and
    Spark's error condition (at most ``depth`` causes): what `failure_kind` matches (never
    shown)."""
    text = f"{type(error).__name__} {error}"
    with contextlib.suppress(Exception):
        for java in java_causes(error, depth):
            text += f" {java.getClass().getName()} {java.toString()}"
    condition = getattr(error, "getCondition", None)
    if callable(condition):
        with contextlib.suppress(Exception):
            text += f" {condition()}"
    return text


def error_kind(error: BaseException) -> str | None:
    """The kind of failure ``error`` shows: by its class and number for Python's ``OSError``
    (``PermissionError``, ``FileNotFoundError``, ``ConnectionError``, ``ECONNREFUSED``),
    else by `error_text` along its Java causes."""
    if isinstance(error, PermissionError):
        return "access"
    if isinstance(error, FileNotFoundError | NotADirectoryError):
        return "path"
    if isinstance(error, ConnectionError | TimeoutError):
        return "unreachable"
    if isinstance(error, OSError) and error.errno in _ERRNO_KINDS:
        return _ERRNO_KINDS[error.errno]
    return failure_kind(error_text(error))


def output_failure_rule(
    error: BaseException, scheme: str = "", creating: bool = True
) -> str | None:
    """What an output's message says of ``error`` (one line, with its fix), or None when
    it is of no known kind. A missing file or folder is a kind only when ``creating``
    (opening the output, making a folder or writing a file there: its parent or bucket
    is missing); reading or listing one is the caller's to name. The error's text is only
    matched, never returned."""
    kind = error_kind(error)
    if kind == "path" and not creating:
        return None
    rule = _OUTPUT_RULES.get(kind) if kind is not None else None
    return None if rule is None else rule.format(scheme=scheme)
