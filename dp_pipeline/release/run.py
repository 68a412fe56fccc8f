"""Running a release: the release protocol as a state machine.

``planned -> reserved -> reading -> noised -> publishing -> committed``, or
``aborted`` (by the operator, `Ledger.abort`) only while nothing was read.
Order matters for privacy and for crashes:

1. **Planned.** The spec is validated and the plan proven (`plan_release`)
   before anything else; a bad spec or budget never reaches the ledger or the data.
2. **Reserved.** The run takes the release id's lease before the engine starts
   (`dp_pipeline.release.run_lease`: held until it returns, so no other run of
   the id and no abort overlaps it). The engine lists the files it will read;
   their keyed fingerprint (bytes only, no parsing), the spec and the key make the
   release's identity (`dp_pipeline.release.ledger.identity`). The run refuses an
   output folder that is not an earlier copy of this release
   (`dp_pipeline.release.reemit.check_earlier_copy`), removes what a
   killed run of exactly this id left hidden, and the ledger reserves the
   spend in one transaction under a new run token, refusing it above the cap
   or when the release id is recorded with another identity.
3. **Reading**, recorded just before the engine reads rows: from then on the
   run is charged whatever happens. A failure never returns the budget; the
   reservation stays spent and the same release id resumes it with the same
   noise (deterministic in master key, release identity, table and noise
   partition). The data is read, bounded, aggregated over the full declared
   domain and noised by the engine.
4. **Noised.** The count tables of ``[postprocess]`` are made consistent on
   the driver, or on Spark one top-level geography per task when they are
   large (`dp_pipeline.release.tables.consistency`: post-processing, no privacy cost).
   A Spark release that aggregated on the executors then keeps those tables
   on Spark from the noise to the writer (`dp_pipeline.release.tables.streamed`).
5. **Publishing.** Outputs go to a hidden, owner-only folder; a table kept on
   Spark is written one row group at a time (`outputs.write_batches`, the
   same bytes as the driver's one-call write), so the driver never holds it
   whole; ``manifest.json`` with every file's SHA-256 is written last
   (`dp_pipeline.release.publish.manifest`). A release id already published must
   reproduce the recorded bytes, or nothing is published; a committed one whose
   copy at the output is intact is not recomputed (`dp_pipeline.release.reemit`),
   and one that must be is refused first if another engine or version would
   recompute it. The ledger records
   that publication starts and the manifest (only the token holder can), the
   folder is renamed into place, and only then is the ledger entry
   **committed**. An output URI (``viewfs://``, ``s3a://``, ...) has no
   rename: the folder is made in a private staging folder beside the ledger and
   copied to ``<output>/<release id>/`` with ``manifest.json`` last
   (`dp_pipeline.release.publish.remote`), its file system probed before the
   reservation (`check_output`); the ledger commits after the manifest. A job
   killed anywhere leaves either no release or a complete one, and a
   reservation that the next run of the same release id resumes (same noise,
   no new spend).
"""

from __future__ import annotations

import sys
import time
from contextlib import ExitStack, suppress
from dataclasses import dataclass, field, replace
from pathlib import Path

import pyarrow as pa

