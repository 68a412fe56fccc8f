"""A year of monthly releases from two hosts against one ledger: the annual cap holds.

    python examples/monthly_schedule.py --work DIR [--ledger LEDGER] [--year 2026]

Two "hosts" are two working directories under DIR, each with its own HOME,
its own dp_pipeline home (``DP_PIPELINE_HOME``) holding its own copy of the
one master key, its own input files and its own output folder. They share
only the ledger (``--ledger``: a SQLite file both can reach, by default
DIR/ledger.sqlite, or the URL of a ledger server). Each month one host runs
what a scheduler would run::

    dp-release run monthly.toml --input persons.parquet \\
        --release-id 'labour-{date:%Y-%m}' --date YYYY-MM-01 --ledger LEDGER --json

The population's annual cap is rho = 1/10 and each month spends rho = 1/100:
ten months publish (exit 0); the eleventh and twelfth are refused over the cap
(exit 4) before reading anything. A retry of January from the other host is
the same release (same spec, same input bytes, same key): exit 3, nothing
spent. The script prints one line per run and the ledger's summary, and exits
0 when every exit code is the expected one.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

from dp_pipeline.datasets.synthetic import write_census_sample
from dp_pipeline.release.outcome import ExitCode

ROOT = Path(__file__).resolve().parents[1]
TEMPLATE = "labour-{date:%Y-%m}"
SPEC = """\
[release]
id = "labour-monthly"
description = "Monthly labour-force counts"
noise = "discrete_gaussian"
noise_partitions = 2

[population]
name = "labour-force-schedule"
cap = { rho = "1/10" }   # a year: ten months of rho = 1/100 fit, an eleventh does not

[privacy_unit]
column = "person_id"

[budget]
rho = "1/100"

[output]
dir = "out"

[run]
engine = "pandas"

[domains]
state = { start = 1, stop = 51 }
sex = ["F", "M"]
age = { start = 0, stop = 115 }

[[tables]]
name = "state_sex"
keys = ["state", "sex"]
share = "1/2"

[[tables]]
name = "age"
keys = ["age"]
share = "1/2"
"""


def make_host(work: Path, name: str, key_hex: str) -> tuple[Path, dict[str, str]]:
    """A working directory with its own HOME, dp_pipeline home, key copy and spec."""
    folder = work / name
    home = folder / "home"
    dp_home = home / ".dp_pipeline"
    dp_home.mkdir(parents=True, mode=0o700)
    key = dp_home / "master.key"
    descriptor = os.open(key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w") as handle:
        handle.write(key_hex + "\n")
    (folder / "monthly.toml").write_text(SPEC)
    environment = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith("DP_PIPELINE_") and name not in ("HOME", "PYTHONPATH")
    }
    environment.update(HOME=str(home), DP_PIPELINE_HOME=str(dp_home), PYTHONPATH=str(ROOT))
    return folder, environment


def run_month(host, month: int, year: int, ledger: str) -> dict:
    """One scheduled run on ``host`` (folder, environment); its result line."""
    folder, environment = host
    data = folder / f"persons-{year}-{month:02d}.parquet"
    if not data.exists():  # each month's microdata, as the host would receive it
        write_census_sample(data, 2_000, seed=year * 100 + month)
    command = [
        sys.executable,
        "-m",
        "dp_pipeline.release",
        "run",
        "monthly.toml",
        "--input",
        data.name,
        "--release-id",
        TEMPLATE,
        "--date",
        f"{year}-{month:02d}-01",
        "--ledger",
        ledger,
        "--json",
        "--quiet",
    ]
    done = subprocess.run(command, cwd=folder, env=environment, capture_output=True, text=True)
    lines = done.stdout.strip().splitlines()
    if not lines:
        raise SystemExit(f"{folder.name}: no result line (exit {done.returncode}):\n{done.stderr}")
    result = json.loads(lines[-1])
    if result["exit_code"] != done.returncode:
        raise SystemExit(f"{folder.name}: the result line and the exit status differ")
    return result


def within_cap(population: dict) -> bool:
    """The ledger's composed spend is within the cap, with ten releases committed."""
    spent = Fraction(population["spent"]["rho"])
    committed = population["releases"]["committed"]
    return spent <= Fraction(population["cap"]["rho"]) and committed == 10


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", required=True, help="an empty folder for the two hosts")
    parser.add_argument("--ledger", help="the shared ledger (default: WORK/ledger.sqlite)")
    parser.add_argument("--year", type=int, default=2026)
    arguments = parser.parse_args(argv)
    work = Path(arguments.work).resolve()
    if work.exists() and any(work.iterdir()):
        raise SystemExit(f"--work {str(work)!r}: must be an empty or new folder")
    work.mkdir(parents=True, exist_ok=True)
    ledger = arguments.ledger or str(work / "ledger.sqlite")
    key_hex = secrets.token_hex(32)  # one key, copied to both hosts as a secret store would
    hosts = {name: make_host(work, name, key_hex) for name in ("host-a", "host-b")}

    expected = [ExitCode.PUBLISHED] * 10 + [ExitCode.REFUSED_BUDGET] * 2
    runs = []
    for month in range(1, 13):
        name = "host-a" if month % 2 else "host-b"
        runs.append((name, month, run_month(hosts[name], month, arguments.year, ledger)))
        if month == 1:  # a retry of January from the other host, on the same input bytes
            shutil.copy(
                hosts["host-a"][0] / f"persons-{arguments.year}-01.parquet", hosts["host-b"][0]
            )
            retry = run_month(hosts["host-b"], 1, arguments.year, ledger)
            runs.append(("host-b", 1, retry))
    expected.insert(1, ExitCode.ALREADY_COMMITTED)

    print(f"{'host':<8}{'release id':<18}{'exit':<6}{'status':<20}cumulative rho")
    for name, _, result in runs:
        cumulative = (result.get("cumulative") or {}).get("rho")
        print(
            f"{name:<8}{result['release_id']:<18}{result['exit_code']:<6}"
            f"{result['status']:<20}{cumulative or '-'}"
        )
    environment = hosts["host-a"][1]
    summary = subprocess.run(
        [sys.executable, "-m", "dp_pipeline.release", "ledger", "--ledger", ledger, "--json"],
        env=environment,
        capture_output=True,
        text=True,
        check=True,
    )
    (population,) = json.loads(summary.stdout)["populations"]
    print(
        f"ledger: population {population['population']}: cap {population['cap']['rho']}, "
        f"spent rho {population['spent']['rho']}, left {population['left']['rho']}, "
        f"{population['releases']['committed']} committed"
    )
    codes = [result["exit_code"] for _, _, result in runs]
    held = codes == [int(code) for code in expected] and within_cap(population)
    print("the annual cap held" if held else f"unexpected exit codes: {codes}")
    return 0 if held else 1


if __name__ == "__main__":
    sys.exit(main())
