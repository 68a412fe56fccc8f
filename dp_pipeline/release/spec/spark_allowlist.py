"""Which Spark settings a spec's ``[run.spark_conf]`` may give: an allowlist.

A spec is hostile input (docs/security_model.md): its author chooses the
statistics and names the input, but must not run code as the job's user. Many
Spark and Hadoop settings do exactly that: JVM options
(``-XX:OnOutOfMemoryError=<shell command>``), class paths, jars, packages and
their repositories, Python executables and executor environments, listeners,
plugins, extensions, anything naming a class (``*.class``, ``fs.*.impl``,
``*.credentials.provider``, ``io.compression.codecs``), serializers,
``spark.submit.*``, ``spark.files`` / ``spark.archives``, redaction rules, and
the UI, event-log and scratch-folder settings that write files. Those belong to
the operator, who owns the machine: ``dp-release run --conf``,
``spark-defaults.conf`` or the environment, none of which is checked here.

So a spec's setting is accepted only when (`spec_setting_problem`):

1. its key names no code-loading family (`_CODE_WORDS`, matched anywhere in the
   lower-cased key, so an allowed prefix never lets one through:
   ``spark.sql.adaptive.customCostEvaluatorClass`` is refused);
2. its key is on the allowlist: an exact key of `SPEC_KEYS`, a prefix of
   `SPEC_PREFIXES`, or ``spark.hadoop.`` followed by a Hadoop key of
   `HADOOP_KEYS` / `HADOOP_PREFIXES` (file-system mounts and the S3A
   connector's non-executable settings: endpoints, regions, path style, keys);
3. its value holds no ``${`` (Spark and Hadoop substitute ``${env:NAME}``,
   ``${system:NAME}`` and ``${env.NAME}`` in values, which would copy the
   job's environment, a master key in ``DP_PIPELINE_MASTER_KEY`` included,
   into a path or a message).

``spark.sql.catalogImplementation`` is not on the list: ``hive`` starts Hive's
metastore client, which reads the operator's ``hive-site.xml`` and may start an
embedded Derby writing ``metastore_db`` into the working directory; the catalog
a session uses is the operator's choice. ``spark.sql.catalog.*`` names classes.
``spark.hadoop.fs.defaultFS`` is not either: it would move every relative path,
the output folder's included.
"""

from __future__ import annotations

import re

__all__ = [
    "HADOOP_KEYS",
    "HADOOP_PREFIXES",
    "SPEC_KEYS",
    "SPEC_PREFIXES",
    "spec_setting_problem",
]

# Words that mark a setting that loads or runs code, or writes files, whatever its prefix.
_CODE_WORDS = re.compile(
    r"java|jar|class|\.impl|impl$|package|repositor|ivy|python|executorenv|"
    r"listener|plugin|extension|serializer|provider|factory|codec|command|script|"
    r"submit|redaction|eventlog|\.ui\.|^spark\.ui|\.log\.|local\.dir|archives|"
    r"^spark\.files|driver\.extra|executor\.extra|appmasterenv|yarn\.dist",
    re.I,
)

# Exact keys: the SQL settings that decide what a query computes or how fast it runs,
# the catalog's default and warehouse, and resource sizes.
SPEC_KEYS = frozenset(
    {
        "spark.sql.shuffle.partitions",
        "spark.sql.session.timeZone",
        "spark.sql.ansi.enabled",
        "spark.sql.caseSensitive",
        "spark.sql.warehouse.dir",
        "spark.sql.defaultCatalog",
        "spark.sql.autoBroadcastJoinThreshold",
        "spark.sql.broadcastTimeout",
        "spark.sql.execution.arrow.maxRecordsPerBatch",
        "spark.sql.execution.arrow.pyspark.enabled",
        "spark.sql.mapKeyDedupPolicy",
        "spark.sql.storeAssignmentPolicy",
        "spark.driver.memory",
        "spark.driver.memoryOverhead",
        "spark.driver.maxResultSize",
        "spark.driver.cores",
        "spark.executor.memory",
        "spark.executor.memoryOverhead",
        "spark.executor.cores",
        "spark.executor.instances",
        "spark.executor.heartbeatInterval",
        "spark.cores.max",
        "spark.default.parallelism",
        "spark.task.cpus",
        "spark.task.maxFailures",
        "spark.network.timeout",
    }
)
# Prefixes (each ends with "."): families of data-only SQL, memory and scaling settings.
SPEC_PREFIXES = (
    "spark.sql.adaptive.",
    "spark.sql.files.",
    "spark.sql.codegen.",
    "spark.sql.inMemoryColumnarStorage.",
    "spark.sql.parquet.",
    "spark.sql.csv.",
    "spark.sql.legacy.",
    "spark.memory.",
    "spark.dynamicAllocation.",
)
# Hadoop keys after "spark.hadoop.": mounts and the S3A connector's plain settings.
HADOOP_KEYS = frozenset(
    {
        "fs.s3a.endpoint",
        "fs.s3a.endpoint.region",
        "fs.s3a.path.style.access",
        "fs.s3a.connection.ssl.enabled",
        "fs.s3a.connection.maximum",
        "fs.s3a.threads.max",
        "fs.s3a.readahead.range",
        "fs.s3a.block.size",
        "fs.s3a.access.key",
        "fs.s3a.secret.key",
        "fs.s3a.session.token",
        "fs.s3a.change.detection.mode",
    }
)
HADOOP_PREFIXES = ("fs.viewfs.mounttable.",)
_S3A_BUCKET = re.compile(r"^fs\.s3a\.bucket\.[A-Za-z0-9.\-_]+?\.(?=[a-z])")

_OPERATOR = (
    "it belongs to the operator: pass it to dp-release run --conf, or set it in "
    "spark-defaults.conf or the environment"
)


def _allowed(key: str) -> bool:
    if key in SPEC_KEYS or key.startswith(SPEC_PREFIXES):
        return True
    if not key.startswith("spark.hadoop."):
        return False
    hadoop = key[len("spark.hadoop.") :]
    # A per-bucket S3A setting (fs.s3a.bucket.NAME.endpoint) follows the global one's rule.
    hadoop = _S3A_BUCKET.sub("fs.s3a.", hadoop, count=1)
    return hadoop in HADOOP_KEYS or hadoop.startswith(HADOOP_PREFIXES)


def spec_setting_problem(key: str, value: str) -> str | None:
    """Why a spec may not give this Spark setting (key only, never its value), or None.

    Guarantee: a setting accepted here names no class, JVM option, executable,
    class path or file Spark writes, so a spec's settings cannot make the driver
    or an executor run code chosen by the spec's author (see the module doc).
    """
    shown = f"run.spark_conf {key!r}"
    if _CODE_WORDS.search(key):
        return (
            f"{shown}: a spec may not set it (JVM options, class paths, jars, packages, "
            "Python executables, listeners, plugins, classes and log or UI files load or "
            f"run code, or write files, as the job's user); {_OPERATOR}"
        )
    if not _allowed(key):
        return (
            f"{shown}: not on the allowlist of settings a spec may give (SQL, memory, "
            "file-system mount and S3A endpoint settings; docs/spec_reference.md, [run]); "
            f"{_OPERATOR}"
        )
    if "${" in value:
        return (
            f"{shown}: the value holds '${{', which Spark and Hadoop replace with an "
            "environment variable or system property; write the value literally"
        )
    return None
