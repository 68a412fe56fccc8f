"""Per-key randomness of a key selection: a keyed uniform u in [0, 1) from each key's VALUE.

The noise of key k must not depend on which other keys exist (else adding a unit that
creates a new key would move the draws of every key after it, and the analysis of
`dp_pipeline.keyselect.plan` would not hold), nor on a file's order. So each key gets
its own randomness, keyed by its value: a keyed PRF derives the key's own ChaCha20 key,
and u is read from that ChaCha20 keystream (`cryptography`), as every noise draw of the
package is:

    D_k = BLAKE2b-256(key = noise secret, person = "dpkeysel/u/v3", data = enc(k))
    u_k = ChaCha20(key = D_k, nonce 0) keystream, read as the binary expansion of u_k

where enc is the injective label encoding of `dp_pipeline.randomness.encode_labels` (a
string and an integer never share an encoding). Keyed BLAKE2b is a PRF, so distinct
keys get independent-looking stream keys (a collision below 2^-256 per pair), and a
fresh key per stream makes the fixed nonce safe. The first 256 bits of every key's
keystream are produced at once (`SelectionKey.digests`; a decision almost always needs
fewer than 64: `dp_pipeline.keyselect.decisions`); the rare key that needs more reads on
in the same keystream.

The bounding rank of a (unit, key) pair needs a 64-bit hash of the key's value (not of
its position among the data's keys, which depends on the other keys): the 8 bytes of
BLAKE2b-64(key = hash secret, person = "dpkeysel/h/v2", data = enc(k)), as a signed
int64.

Both secrets are derived on the driver from the master key and the (release, table)
labels; a `SelectionKey` pickles (it travels to the tasks that select, like a
`StreamKey`) but its bytes never reach a repr.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Iterable

import numpy as np
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms

from dp_pipeline.errors import DPTypeError, DPValueError
from dp_pipeline.randomness import MasterKey, encode_labels

__all__ = ["SelectionKey", "UniformBits", "key_label", "key_labels"]

_UNIFORM_PERSON = b"dpkeysel/u/v3"
_HASH_PERSON = b"dpkeysel/h/v2"
# The bytes of u_k's keystream produced for every key at once (the rest on demand).
PRF_BYTES = 32
# encode_labels((value,)) is this header, a type tag, the payload's length and the payload.
_ONE_LABEL = struct.pack(">Q", 1)
_STR_TAG = encode_labels(("",))[8:9]
_INT_TAG = encode_labels((0,))[8:9]


def key_label(value: object) -> bytes:
    """The injective encoding of one key value (a str or an int, never a bool or a float)."""
    if isinstance(value, np.integer):
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise DPTypeError(f"a selected key must be a str or an int, got {type(value).__name__}")
    return encode_labels((value,))


def key_labels(values: Iterable[object]) -> list[bytes]:
    """`key_label` of each value (the same bytes), with the common types encoded inline:
    the encoding is most of a key's cost once the hash is one C call."""
    out = []
    for value in values:
        kind = type(value)
        if kind is str:
            payload, tag = value.encode("utf-8"), _STR_TAG
        elif kind is int:
            payload, tag = str(value).encode("ascii"), _INT_TAG
        else:
            out.append(key_label(value))
            continue
        out.append(_ONE_LABEL + tag + len(payload).to_bytes(8, "big") + payload)
    return out


def _keystream(stream_key: bytes, size: int, skip: int = 0):
    """An encryptor of the ChaCha20 keystream under ``stream_key`` (nonce 0), ``skip``
    bytes in, and its next ``size`` bytes."""
    # A fresh key per key makes the fixed nonce safe (cryptography's 16-byte nonce is the
    # 32-bit counter plus the 96-bit nonce).
    encryptor = Cipher(algorithms.ChaCha20(stream_key, bytes(16)), mode=None).encryptor()
    if skip:
        encryptor.update(bytes(skip))
    return encryptor, encryptor.update(bytes(size))


class UniformBits:
    """The binary expansion of one key's u, read in order (module docstring): the first
    32 bytes of its ChaCha20 keystream (already produced), then the same keystream on."""

    __slots__ = ("_encryptor", "_head", "_stream_key")

    def __init__(self, digest: bytes) -> None:
        self._head = digest[:PRF_BYTES]
        self._stream_key = digest[PRF_BYTES:]
        self._encryptor = None

    def read(self, size: int) -> bytes:
        """The next ``size`` bytes of u's expansion."""
        head, self._head = self._head[:size], self._head[size:]
        if len(head) == size:
            return head
        if self._encryptor is None:
            self._encryptor, more = _keystream(self._stream_key, size - len(head), PRF_BYTES)
            return head + more
        return head + self._encryptor.update(bytes(size - len(head)))

    def __repr__(self) -> str:
        return "UniformBits(<keyed>)"


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

    def digests(self, values: Iterable[object]) -> list[bytes]:
        """Per key value, 64 bytes: the first 32 bytes of u_k's ChaCha20 keystream, then the
        stream key D_k (one keyed BLAKE2b call and one ChaCha20 context per key)."""
        key, person, blake = self._noise, _UNIFORM_PERSON, hashlib.blake2b
        out = []
        for label in key_labels(values):
            stream_key = blake(label, key=key, person=person, digest_size=32).digest()
            out.append(_keystream(stream_key, PRF_BYTES)[1] + stream_key)
        return out

    def uniform(self, value: object) -> UniformBits:
        """The bits of u for the key ``value`` (a function of the value alone)."""
        return UniformBits(self.digests((value,))[0])

    def value_hashes(self, values: Iterable[object]) -> np.ndarray:
        """64-bit keyed hashes of key values (int64), for ranking a unit's keys."""
        key, person, blake = self._hash, _HASH_PERSON, hashlib.blake2b
        digests = b"".join(
            blake(label, key=key, person=person, digest_size=8).digest()
            for label in key_labels(values)
        )
        return np.frombuffer(digests, dtype=">i8").astype(np.int64)

    def __repr__(self) -> str:
        return "SelectionKey(<secret>)"

    __str__ = __repr__

    def __reduce__(self):
        return (SelectionKey, (self._noise, self._hash))
