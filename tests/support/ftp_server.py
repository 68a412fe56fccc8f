"""A real FTP server on 127.0.0.1 (pyftpdlib) for Hadoop's FTP file system: a store that
asks for a login, as an input or an output (the ``ftp_store`` fixture, in conftest)."""

from __future__ import annotations

import logging
import socket
import threading

import pytest

USER, PASSWORD = "dpuser", "S3cr3t-ftp-Pw"


@pytest.fixture
def ftp_store(tmp_path):
    """An FTP server on a free loopback port serving ``tmp_path / 'store'`` to USER
    (list and read only)."""
    pytest.importorskip("pyftpdlib")
    from pyftpdlib.authorizers import DummyAuthorizer
    from pyftpdlib.handlers import FTPHandler
    from pyftpdlib.servers import FTPServer

    root = tmp_path / "store"
    root.mkdir()
    authorizer = DummyAuthorizer()
    authorizer.add_user(USER, PASSWORD, str(root), perm="elr")
    handler = type("Handler", (FTPHandler,), {"authorizer": authorizer})
    logging.getLogger("pyftpdlib").setLevel(logging.WARNING)
    server = FTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"timeout": 0.2}, daemon=True)
    thread.start()
    yield root, server.address[1]
    server.close_all()
    thread.join(timeout=5)


def free_port() -> int:
    """A loopback port nothing listens on (bound and released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]
