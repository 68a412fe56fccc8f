"""Why a store refused or failed to list or read an input, from an error's text (never shown).

Spark's, Hadoop's and pyarrow's messages can quote credentials (a URI's user info,
a signed request), internal addresses and bucket or key names, so none is shown:
`failure_rule` matches the error's class and text against known kinds of failure
(no file system for the scheme, no such table, no such path, refused credentials or
permissions, an unreachable store) and returns the one-line rule a message names,
with its fix; None when the failure is of no known kind.
"""

from __future__ import annotations

import re

__all__ = ["failure_rule"]

# The first rule whose pattern matches the error's class and text names the problem.
_RULES = (
    (
        r"UnsupportedFileSystemException|No FileSystem for scheme",
        "no file system is configured for the scheme {scheme!r}; configure one for the "
        "session (its Hadoop settings, e.g. spark.hadoop.fs.{scheme}.impl, under "
        "[run.spark_conf] or dp-release run --conf) or give a URI of a file system it has",
    ),
    (
        r"TABLE_OR_VIEW_NOT_FOUND|NoSuchTableException|SCHEMA_NOT_FOUND|NoSuchDatabaseException",
        "no such table in the session's catalog; check input.table (the database and "
        "table name) and the session's catalog settings (spark.sql.catalogImplementation, "
        "spark.sql.warehouse.dir) under [run.spark_conf] or --conf",
    ),
    (
        r"PATH_NOT_FOUND|FileNotFoundException|Path does not exist|NO_SUCH_BUCKET|"
        r"NoSuchBucket|NoSuchKey",
        "no such file or folder on its file system; give the path of the input "
        "(input.path or --input)",
    ),
    (
        r"AccessDenied|ACCESS_DENIED|AccessControlException|Forbidden|\b403\b|\b401\b|"
        r"Unauthori[sz]ed|[Cc]redential|InvalidAccessKey|INVALID_ACCESS_KEY|"
        r"SignatureDoesNotMatch|SIGNATURE_DOES_NOT_MATCH|ExpiredToken|EXPIRED_TOKEN|"
        r"Permission denied|LoginException|Login failed|Login incorrect",
        "access was refused (missing or failing credentials, or no permission to list "
        "it); check the credentials the session uses (set them in the environment or a "
        "credential provider, not in the spec) and the permissions of the path",
    ),
    (
        r"ConnectException|UnknownHost|NoRouteToHost|SocketTimeout|ConnectTimeout|"
        r"Connection refused|timed out|Unable to execute HTTP request|NETWORK_CONNECTION|"
        r"Could not connect|Couldn't connect|Could not resolve host",
        "its file system cannot be reached (connection refused, unknown host or a "
        "timeout); check the URI's host and port, the network, and that the store is up",
    ),
)


def failure_rule(text: str, scheme: str = "") -> str | None:
    """The rule (one line, with its fix) of the first kind of failure ``text`` shows, or None.

    ``text`` is the error's class and message (Spark: also the Java exception's); it
    is only matched, never returned. ``scheme`` fills the no-file-system rule.
    """
    for pattern, rule in _RULES:
        if re.search(pattern, text):
            return rule.format(scheme=scheme)
    return None