from dp_pipeline.engines.spark.session.failures import lost_jvm_unlogged
from dp_pipeline.query.diagnostics import Diagnostics
from dp_pipeline.release.key_binding import bind_key, check_key_place
from dp_pipeline.release.keys import load_or_create_master_key, private_folder
from dp_pipeline.release.ledger.budget import LedgerError
from dp_pipeline.release.ledger.identity import release_identity
from dp_pipeline.release.ledger.location import ledger_location, local_ledger_folder
from dp_pipeline.release.ledger.records import Reservation
from dp_pipeline.release.ledger.store import Ledger
from dp_pipeline.release.locations import legacy_ledger_problem
from dp_pipeline.release.outcome import REFUSED_AFTER_READING
from dp_pipeline.release.plan.preflight import check_engine, check_output
from dp_pipeline.release.plan.release_plan import ReleasePlan, fitting_budget_text, plan_release
from dp_pipeline.release.publish.manifest import (
    check_replaceable,
    check_same_bytes,
    write_manifest,
)
from dp_pipeline.release.publish.outputs import (
    ROW_GROUP_ROWS,
    AtomicReleaseDirectory,
    clean_stale,
    write_batches,
    write_json,
    write_table,
)
from dp_pipeline.release.publish.remote import (
    RemoteReleaseDirectory,
    check_remote_replaceable,
    clean_remote_stale,
)
from dp_pipeline.release.read import read_release
from dp_pipeline.release.reemit import check_earlier_copy, check_maker, intact_copy, made_by
from dp_pipeline.release.report.accuracy import (
    TableAccuracy,
    accuracy_summary,
    table_accuracies,
)
from dp_pipeline.release.report.writer import html_report, privacy_report
from dp_pipeline.release.run_lease import held_lease
from dp_pipeline.release.sources.fingerprint import FileRangeError
from dp_pipeline.release.sources.schema import (
    check_input_columns,
    published_table,
    table_schema,
)
from dp_pipeline.release.sources.source import check_listed_kinds, kept_log
from dp_pipeline.release.sources.synthetic import check_sample, sealed_census_sample
from dp_pipeline.release.spec.model import (
    ENGINES,
    INPUT_FORMATS,
    ReleaseSpec,
    SpecError,
    format_of_path,
)
from dp_pipeline.release.spec.spark_conf import SparkConf, parse_conf_arguments
from dp_pipeline.release.tables import engines
from dp_pipeline.release.tables.consistency import (
    consistent_results,
    postprocess_on_spark,
)
from dp_pipeline.release.tables.engines import InputChangedError, open_input
from dp_pipeline.release.tables.streamed import StreamedTable, close_tables

__all__ = ["InputChangedError", "Progress", "RunResult", "RunTrace", "read_release", "run_release"]


def _checkpoint(name: str) -> None:
    """A named point of the protocol; does nothing.

    The crash tests run the CLI in a child process that replaces this function
    with one that stops or kills the process at ``name``: "after_reserve",
    "after_noise", "mid_table" (a row group of a table kept on Spark is
    written), "before_publish" (the outputs and manifest are written, the
    ledger does not yet record publication), the steps of an output URI's
    publication (`RemoteReleaseDirectory.publish`: "before_upload",
    "mid_upload", "after_hidden_manifest", "before_final", "mid_copy",
    "after_manifest") or "after_publish" (the ledger not yet committed).
    """


class Progress:
    """Timestamped progress lines on stderr (visible on long runs)."""

    def __init__(self, stream=None, quiet: bool = False) -> None:
        self.started = time.perf_counter()
        self.stream = stream or sys.stderr
        self.quiet = quiet

    def __call__(self, message: str) -> None:
        if not self.quiet:
            elapsed = time.perf_counter() - self.started
            try:
                print(f"[{elapsed:7.1f}s] {message}", file=self.stream, flush=True)
            except BrokenPipeError:
                # The reader went away (``2>&1 | head``): a charged run must not fail
                # for a progress line, so the rest of them are dropped.
                self.quiet = True


@dataclass(frozen=True)
class RunResult:
    """What a run did: where the release is, the ledger outcome, and phase timings (s)."""

    output: Path | str  # a local folder, or the URI of a release on another file system
    outcome: str  # "reserved" (new spend), "resumed" or "already_committed"
    plan: ReleasePlan
    reservation: Reservation
    report: dict
    timings: dict[str, float]
    # Per table: what the engine did to the rows (invalid rows dropped by reason,
    # clamping, bounding). Exact counts of the private data: never published or logged.
    diagnostics: dict[str, Diagnostics] = field(default_factory=dict)


@dataclass
class RunTrace:
    """How far a run got, for a caller that must say what a failure left behind.

    ``reservation`` is set as soon as the ledger reserved the release (or resumed
    it, or found it committed): from then on a failure leaves the reservation
    spent, and the same release id resumes it.
    """

    reservation: Reservation | None = None


