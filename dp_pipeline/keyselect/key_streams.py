"""Per-key randomness of a key selection: a keyed ChaCha20 stream from each key's VALUE.

The noise of key k must not depend on which other keys exist (else adding a unit that
creates a new key would move the draws of every key after it, and the analysis of
`dp_pipeline.keyselect.plan` would not hold), nor on a file's order. So each key gets
its own stream, keyed by its value:

    stream key of k = HMAC-SHA256(noise secret, "dp_pipeline/key-selection/stream/v1" || enc(k))

read as a ChaCha20 keystream (`dp_pipeline.randomness.SecureStream`), where enc is the
injective label encoding of `dp_pipeline.randomness.encode_labels` (a string and an
integer never share an encoding). HMAC-SHA256 is a PRF, so distinct keys get
independent-looking 32-byte stream keys (collision below 2^-128 per pair).

The bounding rank of a (unit, key) pair needs a 64-bit hash of the key's value (not of
its position among the data's keys, which depends on the other keys): the first 8 bytes
of HMAC-SHA256(hash secret, enc(k)), as a signed int64.

Both secrets are derived on the driver from the master key and the (release, table)
labels; a `SelectionKey` pickles (it travels to the tasks that select, like a
`StreamKey`) but its bytes never reach a repr.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterable

import numpy as np
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms

from dp_pipeline.errors import DPTypeError, DPValueError
from dp_pipeline.randomness import MasterKey, SecureStream, encode_labels

__all__ = ["SelectionKey", "key_label"]

_STREAM_LABEL = b"dp_pipeline/key-selection/stream/v1"
_HASH_LABEL = b"dp_pipeline/key-selection/hash/v1"


def key_label(value: object) -> bytes:
    """The injective encoding of one key value (a str or an int, never a bool or a float)."""
    if isinstance(value, np.integer):
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise DPTypeError(f"a selected key must be a str or an int, got {type(value).__name__}")
    return encode_labels((value,))


class SelectionKey:
    """The two secrets of one key selection (noise streams, value hashes); never printed."""

    __slots__ = ("_hash", "_noise")

    def __init__(self, noise_secret: bytes, hash_secret: bytes) -> None:
        for secret in (noise_secret, hash_secret):
            if not isinstance(secret, bytes) or len(secret) != 32:
                raise DPValueError("selection secrets must be 32 bytes each")
        self._noise = noise_secret
        self._hash = hash_secret

    @classmethod
    def derive(cls, master: MasterKey, *labels: str | int) -> SelectionKey:
        """The selection key of ``labels`` (e.g. release id, table) under ``master``."""
        if not labels:
            raise DPValueError("SelectionKey.derive needs labels (e.g. release id, table)")
        message = encode_labels(labels)
        return cls(
            master.hmac_sha256(b"key selection noise", message),
            master.hmac_sha256(b"key selection hash", message),
        )

    def _stream_key(self, value: object) -> bytes:
        return hmac.new(self._noise, _STREAM_LABEL + key_label(value), hashlib.sha256).digest()

    def stream(self, value: object) -> SecureStream:
        """The ChaCha20 stream of the key ``value`` (a function of the value alone)."""
        return SecureStream(self._stream_key(value))

    def prefix(self, value: object, size: int) -> bytes:
        """The first ``size`` bytes of `stream` (value) without its 64 KiB read-ahead: the
        same ChaCha20 keystream (same key, the all-zero nonce and counter of
        `SecureStream`), cheaper when a key needs only a few bytes."""
        cipher = Cipher(algorithms.ChaCha20(self._stream_key(value), bytes(16)), mode=None)
        return cipher.encryptor().update(bytes(size))

    def value_hashes(self, values: Iterable[object]) -> np.ndarray:
        """64-bit keyed hashes of key values (int64), for ranking a unit's keys."""
        digests = b"".join(
            hmac.new(self._hash, _HASH_LABEL + key_label(v), hashlib.sha256).digest()[:8]
            for v in values
        )
        return np.frombuffer(digests, dtype=">i8").astype(np.int64)

    def __repr__(self) -> str:
        return "SelectionKey(<secret>)"

    __str__ = __repr__

    def __reduce__(self):
        return (SelectionKey, (self._noise, self._hash))
