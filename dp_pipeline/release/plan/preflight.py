"""Checks of a spec against the machine it will run on, made while planning.

`parse_spec` checks the spec's own rules; a spec can still name an input that
does not exist, an input of another format than the one it declares, an output
folder that is a file or where no file can be created, the Spark engine on an
install without PySpark, or (after ``--input``) an input that is the
hierarchy's public mapping.
Each of these would otherwise fail after the ledger reserved the budget, or
with a traceback. `check_machine` finds them all first (`plan_release` calls it,
so ``dp-release plan`` refuses what ``run`` would, except the input, which may
not exist yet when a release is planned: `input_problems` lists its problems
for the plan's notes) and raises one `SpecError`.

An output URI is probed by `dp_pipeline.release.publish.probe.check_output` once the
engine's session runs (its Hadoop configuration is the session's), still before the
reservation.

An input that is no data file or folder (a device, a FIFO, a socket, a file of
``/proc``, ``/sys`` or ``/dev``, the dp_pipeline home, the master key file:
`dp_pipeline.release.input_kinds`) is refused here, before it is opened.

What it looks at is public: whether paths exist and what kind of file they are,
whether a probe file can be made and removed in the output folder, and the
first four bytes of a single input file (every Parquet file starts with
``PAR1`` whatever its rows hold). It reads no row and quotes nothing from any
file.
"""

from __future__ import annotations

import importlib.util
import os
import tempfile
from pathlib import Path

from dp_pipeline.release.input_kinds import special_location_problem
from dp_pipeline.release.spec.hierarchy import mapping_input_problem, mapping_is_input
from dp_pipeline.release.spec.limits import MAX_SYNTHETIC_PERSONS
from dp_pipeline.release.spec.model import ReleaseSpec, SpecError, format_of_path
from dp_pipeline.release.uris import is_uri

__all__ = [
    "PARQUET_MAGIC",
    "check_engine",
    "check_machine",
    "engine_problems",
    "input_problems",
]

PARQUET_MAGIC = b"PAR1"


def engine_problems(spec: ReleaseSpec) -> list[str]:
    """The spec's engine if this install cannot run it (Spark without PySpark), else none.

    Apart from `check_machine`: a plan is the same on every install (it reads no
    data and starts no engine), so only running needs the engine.
    """
    if spec.engine == "spark" and importlib.util.find_spec("pyspark") is None:
        return [
            'run.engine = "spark" (the default when [run] gives no engine): PySpark is not '
            'installed; set engine = "pandas" under [run] (or --engine pandas), or install '
            "PySpark (pip install 'dp_pipeline[spark]')"
        ]
    return []


def check_engine(spec: ReleaseSpec) -> None:
    """Raise `SpecError` when this install cannot run the spec's engine (before any read)."""
    problems = engine_problems(spec)
    if problems:
        raise SpecError(problems, spec.source)


def check_machine(spec: ReleaseSpec, *, input_present: bool = True) -> None:
    """Raise `SpecError` naming each field the machine cannot honour (see the module doc).

    ``input_present=False``: the input may not exist yet (``dp-release plan`` of a
    scheduled release before its file arrives); `input_problems` then reports it apart.
    """
    problems: list[str] = []
    if input_present:
        problems.extend(input_problems(spec))
    hierarchy = spec.hierarchy
    # Again here: --input may name the mapping after the spec was read.
    if hierarchy is not None and mapping_is_input(hierarchy.location, spec.input_path):
        problems.append(mapping_input_problem(hierarchy.mapping, spec.input_path))
    if not 1 <= spec.synthetic_persons <= MAX_SYNTHETIC_PERSONS:
        problems.append(
            f"input.synthetic_persons = {spec.synthetic_persons} (or --persons): must be "
            f"between 1 and {MAX_SYNTHETIC_PERSONS:,}"
        )
    problems.extend(_local_output_problems(spec))
    for field, flag, value in (
        ("run.ledger", "--ledger", spec.ledger_path),
        ("run.key_file", "--key-file", spec.key_file),
    ):
        blocked = _file_on_the_way(Path(value).parent)
        if Path(value).is_dir():
            problems.append(
                f"{field} = {value!r} (or {flag}): is a folder; name a file (created if absent)"
            )
        elif blocked is not None:
            problems.append(
                f"{field} = {value!r} (or {flag}): {str(blocked)!r} is a file, not a folder; "
                "name a file in a folder (folders are created if absent)"
            )
    if problems:
        raise SpecError(problems, spec.source)


def _local_output_problems(spec: ReleaseSpec) -> list[str]:
    """A local output folder that is a file, or where no file can be created (a probe)."""
    if is_uri(spec.output_dir):
        return []  # probed through its file system once the engine runs (`check_output`)
    output = Path(spec.output_dir)
    blocked = _file_on_the_way(output / spec.release_id)
    if blocked is not None:
        return [
            f"output.dir = {spec.output_dir!r} (or --output): {str(blocked)!r} is an existing "
            f"file; a release is written to the folder <output.dir>/<release id>/, so "
            "name a folder (it is created if absent)"
        ]
    # The release folder is renamed into <output.dir>, created under its nearest
    # existing folder: a probe file made and removed there shows the run can write.
    existing = next(path for path in (output, *output.parents, Path(".")) if path.exists())
    try:
        handle, probe = tempfile.mkstemp(prefix=".dp-release-probe-", dir=existing)
        os.close(handle)
        os.unlink(probe)
    except OSError as error:
        return [
            f"output.dir = {spec.output_dir!r} (or --output): cannot be written (a probe "
            f"file could not be created in {str(existing)!r}: {type(error).__name__}); grant "
            "this job write access there or name another folder"
        ]
    return []


def _file_on_the_way(folder: Path) -> Path | None:
    """The existing non-folder among ``folder`` and its parents, if any (creating the folder
    would fail there)."""
    for path in (folder, *folder.parents):
        if path.exists():
            return None if path.is_dir() else path
    return None


def input_problems(spec: ReleaseSpec) -> list[str]:
    """What is wrong with the spec's local input (not a regular file or folder, missing,
    another format), or []."""
    if not spec.input_path:
        return []
    special = special_location_problem(spec.input_path, spec.key_file, spec.ledger_path)
    if special is not None:
        return [f"input.path = {spec.input_path!r} (or --input): {special}"]
    if "://" in spec.input_path:
        return []
    return _input_problems(Path(spec.input_path), spec.input_format)


def _input_problems(path: Path, declared: str) -> list[str]:
    field = f"input.path = {str(path)!r} (or --input)"
    if not path.exists():
        return [
            f"{field}: no such file or folder; give the path of the input (a Parquet file or "
            "folder, or a CSV file), or leave input.path out for synthetic data"
        ]
    named = format_of_path(str(path))
    if named is not None and named != declared:
        return [
            f"input.format = {declared!r} (or --format): the input {str(path)!r} is named as "
            f"a {named} file; use --format {named} (or input.format = {named!r})"
        ]
    if path.is_file():
        try:
            with path.open("rb") as handle:
                parquet = handle.read(len(PARQUET_MAGIC)) == PARQUET_MAGIC
        except OSError:
            return [f"{field}: the file cannot be opened; check its permissions"]
        if declared == "parquet" and not parquet:
            return [
                f"input.format = 'parquet' (or --format): {str(path)!r} is not a Parquet "
                "file (it does not start with PAR1); for a CSV file use --format csv"
            ]
        if declared == "csv" and parquet:
            return [
                f"input.format = 'csv' (or --format): {str(path)!r} is a Parquet file; use "
                "--format parquet"
            ]
    return []
