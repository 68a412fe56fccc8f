"""Running a release: the steps of DESIGN's protocol, in order (`run_release`).

The states a run moves through, the moves allowed and the crash points are
`dp_pipeline.release.protocol`'s; the ledger records them (`dp_pipeline.release.ledger`).
Order matters for privacy and for crashes:

1. **Plan** (`plan_release`): the spec is validated and the plan proven before
   anything else; a bad spec or budget never reaches the ledger or the data.
2. **Open**: the run's master key, then the release id's lease
   (`dp_pipeline.release.run_lease`: held until it returns, so no other run of the
   id and no abort overlaps it), then the input: the engine lists the files it
   will read.
3. **Fingerprint** (`_fingerprint`): a keyed fingerprint of those exact files
   (bytes only, no parsing); with the spec and the key it makes the release's
   identity (`dp_pipeline.release.ledger.identity`).
4. **Reserve** (`_reserve`): an output folder that is not an earlier copy of this
   release is refused (`dp_pipeline.release.reemit.check_earlier_copy`), what a killed
   run of exactly this id left hidden is removed, and the ledger reserves the spend
   in one transaction under a new run token, refusing it above the cap or when the
   release id is recorded with another identity. An output URI was probed first
   (`check_output`): nothing is reserved when the run could not publish.
5. **Read and noise** (state reading, then noised): from reading on the run is
   charged whatever happens; the same release id resumes it with the same noise.
   The input must still be the fingerprinted bytes afterwards.
6. **Post-process** (`dp_pipeline.release.tables.consistency`, no privacy cost).
7. **Publish** (`dp_pipeline.release.publish.writer`): a hidden, owner-only folder,
   ``manifest.json`` last, the bytes checked against those the ledger recorded for
   the id, publication recorded (state publishing), then the folder moved into
   place (or copied to an output URI, `dp_pipeline.release.publish.remote`).
8. **Commit**: only then is the ledger entry committed. A job killed anywhere
   leaves either no release or a complete one, and a reservation that the next run
   of the same release id resumes (same noise, no new spend); a committed id whose
   published copy is intact is not recomputed (`dp_pipeline.release.reemit`).
"""

from __future__ import annotations

import time
from contextlib import ExitStack, nullcontext, suppress
from dataclasses import dataclass, field
from pathlib import Path

from dp_pipeline.engines.spark.session.failures import lost_jvm_unlogged
from dp_pipeline.query.diagnostics import Diagnostics
from dp_pipeline.release import protocol
from dp_pipeline.release.early_reemit import committed_identity
from dp_pipeline.release.key_binding import bind_key, check_key_place
from dp_pipeline.release.keys import load_or_create_master_key, private_folder
from dp_pipeline.release.ledger.budget import LedgerError
from dp_pipeline.release.ledger.identity import release_identity
from dp_pipeline.release.ledger.records import Reservation
from dp_pipeline.release.ledger.store import Ledger
from dp_pipeline.release.ledger_location import ledger_location, local_ledger_folder
from dp_pipeline.release.locations import legacy_ledger_problem
from dp_pipeline.release.outcome import REFUSED_AFTER_READING
from dp_pipeline.release.plan.preflight import check_engine
from dp_pipeline.release.plan.release_plan import ReleasePlan, fitting_budget_text, plan_release
from dp_pipeline.release.progress import Progress
from dp_pipeline.release.protocol import Checkpoint, State
from dp_pipeline.release.publish.filesystems import ReleaseFileSystem
from dp_pipeline.release.publish.manifest import check_replaceable
from dp_pipeline.release.publish.outputs import AtomicReleaseDirectory, clean_stale
from dp_pipeline.release.publish.probe import check_output
from dp_pipeline.release.publish.remote import (
    RemoteReleaseDirectory,
    check_remote_replaceable,
    clean_remote_stale,
)
from dp_pipeline.release.publish.writer import write_outputs
from dp_pipeline.release.read import read_release
from dp_pipeline.release.reemit import check_earlier_copy, check_maker, intact_copy, made_by
from dp_pipeline.release.run_lease import held_lease
from dp_pipeline.release.run_steps import check_input_unchanged, postprocess_results
from dp_pipeline.release.sources.schema import check_input_columns
from dp_pipeline.release.sources.source import check_listed_kinds, kept_log
from dp_pipeline.release.sources.synthetic import check_sample, sealed_census_sample
from dp_pipeline.release.spec.model import ReleaseSpec, SpecError
from dp_pipeline.release.spec.overrides import apply_overrides
from dp_pipeline.release.tables import engines
from dp_pipeline.release.tables.engines import InputChangedError, open_input
from dp_pipeline.release.tables.streamed import close_tables

