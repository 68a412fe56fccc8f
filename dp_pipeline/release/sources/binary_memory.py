"""How many bytes Spark's ``binaryFile`` reader may hash at once, and which files it cannot.

The fingerprint of a file outside the local file system is computed in the JVM from
Spark's ``binaryFile`` rows (`dp_pipeline.release.sources.spark_files`): a row holds
the whole file as one byte array, which Spark copies into its row buffer (grown by
doubling) before ``substring`` copies each range out to hash it. A file of ``n``
bytes therefore takes about `HOLD_FACTOR` ``* n`` of the heap of the JVM its task runs
in while it is hashed (measured: a 124 MB file does not fit a 600 MiB heap; two at
once fit 2 GiB), and one byte array holds at most `BINARY_FILE_BYTES`.

So the files are hashed in groups, one Spark job each, whose needs add up to at
most `hashing_budget` of that heap: the driver's (``spark.driver.memory``) in local
mode, an executor's (``spark.executor.memory``) on a cluster; one job for all when
the tasks one JVM runs at once (`task_slots`) fit it anyway. A job's large files
are one task each (binaryFile does not split a file), so however many tasks run
at once, one JVM holds at most that much. (Fewer tasks over more files do not
help: a task's row buffer keeps the largest file's size and grows again for the
next.) A file that needs more than the budget alone, or is larger than
`BINARY_FILE_BYTES`, is refused before the reservation (`too_large_problem`), naming
the file and the setting to raise.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Sequence

__all__ = [
    "BINARY_FILE_BYTES",
    "HOLD_FACTOR",
    "RESERVED_BYTES",
    "file_groups",
    "hashing_budget",
    "heap_setting",
    "memory_bytes",
    "task_slots",
    "too_large_problem",
]

# The most bytes one JVM byte array (a binaryFile row's content) holds.
BINARY_FILE_BYTES = 2**31 - 1
# Heap bytes held per byte of a file while it is hashed (its content, the row buffer
# grown to twice the content, a range's copy).
HOLD_FACTOR = 4
# Spark's reserved system memory (RESERVED_SYSTEM_MEMORY_BYTES), never for tasks.
RESERVED_BYTES = 300 * 2**20
# Of the rest, the share the hashing may take (Spark's spark.memory.fraction default).
HASHING_SHARE = 0.6
_UNITS = {"": 2**20, "b": 1, "k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40, "p": 2**50}


def memory_bytes(value: str) -> int | None:
    """A Spark memory setting (``"2g"``, ``"512m"``, ``"4096"`` in MiB) in bytes; None if
    it is not one."""
    match = re.fullmatch(r"\s*(\d+)\s*([bkmgtp]?)b?\s*", str(value).lower())
    if match is None:
        return None
    return int(match.group(1)) * _UNITS[match.group(2)]


def heap_setting(master: str) -> str:
    """The setting that sizes the heap hashing tasks run in: the driver's in local mode."""
    local = master == "local" or master.startswith("local[") or master.startswith("local-")
    return "spark.driver.memory" if local else "spark.executor.memory"


def hashing_budget(heap: int) -> int:
    """The bytes of a heap of ``heap`` bytes that files being hashed may take at once."""
    return max(0, int((heap - RESERVED_BYTES) * HASHING_SHARE))


def _need(size: int) -> int:
    return HOLD_FACTOR * size


def task_slots(master: str, executor_cores: str | None, task_cpus: str | None) -> int | None:
    """How many tasks one JVM runs at once: N of ``local[N]`` (``local[*]``: the machine's
    cores), else an executor's cores per task; None when the settings do not say."""
    if master == "local":
        return 1
    match = re.fullmatch(r"local\[(\d+|\*)(?:,\d+)?\]", master)
    if match:
        return (os.cpu_count() or 1) if match.group(1) == "*" else int(match.group(1))
    if executor_cores is None or not str(executor_cores).isdigit():
        return None
    per_task = int(task_cpus) if task_cpus is not None and str(task_cpus).isdigit() else 1
    return max(1, int(executor_cores) // max(1, per_task))


def file_groups(
    sizes: Sequence[tuple[str, int]], budget: int, slots: int | None = None
) -> list[list[str]]:
    """The files in groups, in order, each group's needs (`HOLD_FACTOR` x size) adding up
    to at most ``budget`` (a file that needs more is a group of its own); one group when
    ``slots`` tasks at once, each on the largest file, fit the budget."""
    if slots is not None and slots * _need(max((s for _, s in sizes), default=0)) <= budget:
        return [[uri for uri, _ in sizes]] if sizes else []
    groups: list[list[str]] = []
    held = budget + 1
    for uri, size in sizes:
        if held + _need(size) > budget:
            groups.append([])
            held = 0
        groups[-1].append(uri)
        held += _need(size)
    return groups


def _shown_size(size: int) -> str:
    return f"{size / 2**30:.1f} GiB" if size >= 2**30 else f"{size / 2**20:.0f} MiB"


def _setting_value(heap: int) -> str:
    for unit, scale in (("g", 2**30), ("m", 2**20), ("k", 2**10)):
        if heap % scale == 0:
            return f"{heap // scale}{unit}"
    return str(heap)


def _heap_for(size: int) -> str:
    """The smallest heap setting (whole GiB) whose budget holds one file of ``size``."""
    heap = RESERVED_BYTES + _need(size) / HASHING_SHARE
    return f"{math.ceil(heap / 2**30)}g"


def too_large_problem(
    sizes: Sequence[tuple[str, str, int]], setting: str, heap: int | None
) -> str | None:
    """The one-line rule a file breaks if one is too large to fingerprint, else None.

    ``sizes``: (the file as messages show it, its URI, its size). ``setting`` and
    ``heap``: the heap hashing tasks run in (`heap_setting`, its bytes; None: unknown,
    only `BINARY_FILE_BYTES` is checked). The message names the largest such file and
    how many there are; their sizes are metadata (no byte of a file is read).
    """
    over = [item for item in sizes if item[2] > BINARY_FILE_BYTES]
    if over:
        shown, _, size = max(over, key=lambda item: item[2])
        return (
            f"{len(over)} file(s) are larger than 2 GiB, the most Spark's binaryFile reader "
            f"(which fingerprints files outside the local file system) holds, e.g. {shown!r} "
            f"({_shown_size(size)}); write the input as smaller files (Spark writes parts of "
            "about 128 MB)"
        )
    if heap is None:
        return None
    budget = hashing_budget(heap)
    over = [item for item in sizes if _need(item[2]) > budget]
    if not over:
        return None
    shown, _, size = max(over, key=lambda item: item[2])
    return (
        f"{len(over)} file(s) are too large to fingerprint with {setting} = "
        f"{_setting_value(heap)}, e.g. {shown!r} ({_shown_size(size)}): Spark's binaryFile reader "
        f"holds a whole file, about {HOLD_FACTOR} times its size, in the heap; raise "
        f"{setting} to {_heap_for(size)} or more (--conf {setting}={_heap_for(size)} or "
        "[run.spark_conf]), or write the input as smaller files (Spark writes parts of "
        "about 128 MB)"
    )