def apply_overrides(spec: ReleaseSpec, **overrides) -> ReleaseSpec:
    """The spec with command-line overrides (None means keep the spec's value)."""
    if overrides.get("release_id"):
        spec = spec.with_release_id(overrides["release_id"])
    mapping = {
        "input_path": "input_path",
        "spark_conf": "spark_conf",
        "output_dir": "output_dir",
        "engine": "engine",
        "master": "master",
        "ledger_path": "ledger_path",
        "key_file": "key_file",
        "synthetic_persons": "synthetic_persons",
    }
    changes = {field: overrides[name] for name, field in mapping.items() if overrides.get(name)}
    if "input_path" in changes:
        changes["input_table"] = None  # --input replaces the spec's input, path or table
    if "spark_conf" in changes:
        conf = changes["spark_conf"]
        if not isinstance(conf, SparkConf):
            problems: list[str] = []
            conf = parse_conf_arguments(list(conf), problems)
            if problems:
                raise SpecError(problems, "command line")
        changes["spark_conf"] = spec.spark_conf.merged(conf)
    # A new input path brings its own format: --format, else what its name says
    # (``*.csv``, ``*.parquet``), else the spec's.
    if overrides.get("input_format"):
        if overrides["input_format"] not in INPUT_FORMATS:
            raise SpecError(
                [
                    f"--format {overrides['input_format']!r}: must be one of "
                    f"{', '.join(INPUT_FORMATS)}"
                ]
            )
        changes["input_format"] = overrides["input_format"]
    elif "input_path" in changes and format_of_path(changes["input_path"]):
        changes["input_format"] = format_of_path(changes["input_path"])
    if "engine" in changes and changes["engine"] not in ENGINES:
        raise SpecError([f"--engine {changes['engine']!r}: must be one of {', '.join(ENGINES)}"])
    if "synthetic_persons" in changes and changes["synthetic_persons"] < 1:
        raise SpecError([f"--persons {changes['synthetic_persons']}: must be >= 1"])
    return replace(spec, **changes) if changes else spec


def run_release(
    spec: ReleaseSpec,
    progress: Progress | None = None,
    spark=None,
    *,
    verbose: bool = False,
    trace: RunTrace | None = None,
) -> RunResult:
    """Run ``spec`` end to end (see the module docstring for the order of steps).

    ``spark`` is an existing SparkSession to use (engine "spark"); by default
    one is started in local mode (or on ``spec.master``) and stopped afterwards,
    its JVM's own log lines written to a file unless ``verbose``. ``trace``, if
    given, records the reservation as soon as it is made (`RunTrace`). A Spark
    session that dies under the run raises `EngineStoppedError` (one line: what
    happened and the fix).
    """
    # py4j's own traceback of the lost JVM says nothing more; the stack holds the lease.
    with lost_jvm_unlogged(), ExitStack() as held:
        return _run_release(spec, progress, spark, verbose=verbose, trace=trace, held=held)