# Progress, apply_overrides and read_release are imported from here by callers of the
# run (the CLI imports them from their own modules).
__all__ = [
    "InputChangedError",
    "Progress",
    "RunResult",
    "RunTrace",
    "apply_overrides",
    "read_release",
    "run_release",
]


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
    # The key's bound ledger, before any engine starts (a server's by its ledger id).
    check_key_place(master, location, key_file=spec.key_file, ledger=server)
    if server is not None:
        server.key = master  # its rows are checked and sealed under the run's key

    synthetic = not spec.input_path and spec.input_table is None
    input_path, input_format, sample = _input_of(spec, synthetic, master, progress)
    # The engine lists the files it will read; those exact files are fingerprinted, and
    # the release's identity (spec + fingerprint + key) is checked by the ledger before
    # any of their rows is read. A live run of the release id answers busy before that.
    held.enter_context(held_lease(spec.release_id, spec.ledger_path, server))
    trace = trace if trace is not None else RunTrace()
    # A retry of a committed release whose copy is intact starts no engine (Spark: no JVM).
    early = _reemitted_before_engine(
        spec, plan, master, server, (input_path, input_format), progress
    )
    if early is not None:
        reservation, report, where = early
        if server is not None:
            server.close()  # the lease keeps its own connection until it ends
        trace.reservation = reservation
        _say_reserved(reservation, progress)
        progress("the published copy is intact (every file as recorded): not recomputed")
        return _reemitted(plan, reservation, report, where.final, where)
    source = open_input(spec, input_path, input_format, progress, spark, verbose=verbose)
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


def _input_of(spec: ReleaseSpec, synthetic: bool, master, progress):
    """The input to open: (path or URI as written, format, the synthetic sample or None)."""
    if not synthetic:
        # A path or URI as written (None: the spec's catalog table).
        return spec.input_path or None, spec.input_format, None
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
    return input_path, "parquet", sample


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


def _reemitted_before_engine(spec, plan, master, server, inputs, progress):
    """(reservation, published report, where) when this run is a retry of a committed
    release whose copy is intact, decided before the engine starts
    (`dp_pipeline.release.early_reemit`); None: the engine's path decides."""
    local = ledger_location(spec.ledger_path).path
    if spec.engine != "spark" or (server is None and (local is None or not local.is_file())):
        return None
    location = None if inputs[0] is None else str(inputs[0])
    opened = nullcontext(server) if server is not None else Ledger(spec.ledger_path, key=master)
    with opened as ledger:
        entry = ledger.entry(spec.release_id)
        found = committed_identity(
            spec, plan.accountant.to_dict(), master, location, inputs[1], entry
        )
        if found is None:
            return None
        where = _where(spec, None)  # a local output folder (`committed_identity`)
        if intact_copy(entry.manifest, where.final, None, spec.release_id) is None:
            return None  # missing or altered: recomputed by the engine that made it
        reservation = _reserve(ledger, spec, plan, master, *found, where, progress)
        report = intact_copy(reservation.manifest, where.final, None, spec.release_id)
    return None if report is None else (reservation, report, where)


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
    """The steps after the input is opened: fingerprint, reserve, read and noise,
    post-process, publish, commit (the states: `dp_pipeline.release.protocol`)."""
    fingerprint, content = _fingerprint(spec, source, master, sample, progress, timings)
    identity = release_identity(spec, plan.accountant.to_dict(), fingerprint, master.fingerprint)
    where = _where(spec, source.spark)
    with ledger or Ledger(spec.ledger_path, key=master) as ledger:  # the lease is held
        reservation = _reserve(
            ledger, spec, plan, master, identity, (fingerprint, content), where, progress
        )
        trace.reservation = reservation
        _say_reserved(reservation, progress)
        timings["setup"] = time.perf_counter() - clock - plan.seconds
        protocol.checkpoint(Checkpoint.AFTER_RESERVE)
        if reservation.outcome == "already_committed":  # re-emitted as published, if intact
            report = intact_copy(reservation.manifest, where.final, where.target, spec.release_id)
            if report is not None:
                progress("the published copy is intact (every file as recorded): not recomputed")
                return _reemitted(plan, reservation, report, where.final or where.output, where)
            check_maker(spec.release_id, reservation.manifest, reservation.engine, spec.engine)
        # From here on nothing returns the budget: a failure leaves the reservation spent,
        # and the same release id resumes it with the same noise.
        results: dict = {}
        try:
            _advance(ledger, reservation, State.READING)
            # Keys selected from the data first: the plan then holds the released keys.
            plan, results, engine_timings, diagnostics = engines.compute_release_tables(
                spec,
                plan,
                master,
                source,
                identity.digest,
                with_truth=synthetic,
                progress=progress,
            )
            timings.update(engine_timings)
            check_input_unchanged(spec, master, source, fingerprint)
            _advance(ledger, reservation, State.NOISED)
            protocol.checkpoint(Checkpoint.AFTER_NOISE)
            results, postprocessing = postprocess_results(
                spec, plan, results, source, progress, timings
            )
            started = time.perf_counter()
            report = write_outputs(
                _directory(spec, identity, where),
                plan,
                results,
                postprocessing,
                ledger=ledger,
                reservation=reservation,
                key_fingerprint=master.fingerprint,
                input_fingerprint=fingerprint,
                identity=identity,
                made=made_by(spec.engine),
                progress=progress,
            )
            timings["write"] = time.perf_counter() - started
            protocol.checkpoint(Checkpoint.AFTER_PUBLISH)
            if reservation.outcome != "already_committed":
                ledger.commit(reservation, output=where.output)
        except BaseException as error:
            if reservation.outcome != "already_committed":
                if isinstance(error, REFUSED_AFTER_READING):  # recorded as such, still charged
                    with suppress(LedgerError):  # the refusal stands, recorded or not
                        ledger.advance(reservation, State.REFUSED)
                progress(
                    "ledger: the reservation stays spent; run the same release id again to "
                    "finish it (same noise, no new spend)"
                )
            raise
        finally:
            close_tables(results)  # what tables kept on Spark hold persisted there
            if where.target is not None:
                where.target.close()
    timings["total"] = time.perf_counter() - clock
    final = where.final if where.target is None else where.output
    progress(f"release written to {final} in {timings['total']:.1f} s")
    return RunResult(final, reservation.outcome, plan, reservation, report, timings, diagnostics)


