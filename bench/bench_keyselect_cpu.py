"""CPU seconds of a process and all its descendants (a Spark driver, its JVM, the Python
workers), read from /proc: a figure the machine's load does not inflate the way it
inflates wall time. Imports nothing of dp_pipeline, so PipelineDP's own virtualenv uses
it too (`bench/pipelinedp_select.py`).

Each process counts its user + system time and that of its children it has already
waited for (``cutime``/``cstime``: Python workers that exited); live children are
counted on their own, so no CPU second is counted twice.
"""

from __future__ import annotations

import os

__all__ = ["tree_cpu_seconds"]

_TICKS = os.sysconf("SC_CLK_TCK")


def _stat(pid: int) -> tuple[int, int] | None:
    """(parent pid, utime + stime + cutime + cstime in ticks), None if the process is gone."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            text = handle.read()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()  # the command name may hold spaces
    return int(fields[1]), sum(int(fields[i]) for i in (11, 12, 13, 14))


def tree_cpu_seconds(root: int | None = None) -> float:
    """CPU seconds used so far by ``root`` (default: this process) and its descendants."""
    root = os.getpid() if root is None else root
    parents: dict[int, int] = {}
    ticks: dict[int, int] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            stat = _stat(int(name))
            if stat is not None:
                parents[int(name)], ticks[int(name)] = stat
    total = 0
    for pid, used in ticks.items():
        walker = pid
        while walker not in (root, 0, 1) and walker in parents:
            walker = parents[walker]
        if walker == root:
            total += used
    return total / _TICKS
