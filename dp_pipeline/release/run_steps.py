"""Two steps of a release run after its tables are computed: the input checked unchanged,
and the tables post-processed (`dp_pipeline.release.run` calls them in its order)."""

from __future__ import annotations

import time

from dp_pipeline.errors import ProblemListError
from dp_pipeline.release.sources.fingerprint import FileRangeError
from dp_pipeline.release.tables.consistency import consistent_results, postprocess_on_spark
from dp_pipeline.release.tables.engines import InputChangedError
from dp_pipeline.release.tables.streamed import StreamedTable

__all__ = ["check_input_unchanged", "postprocess_results"]


def check_input_unchanged(spec, master, source, fingerprint: str) -> None:
    """Raise `InputChangedError` unless the input is still the files and bytes fingerprinted
    (``fingerprint``) before the tables were read (charged: the data was read)."""
    # The engines read the input more than once (Spark: the unit check, then the
    # tables). A file changed or added in between could let a unit counted as having
    # one row contribute more, so the input must be the files and bytes fingerprinted.
    # The list first, then the bytes, hashed again where they are (executors for Spark):
    # sizes and modification times alone can be kept by a rewrite, so only the content
    # digest shows that no byte changed.
    source.check_unchanged(source.list_files(), spec.release_id)
    try:
        again = source.fingerprint(master)
    except (ProblemListError, FileRangeError, OSError):
        # A file vanished or shrank while it was hashed again: changed, like any other
        # difference (charged, nothing published), never a bare error of the reader.
        again = None
    if again != fingerprint:
        raise InputChangedError(
            f"input {source.where!r} changed while release {spec.release_id!r} was "
            f"running (its keyed fingerprint differs from the one taken before reading); "
            f"nothing was published, and the reservation stays spent (the data was read); "
            f"run a new release id on an input that is not being written to"
        )


def postprocess_results(spec, plan, results, source, progress, timings: dict[str, float]):
    """The tables made consistent (`consistent_results`, no privacy cost: post-processing of
    DP output), and what was done; the time taken is recorded in ``timings`` (s)."""
    started = time.perf_counter()
    results, postprocessing = consistent_results(spec, plan, results, source.spark)
    if postprocessing:
        timings["postprocess"] = time.perf_counter() - started
        where = "on Spark, one task per top-level group" if postprocess_on_spark(spec) else ""
        sets = bool(spec.postprocess.tables) + len(spec.postprocess.sum_sets)
        progress(
            f"post-processed {len(postprocessing['tables'])} "
            f"{'' if spec.postprocess.sums else 'count '}table(s) into "
            f"{'one consistent set' if sets == 1 else f'{sets} consistent sets'} "
            f"({postprocessing['method']}) {where + ' ' if where else ''}"
            f"in {timings['postprocess']:.2f} s"
            + (
                " (its second pass runs as the tables are written)"
                if any(isinstance(v, StreamedTable) for v in results.values())
                else ""
            )
        )
    return results, postprocessing