def _fingerprint(spec, source, master, sample, progress, timings) -> tuple[str, str | None]:
    """The keyed fingerprint and content digest of exactly the files the engine listed."""
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
    return fingerprint, content


@dataclass(frozen=True)
class _Where:
    """Where the release goes: a local folder (``final``), or an output URI's file system
    (``target``, the release made in ``staging`` first); ``output`` as the ledger records it."""

    target: ReleaseFileSystem | None
    final: Path | None
    output: str
    staging: Path | None


def _where(spec, spark) -> _Where:
    # An output URI is written through the session's file system: probed before the
    # reservation (nothing is reserved when the run could not publish).
    target = check_output(spec, spark)
    if target is None:
        final = Path(spec.output_dir) / spec.release_id
        return _Where(None, final, str(final.resolve()), None)
    return _Where(target, None, target.where(spec.release_id), _staging(spec))


def _reserve(ledger, spec, plan, master, identity, inputs, where, progress) -> Reservation:
    """The ledger's reservation, after the checks that need no spend: an output that is no
    earlier copy of this release is refused, what a killed run left hidden is removed."""
    fingerprint, content = inputs
    # The ledger's identity check (in reserve) names what differs from an earlier release
    # of this id, and publication checks its bytes.
    entry = ledger.entry(spec.release_id)
    check_earlier_copy(spec.release_id, identity, entry, where.final, where.target, where.output)
    if where.target is None:
        check_replaceable(where.final, spec.release_id)
    else:
        check_remote_replaceable(where.target, spec.release_id, identity.digest)
    bind_key(master, ledger, key_file=spec.key_file)  # its id and site, recorded
    hidden = where.final or where.staging / spec.release_id
    leftovers = [str(path) for path in clean_stale(hidden)]
    if where.target is not None:
        leftovers += clean_remote_stale(where.target, spec.release_id)
    for leftover in leftovers:
        progress(f"removed {leftover}, left by an interrupted run")
    return ledger.reserve(
        population=spec.population,
        release_id=spec.release_id,
        accountant=plan.accountant,
        fingerprint=fingerprint,
        cap=spec.cap,
        identity=identity,
        output=where.output,
        engine=spec.engine,
        largest=lambda previous, cap: fitting_budget_text(spec, previous, cap),
        key_fingerprint=master.fingerprint,
        shared_input_with=spec.shares_input_with,
        content=content,
    )


def _say_reserved(reservation: Reservation, progress) -> None:
    progress(
        {
            "reserved": f"ledger: reserved; {reservation.remaining}",
            "resumed": "ledger: resuming an interrupted run of this release id (no new spend)",
            "already_committed": "ledger: release id already committed with this spec and "
            "input; re-emitting identical output (no new spend)",
        }[reservation.outcome]
    )


def _directory(spec, identity, where: _Where):
    """The hidden folder the outputs are written in, published when they are complete."""
    if where.target is None:
        return AtomicReleaseDirectory(where.final, spec.release_id, identity.digest)
    return RemoteReleaseDirectory(where.target, spec.release_id, identity.digest, where.staging)


def _reemitted(plan, reservation, report, output, where: _Where) -> RunResult:
    """A committed release whose published copy is intact: the re-emission (nothing computed)."""
    if where.target is not None:
        where.target.close()
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
