"""A real S3-compatible server process for the store tests: moto's server (``moto_server``,
installed with the test extra) on a free local port, plain HTTP, one bucket ``people``.

Without it the tests that need it are skipped locally and fail in CI.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

ACCESS_KEY, SECRET = "AKIDDPTEST0000000001", "TOPSECRET-s3-key-42"
BUCKET = "people"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def s3_uri(endpoint: str, key: str, secret: str = SECRET) -> str:
    """``key`` in the bucket ``people`` at ``endpoint`` (plain HTTP), with credentials."""
    options = f"endpoint_override={endpoint}&scheme=http&region=us-east-1"
    return f"s3://{ACCESS_KEY}:{secret}@{BUCKET}/{key}?{options}"


def s3_server() -> Iterator[str]:
    """Run the server until the generator is closed; yields its ``host:port``."""
    beside = Path(sys.executable).with_name("moto_server")  # the test extra's script
    server = str(beside) if beside.exists() else shutil.which("moto_server")
    if server is None:
        message = "no S3-compatible server (moto_server): install the test extra"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"{message} (CI must run the store tests)")
        pytest.skip(message)
    port = free_port()
    process = subprocess.Popen(
        [server, "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    endpoint = f"127.0.0.1:{port}"
    try:
        for _ in range(1200):
            try:
                urllib.request.urlopen(f"http://{endpoint}/moto-api/", timeout=1)
                break
            except OSError:
                time.sleep(0.1)
        else:
            pytest.skip("the S3-compatible server did not start")
        request(endpoint, f"/{BUCKET}", b"")  # the bucket
        yield endpoint
    finally:
        process.terminate()
        process.wait(timeout=30)


def request(endpoint: str, path: str, data: bytes, method: str = "PUT") -> None:
    """One plain HTTP request to the server (no credentials: it checks none by default)."""
    message = urllib.request.Request(
        f"http://{endpoint}{path}", data=data, method=method, headers={"Content-Type": "text/plain"}
    )
    urllib.request.urlopen(message, timeout=30).read()


def upload(endpoint: str, folder: Path, prefix: str) -> None:
    """Every file under ``folder`` to ``people/<prefix>/<its relative path>``."""
    for file in sorted(folder.rglob("*")):
        if file.is_file():
            request(endpoint, f"/{BUCKET}/{prefix}/{file.relative_to(folder)}", file.read_bytes())


def refuse_every_request(endpoint: str) -> None:
    """From now on the server checks every request's credentials (it knows none)."""
    request(endpoint, "/moto-api/reset-auth", b"0", method="POST")