def _run_release(spec, progress, spark, *, verbose, trace, held) -> RunResult:
    progress = progress or Progress()
    timings: dict[str, float] = {}
    clock = time.perf_counter()

    plan = plan_release(spec)
    check_engine(spec)  # before the key or any read
    timings["plan"] = plan.seconds
    progress(
        f"planned {len(plan.tables)} table(s), "
        f"{sum(t.table.cells for t in plan.tables):,} cells, in {plan.seconds:.3f} s "
        f"(epsilon {float(plan.epsilon_tight.upper):.4g} at delta {float(plan.report_delta):.3g})"
    )
    # A bad ledger URL is refused here, and a server ledger is reached here: an unreachable
    # server, refused credentials or a newer schema stop the run before the key or the input.
    location = ledger_location(spec.ledger_path)
    server = Ledger(location) if location.kind == "postgresql" else None
    master = _master_key(spec, progress, server)
    check_key_place(master, location)  # the key's bound ledger, before any engine starts
    if server is not None:
        server.key = master  # its rows are checked and sealed under the run's key

    synthetic = not spec.input_path and spec.input_table is None
    if synthetic:
        # The sample cache sits beside the ledger and the key: the folders it creates
        # are owner-only, as theirs are.
        home = local_ledger_folder(spec.ledger_path) or Path(spec.key_file).parent
        cache = private_folder(home / "samples")
        progress(f"no input given: synthetic census microdata, {spec.synthetic_persons:,} persons")
        # Verified against the seal written when it was generated (the truth in
        # accuracy.json is computed from it), else generated again.
        input_path, sample = sealed_census_sample(
            cache, spec.synthetic_persons, spec.synthetic_seed, master, progress
        )
        input_format = "parquet"
    else:
        sample = None
        # A path or URI as written (None: the spec's catalog table).
        input_path, input_format = spec.input_path or None, spec.input_format
    # The engine lists the files it will read; those exact files are fingerprinted, and
    # the release's identity (spec + fingerprint + key) is checked by the ledger before
    # any of their rows is read. A live run of the release id answers busy before that.
    held.enter_context(held_lease(spec.release_id, spec.ledger_path, server))
    source = open_input(spec, input_path, input_format, progress, spark, verbose=verbose)
    trace = trace if trace is not None else RunTrace()
    try:
        if not synthetic:  # the sample cache is in the home: only a named input is checked
            check_listed_kinds(spec.key_file, source, spec.ledger_path)
        result = _run_opened(
            spec,
            plan,
            master,
            source,
            synthetic,
            progress,
            timings,
            clock,
            sample=sample,
            ledger=server,
            trace=trace,
        )
    except Exception as error:
        # A session that died under the run (its JVM killed or out of memory) is named in
        # one line with the fix, not by py4j's traceback of the next call that failed.
        stopped = source.stopped(error, reserved=trace.reservation is not None)
        kept_log(stopped or error, source.close(failed=True))
        if stopped is not None:
            raise stopped from None
        raise
    except BaseException as error:
        kept_log(error, source.close(failed=True))
        raise
    source.close()
    return result


def _master_key(spec: ReleaseSpec, progress, server: Ledger | None = None):
    """The run's master key; no run starts on a ledger it cannot see, or with a new key
    beside a ledger that records releases or a key (SQLite or ``server``, before any
    engine starts: `dp_pipeline.release.locations`)."""
    problem = legacy_ledger_problem(spec.ledger_path, spec.key_file)
    if problem is not None:
        raise SpecError([problem], spec.source)
    local = ledger_location(spec.ledger_path).path
    recorded = False
    if server is not None:
        recorded = server.key_fingerprint() is not None or bool(server.history())
    elif local is not None and local.is_file():
        with Ledger(local) as ledger:  # closed at once: the run opens its own below
            recorded = ledger.key_fingerprint() is not None or bool(ledger.history())
    return load_or_create_master_key(
        spec.key_file,
        progress,
        ledger_with_releases=ledger_location(spec.ledger_path).shown if recorded else None,
    )


