"""``dp-release``: plan, run and audit census-style releases from a TOML spec.

    dp-release plan SPEC [--release-id ID] [--date YYYY-MM-DD] [--ledger PATH] [--json]
    dp-release run SPEC [--input PATH] [--format parquet|csv] [--output DIR]
                        [--engine spark|pandas] [--master URL | --remote URL]
                        [--conf KEY=VALUE ...] [--release-id ID] [--date YYYY-MM-DD]
                        [--persons N] [--ledger PATH] [--key-file PATH] [--json] [--verbose]
    dp-release ledger [SPEC] [--ledger PATH] [--population NAME] [--json] [--abort RELEASE_ID]
                      [--key-file PATH]
    dp-release key [--key-file PATH] [--bind LEDGER] [--json]
    dp-release --version

User errors print one clear message to stderr. ``plan`` and ``ledger`` then exit
with status 2; ``run`` exits with one code per outcome (published, already
committed, refused over the budget, refused because the input or spec changed,
spec error, failed and resumable, ...: `dp_pipeline.release.outcome`, listed by
``dp-release run --help``), and ``--json`` prints one result line. Errors found
before the run reads data (bad spec, refused budget, reused release id) leave
nothing read, spent or written; those found after it (a refusal on the noisy
invalid-row count, a file the reader cannot parse) leave the reservation spent,
and the same release id resumes it. ``--release-id`` may be a template with the
run's date (``'labour-{date:%Y-%m}'``, `dp_pipeline.release.release_ids`).
``plan`` with a ledger (``--ledger``, else the operator's, ``$DP_PIPELINE_LEDGER`` or
the home's, if that file exists or names a server) also prints what the population
has spent, what this release costs, what is left and whether it fits, composed as
``run`` composes them; it only reads the ledger (never creates, migrates or leases
it), and exits 4 when ``run`` would refuse the release over the cap
(`dp_pipeline.release.plan_verdict`). A refusal over the cap, in ``run`` or ``plan``,
names the largest epsilon (at the budget's delta) or rho that would fit.
Output piped into a reader that stops early (``| head``) ends the command
quietly with status 1 instead of a traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import traceback

from dp_pipeline.errors import ChargedRunError, DPError
from dp_pipeline.release.key_command import add_key_command, existing_key, key_command
from dp_pipeline.release.keys import KeyFileError
from dp_pipeline.release.ledger.budget import LedgerError
from dp_pipeline.release.ledger.integrity import LedgerTamperedError
from dp_pipeline.release.ledger.phrases import spend_phrase
from dp_pipeline.release.ledger_command import ledger_command
from dp_pipeline.release.ledger_location import ledger_location
from dp_pipeline.release.locations import legacy_ledger_problem
from dp_pipeline.release.outcome import (
    ExitCode,
    error_code,
    error_line,
    exit_code_table,
    result_line,
)
from dp_pipeline.release.plan.against_ledger import check_against_ledger
from dp_pipeline.release.plan.preflight import engine_problems, input_problems
from dp_pipeline.release.plan.release_plan import PlanError, plan_release
from dp_pipeline.release.plan.text import format_plan
from dp_pipeline.release.plan_verdict import plan_verdict
from dp_pipeline.release.process_exit import end_process, exit_status
from dp_pipeline.release.progress import Progress
from dp_pipeline.release.release_ids import (
    is_template,
    parse_run_date,
    render_release_id,
    run_date,
)
from dp_pipeline.release.run import RunTrace, run_release
from dp_pipeline.release.sources.source import EngineStoppedError
from dp_pipeline.release.spec.load import load_spec
from dp_pipeline.release.spec.model import ENGINES, INPUT_FORMATS, SpecError
from dp_pipeline.release.spec.overrides import apply_overrides
from dp_pipeline.version import __version__

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dp-release",
        description="Differentially private census-style releases with a budget ledger.",
    )
    parser.add_argument("--version", action="version", version=f"dp-release {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)

    plan = commands.add_parser("plan", help="per-table sigma2, rho share, margins; (eps, delta)")
    plan.add_argument("spec", help="release spec (TOML), e.g. conf/census_demo.toml")
    _release_id_arguments(plan)
    plan.add_argument("--json", action="store_true", help="print the plan as JSON")
    plan.add_argument(
        "--ledger",
        dest="ledger_path",
        help=(
            "ledger to check the cap against (read only; default: $DP_PIPELINE_LEDGER, else "
            "the dp_pipeline home's, if it exists)"
        ),
    )

    run = commands.add_parser(
        "run",
        help="run a release and write out/<release id>/",
        description="Run a release and write <output>/<release id>/.",
        epilog="exit codes:\n" + exit_code_table(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    run.add_argument("spec", help="release spec (TOML)")
    run.add_argument("--input", dest="input_path", help="input Parquet/CSV (default: synthetic)")
    run.add_argument(
        "--format",
        dest="input_format",
        choices=INPUT_FORMATS,
        help="input format (default: spec; csv for a *.csv --input)",
    )
    run.add_argument(
        "--output",
        dest="output_dir",
        help="output folder or URI, e.g. viewfs://cluster/releases (default: spec)",
    )
    run.add_argument("--engine", choices=ENGINES, help="engine (default: spec, else spark)")
    run.add_argument("--master", help="Spark master URL (default: spec, else local[2])")
    run.add_argument(
        "--remote",
        help=(
            "run on Spark Connect: sc://HOST:PORT, or local[N] for a local Connect server "
            "(default: the SPARK_REMOTE environment variable, as PySpark reads it)"
        ),
    )
    run.add_argument(
        "--conf",
        dest="spark_conf",
        action="append",
        metavar="KEY=VALUE",
        help=(
            "a Spark setting, as spark-submit --conf takes it (repeat for more; over the "
            "spec's [run.spark_conf]; spark.master is --master)"
        ),
    )
    _release_id_arguments(run)
    run.add_argument("--persons", dest="synthetic_persons", type=int, help="synthetic input size")
    run.add_argument(
        "--ledger",
        dest="ledger_path",
        help=(
            "ledger: a SQLite file (a path or sqlite:///path) or postgresql://... (default: "
            "$DP_PIPELINE_LEDGER, else ledger.sqlite in the dp_pipeline home, which a "
            "spec's run.ledger must name; this flag decides over the spec)"
        ),
    )
    run.add_argument(
        "--key-file",
        help=(
            "master key file (default: master.key in the dp_pipeline home; a spec's "
            "run.key_file must name the same; created if absent, unless the ledger already "
            "records releases)"
        ),
    )
    run.add_argument("--quiet", action="store_true", help="no progress lines")
    run.add_argument(
        "--json",
        action="store_true",
        help=(
            "print one JSON object on stdout instead of the result lines, also on failure: "
            "status, exit_code, release_id, spend, output, ledger"
        ),
    )
    run.add_argument(
        "--verbose",
        action="store_true",
        help=(
            "also show the JVM's and Spark's own log lines (by default written to a "
            "temporary file, deleted after a run that went well and named after an error)"
        ),
    )

    ledger = commands.add_parser("ledger", help="history and remaining budget per population")
    ledger.add_argument(
        "spec", nargs="?", help="a release spec: report its run.ledger, as run would use it"
    )
    ledger.add_argument(
        "--ledger",
        dest="ledger_path",
        help=(
            "ledger (default: $DP_PIPELINE_LEDGER, else ledger.sqlite in $DP_PIPELINE_HOME, "
            "else in ~/.dp_pipeline; a SPEC's run.ledger must name the same)"
        ),
    )
    ledger.add_argument("--population", help="only this population")
    ledger.add_argument(
        "--json",
        action="store_true",
        help="print one JSON object: per population its cap, spent, left and releases",
    )
    ledger.add_argument(
        "--abort",
        metavar="RELEASE_ID",
        help=(
            "return a stale reservation's budget: only if its run is not alive and read "
            "nothing (state reserved)"
        ),
    )
    ledger.add_argument("--key-file", help="the ledger's master key (needed by --abort)")
    add_key_command(commands)
    return parser


def _release_id_arguments(command: argparse.ArgumentParser) -> None:
    command.add_argument(
        "--release-id",
        help=(
            "override release.id (scheduled releases); a template with the run's date "
            "(UTC), e.g. 'labour-{date:%%Y-%%m}' gives labour-2026-03 in March 2026"
        ),
    )
    command.add_argument(
        "--date",
        dest="run_date",
        metavar="YYYY-MM-DD",
        help="the date a --release-id template uses instead of today (backfills, tests)",
    )


def _release_id(arguments) -> str | None:
    """--release-id with its template rendered; checked before the spec or anything else
    is read."""
    template = arguments.release_id
    day = None if arguments.run_date is None else parse_run_date(arguments.run_date)
    if not template or not is_template(template):
        if day is not None:
            raise SpecError(
                [
                    f"--date {arguments.run_date}: only a --release-id template uses it, and "
                    f"{'--release-id ' + repr(template) if template else 'no --release-id'} "
                    "has no {date} field; write e.g. --release-id 'labour-{date:%Y-%m}'"
                ],
                "command line",
            )
        return template
    return render_release_id(template, run_date() if day is None else day)


def _plan(arguments) -> int:
    release_id = _release_id(arguments)
    spec = load_spec(arguments.spec, ledger=arguments.ledger_path)
    if release_id:
        spec = spec.with_release_id(release_id)
    # A scheduled release is planned before its input arrives: the input's problems
    # are notes here, and errors for `run`.
    plan = plan_release(spec, input_present=False)
    check = _plan_ledger_check(arguments.ledger_path, spec, plan)
    if arguments.json:
        described = plan.to_dict()
        if check is not None:
            described["ledger"] = check.to_dict()
        print(json.dumps(described, indent=2, sort_keys=True))
    else:
        print(format_plan(plan))
        if check is not None:
            print()
            print(check.text())
    for problem in engine_problems(spec):
        print(f"note: dp-release run would refuse this install: {problem}", file=sys.stderr)
    legacy = legacy_ledger_problem(spec.ledger_path, spec.key_file)
    if legacy is not None:
        print(f"note: dp-release run would refuse this: {legacy}", file=sys.stderr)
    for problem in input_problems(spec):
        print(f"note: dp-release run would refuse this input now: {problem}", file=sys.stderr)
    code, refusal = plan_verdict(plan, check)  # 4: run would refuse it over the cap
    if refusal is not None:
        print(f"dp-release plan: exit {int(code)}: {refusal}", file=sys.stderr)
    return int(code)


def _plan_ledger_check(given: str | None, spec, plan):
    """The ledger check `plan` prints: ``--ledger``, else the operator's ledger (the spec's
    ``run.ledger`` may only agree with it).

    A ledger named by ``--ledger`` must open (its error is the command's). The spec's
    own is checked when it is there: a SQLite file that exists, or a server, whose
    failure (unreachable, no ledger yet) is a note on stderr, as a missing file is
    no check at all: a release is planned before its ledger need exist.
    """
    key = existing_key(spec.key_file)  # verifies the rows; never created by a plan
    if given is not None:
        return check_against_ledger(spec, plan, given, key)
    location = ledger_location(spec.ledger_path)
    if location.kind == "sqlite":
        exists = location.path is not None and location.path.is_file()
        return check_against_ledger(spec, plan, spec.ledger_path, key) if exists else None
    try:
        return check_against_ledger(spec, plan, spec.ledger_path, key)
    except LedgerTamperedError:
        raise  # a run would refuse it too: never a mere note
    except LedgerError as error:
        print(f"note: the spec's ledger was not checked: {error}", file=sys.stderr)
        return None


def _check_remote(arguments, spec) -> None:
    """``--remote`` with ``--master``, or with the pandas engine: a `SpecError` before anything."""
    if arguments.remote is None:
        return
    if arguments.master is not None:
        raise SpecError(
            [
                "--remote and --master: give one (--remote runs on Spark Connect, --master on "
                "a classic session)"
            ],
            "command line",
        )
    if spec.engine != "spark":
        raise SpecError(
            [
                f"--remote: a Spark Connect URL is for the spark engine, not {spec.engine!r}; "
                "add --engine spark or leave --remote out"
            ],
            "command line",
        )


@contextlib.contextmanager
def _spark_remote(remote: str | None):
    """``SPARK_REMOTE`` set to ``--remote`` for the run, as ``pyspark --remote URL`` does
    (the release's session is made from it), and restored afterwards."""
    if remote is None:
        yield
        return
    before = os.environ.get("SPARK_REMOTE")
    os.environ["SPARK_REMOTE"] = remote
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("SPARK_REMOTE", None)
        else:
            os.environ["SPARK_REMOTE"] = before


def _run(arguments) -> int:
    """Run a release; the exit code says what happened (`dp_pipeline.release.outcome`)."""
    trace = RunTrace()
    spec = None
    release_id = arguments.release_id
    try:
        release_id = _release_id(arguments)
        spec = apply_overrides(
            # The operator's ledger and key: flags decide; else a spec's must name the default.
            load_spec(arguments.spec, ledger=arguments.ledger_path, key_file=arguments.key_file),
            release_id=release_id,
            input_path=arguments.input_path,
            input_format=arguments.input_format,
            output_dir=arguments.output_dir,
            engine=arguments.engine,
            master=arguments.master,
            spark_conf=arguments.spark_conf,
            ledger_path=arguments.ledger_path,
            key_file=arguments.key_file,
            synthetic_persons=arguments.synthetic_persons,
        )
        _check_remote(arguments, spec)
        with _spark_remote(arguments.remote):
            result = run_release(
                spec,
                progress=Progress(quiet=arguments.quiet),
                verbose=arguments.verbose,
                trace=trace,
            )
    except BrokenPipeError:
        raise
    except Exception as error:
        code = error_code(error, trace.reservation)
        # A bug is raised below (Python prints its traceback once); a session that died
        # is no bug: its one line names what happened and the fix.
        bug = code == ExitCode.ERROR and not isinstance(error, EngineStoppedError)
        if bug:
            pass  # raised below
        elif not isinstance(error, DPError):
            traceback.print_exc()  # not dp_pipeline's own: how it failed is for a person
        else:
            _print_error("run", error)
        if code == ExitCode.FAILED_RESUMABLE:
            print(
                f"dp-release run: exit {int(code)}: the reservation stays spent; run the same "
                "command again to resume it (same noise, no new spend)",
                file=sys.stderr,
            )
        if arguments.json:
            print(
                result_line(
                    code,
                    release_id if spec is None else spec.release_id,
                    population=None if spec is None else spec.population,
                    ledger=None if spec is None else spec.ledger_path,
                    reservation=trace.reservation,
                    message=error_line(error),
                ),
                flush=True,
            )
        if bug:
            raise  # Python's own exit status (1) and traceback
        return int(code)
    committed = result.outcome == "already_committed"
    code = ExitCode.ALREADY_COMMITTED if committed else ExitCode.PUBLISHED
    if arguments.json:
        print(
            result_line(
                code,
                spec.release_id,
                population=spec.population,
                ledger=spec.ledger_path,
                plan=result.plan,
                reservation=result.reservation,
                output=result.output,
            )
        )
        return int(code)
    cumulative = result.reservation.cumulative
    outcome = {
        "reserved": "published and committed (new spend)",
        "resumed": "published and committed (resumed an interrupted run)",
        "already_committed": "already committed earlier (nothing spent)",
    }.get(result.outcome, result.outcome)
    print(f"release {spec.release_id}: {outcome}; output in {result.output}")
    # Each figure beside the point it is taken at: "ε 1.88 of 10 at δ = 1e-9".
    print(
        f"cumulative for population {spec.population}: "
        f"{spend_phrase(cumulative, result.reservation.cap)}"
    )
    return int(code)


def _print_error(command: str, error: BaseException) -> None:
    print(f"dp-release {command}: {error}", file=sys.stderr)
    for note in getattr(error, "__notes__", ()):
        print(f"  {note}", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``dp-release`` console script; returns the exit code.

    Without ``argv`` (the console script, ``python -m dp_pipeline.release``) it is the
    process's own command: the process ends here with exactly the documented code,
    whatever the interpreter's teardown would do (`end_process`); an unexpected error
    prints its traceback and ends it with 1, as Python would. With ``argv`` (a caller in
    Python) the code is returned and exceptions propagate.
    """
    if argv is not None:
        return _command(argv)
    try:
        code = _command(None)
    except SystemExit as leaving:  # argparse: --help, --version (0), a usage error (2)
        code = exit_status(leaving.code)
    except Exception:
        traceback.print_exc()
        code = int(ExitCode.ERROR)
    end_process(code)


def _command(argv: list[str] | None) -> int:
    arguments = _parser().parse_args(argv)
    handlers = {"plan": _plan, "run": _run, "ledger": ledger_command, "key": key_command}
    try:
        return handlers[arguments.command](arguments)
    except BrokenPipeError:
        _silence_stdout()
        return 1
    except (SpecError, ChargedRunError, PlanError, LedgerError, KeyFileError) as error:
        _print_error(arguments.command, error)
        return int(ExitCode.SPEC_ERROR)


def _silence_stdout() -> None:
    """After the reader of stdout went away: point stdout at /dev/null, so that the
    interpreter's final flush does not raise a second BrokenPipeError at exit."""
    try:
        descriptor = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):  # not a real file (e.g. captured)
        return
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, descriptor)
    os.close(null)


if __name__ == "__main__":
    sys.exit(main())
