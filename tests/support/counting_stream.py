"""A SecureStream that counts the keystream bytes it hands out (timing-defence tests)."""

from __future__ import annotations

from dp_pipeline.randomness import SecureStream


class CountingStream(SecureStream):
    """A SecureStream that counts the keystream bytes handed out."""

    __slots__ = ("drawn",)

    def __init__(self, key: bytes) -> None:
        super().__init__(key)
        self.drawn = 0

    def _fill(self, out) -> None:
        self.drawn += out.size
        super()._fill(out)