def _run_opened(
    spec,
    plan,
    master,
    source,
    synthetic,
    progress,
    timings,
    clock,
    sample=None,
    ledger=None,
    *,
    trace,
) -> RunResult:
    if source.table is None:  # a table's schema was checked by Spark when it was opened
        check_input_columns(spec, source.path, source.files, source.format)
    started = time.perf_counter()
    fingerprint, content = source.fingerprints(master)
    timings["fingerprint"] = time.perf_counter() - started
    progress(
        f"fingerprinted the input's {len(source.listed())} file(s) in "
        f"{timings['fingerprint']:.1f} s ({source.engine} engine)"
    )
    check_sample(source.path, sample, fingerprint)
    identity = release_identity(spec, plan.accountant.to_dict(), fingerprint, master.fingerprint)
    # An output URI is written through the session's file system: probed before the
    # reservation (nothing is reserved when the run could not publish).
    target = check_output(spec, source.spark)
    final = Path(spec.output_dir) / spec.release_id if target is None else None
    output = str(final.resolve()) if target is None else target.where(spec.release_id)
    staging = _staging(spec) if target is not None else None
    with ledger or Ledger(
        spec.ledger_path, key=master
    ) as ledger:  # the lease is held (`held_lease`)
        # Before anything is spent; the ledger's identity check (in reserve) names what
        # differs from an earlier release of this id, and publication checks its bytes.
        entry = ledger.entry(spec.release_id)
        check_earlier_copy(spec.release_id, identity, entry, final, target, output)
        if target is None:
            check_replaceable(final, spec.release_id)
        else:
            check_remote_replaceable(target, spec.release_id, identity.digest)
        bind_key(master, ledger)  # this ledger's own id, then recorded in the home
        leftovers = [str(path) for path in clean_stale(final or staging / spec.release_id)]
        if target is not None:
            leftovers += clean_remote_stale(target, spec.release_id)
        for leftover in leftovers:
            progress(f"removed {leftover}, left by an interrupted run")
        reservation = ledger.reserve(
            population=spec.population,
            release_id=spec.release_id,
            accountant=plan.accountant,
            fingerprint=fingerprint,
            cap=spec.cap,
            identity=identity,
            output=output,
            engine=spec.engine,
            largest=lambda previous, cap: fitting_budget_text(spec, previous, cap),
            key_fingerprint=master.fingerprint,
            shared_input_with=spec.shares_input_with,
            content=content,
        )
        trace.reservation = reservation
        progress(
            {
                "reserved": f"ledger: reserved; {reservation.remaining}",
                "resumed": "ledger: resuming an interrupted run of this release id (no new spend)",
                "already_committed": "ledger: release id already committed with this spec and "
                "input; re-emitting identical output (no new spend)",
            }[reservation.outcome]
        )
        timings["setup"] = time.perf_counter() - clock - plan.seconds
        _checkpoint("after_reserve")
        if reservation.outcome == "already_committed":  # re-emitted as published, if intact
            report = intact_copy(reservation.manifest, final, target, spec.release_id)
            if report is not None:
                progress("the published copy is intact (every file as recorded): not recomputed")
                return _reemitted(plan, reservation, report, final or output, target)
            check_maker(spec.release_id, reservation.manifest, reservation.engine, spec.engine)
        # From here on nothing returns the budget: a failure leaves the reservation spent,
        # and the same release id resumes it with the same noise.
        results: dict = {}
        try:
            _advance(ledger, reservation, "reading")
            results, engine_timings, diagnostics = engines.compute_tables(
                spec,
                plan,
                master,
                source,
                identity.digest,
                with_truth=synthetic,
                progress=progress,
            )
            timings.update(engine_timings)
            _check_input_unchanged(spec, master, source, fingerprint)
            _advance(ledger, reservation, "noised")
            _checkpoint("after_noise")
            results, postprocessing = _postprocess(spec, plan, results, source, progress, timings)
            started = time.perf_counter()
            directory = (
                AtomicReleaseDirectory(final, spec.release_id, identity.digest)
                if target is None
                else RemoteReleaseDirectory(target, spec.release_id, identity.digest, staging)
            )
            report = _write_outputs(
                directory,
                plan,
                ledger,
                reservation,
                master,
                fingerprint,
                identity,
                results,
                postprocessing,
                progress,
            )
            timings["write"] = time.perf_counter() - started
            _checkpoint("after_publish")
            if reservation.outcome != "already_committed":
                ledger.commit(reservation, output=output)
        except BaseException as error:
            if reservation.outcome != "already_committed":
                if isinstance(error, REFUSED_AFTER_READING):  # recorded as such, still charged
                    with suppress(LedgerError):  # the refusal stands, recorded or not
                        ledger.advance(reservation, "refused")
                progress(
                    "ledger: the reservation stays spent; run the same release id again to "
                    "finish it (same noise, no new spend)"
                )
            raise
        finally:
            close_tables(results)  # what tables kept on Spark hold persisted there
            if target is not None:
                target.close()
    timings["total"] = time.perf_counter() - clock
    final = final if target is None else output
    progress(f"release written to {final} in {timings['total']:.1f} s")
    return RunResult(final, reservation.outcome, plan, reservation, report, timings, diagnostics)


def _reemitted(plan, reservation, report, output, target) -> RunResult:
    """A committed release whose published copy is intact: the re-emission (nothing computed)."""
    if target is not None:
        target.close()
    return RunResult(output, reservation.outcome, plan, reservation, report, {"plan": plan.seconds})


def _staging(spec) -> Path:
    """The private local folder a release for an output URI is made in: beside a SQLite
    ledger, beside the key file with a server ledger."""
    home = local_ledger_folder(spec.ledger_path) or Path(spec.key_file).parent
    return private_folder(home / "staging")


