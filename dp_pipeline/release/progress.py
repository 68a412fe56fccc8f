"""Progress lines of a run on stderr: timestamps and phases, never data."""

from __future__ import annotations

import sys
import time

__all__ = ["Progress"]


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