def _advance(ledger: Ledger, reservation: Reservation, state: str) -> None:
    """Record the run's state (a re-emission of a committed release holds no reservation)."""
    if reservation.outcome != "already_committed":
        ledger.advance(reservation, state)


def _check_input_unchanged(spec, master, source, fingerprint) -> None:
    # The engines read the input more than once (Spark: the unit check, then the
    # tables). A file changed or added in between could let a unit counted as having
    # one row contribute more, so the input must be the files and bytes fingerprinted.
    # The list first, then the bytes, hashed again where they are (executors for Spark):
    # sizes and modification times alone can be kept by a rewrite, so only the content
    # digest shows that no byte changed.
    source.check_unchanged(source.list_files(), spec.release_id)
    try:
        again = source.fingerprint(master)
    except (SpecError, FileRangeError, OSError):
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


def _postprocess(spec, plan, results, source, progress, timings):
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


def _write_outputs(
    directory,
    plan,
    ledger,
    reservation,
    master,
    fingerprint,
    identity,
    results,
    postprocessing,
    progress,
) -> dict:
    spec = plan.spec
    files = {}
    seen = dict(results)  # what the accuracy summary and the report read: tables or tallies
    with directory as folder:
        for table in plan.tables:
            name = table.table.name
            path = folder / f"{name}.parquet"
            if isinstance(results[name], StreamedTable):
                rows, columns, seen[name] = _write_streamed(plan, table, results[name], path)
            else:
                arrow = published_table(spec, table.table, results[name])
                rows, columns = arrow.num_rows, arrow.schema.names
                write_table(arrow, path)
            files[f"{name}.parquet"] = {"rows": rows, "columns": columns}
            progress(f"wrote {name}.parquet ({rows:,} rows)")
        report = privacy_report(plan, reservation, master.fingerprint, files)
        report["input_fingerprint"] = fingerprint
        report["release_digest"] = identity.digest
        if postprocessing:
            report["postprocessing"] = postprocessing
        write_json(report, folder / "privacy_report.json")
        accuracies = table_accuracies(plan, seen)
        accuracy = accuracy_summary(plan, accuracies)
        if accuracy:
            report_accuracy = {"accuracy_vs_truth": accuracy}
            write_json(report_accuracy, folder / "accuracy.json")
        (folder / "report.html").write_text(html_report(plan, report, accuracies, accuracy))
        made = made_by(spec.engine)  # recorded with the bytes: a recompute must match it
        manifest = write_manifest(folder, spec.release_id, identity.digest, made)  # last
        _checkpoint("before_publish")
        # A release id publishes the bytes recorded at its first publication or nothing;
        # a failed check leaves this folder to be removed, never published.
        check_same_bytes(
            spec.release_id, reservation.manifest, manifest, reservation.engine, spec.engine
        )
        directory.check_replaceable(manifest["files"])
        if reservation.outcome != "already_committed":
            ledger.mark_publishing(reservation, manifest, spec.engine)
        if isinstance(directory, RemoteReleaseDirectory):
            directory.publish(manifest, _checkpoint)  # manifest last: what readers trust
        else:
            directory.publish(manifest)
    return report


def _write_streamed(plan, table, streamed: StreamedTable, path: Path):
    """Write a table kept on Spark one row group at a time.

    Each batch becomes the Arrow table `published_table` makes of the same rows
    (`table_schema`, no metadata), so the file is the driver path's bytes, and is
    tallied by the table's `TableAccuracy` (which keeps exact tallies, never the
    rows; on real input, without the truth, it has no summary). Returns (rows,
    column names, the `TableAccuracy`).
    """
    schema = table_schema(plan.spec, table.table, raw=True)
    accuracy = TableAccuracy(plan, table, value_margin=streamed.value_margin)

    def published():
        for batch in streamed.batches(ROW_GROUP_ROWS):
            arrow = pa.Table.from_arrays([batch.column(n) for n in schema.names], schema.names)
            if streamed.truth:  # synthetic input: the batch's rows against the truth
                accuracy.add(batch.to_pandas())
            yield arrow.cast(schema)
            _checkpoint("mid_table")  # a row group is in the hidden folder's file

    rows = write_batches(published(), path)
    return rows, schema.names, accuracy
