"""Keyed cryptographic bit streams: the only source of noise randomness.

A secret 32-byte `MasterKey` is expanded with HKDF-SHA256 (RFC 5869) over an
unambiguous encoding of labels such as (release id, table, noise partition)
into the key of a ChaCha20 keystream (RFC 8439, via ``cryptography``, which
wraps OpenSSL). Each label tuple gets its own independent stream, so a retried
Spark task redraws exactly the same noise, while distinct labels never share a
stream (HKDF is a PRF in its info argument; the encoding is injective).

The key bytes never appear in a repr, str, log line or exception message.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import struct
import sys
from pathlib import Path

import numpy as np
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from dp_pipeline.errors import DPKeyError, DPTypeError, DPValueError

__all__ = [
    "MasterKey",
    "SecureStream",
    "StreamKey",
    "derive_stream",
    "derive_stream_key",
    "encode_labels",
]

KEY_BYTES = 32
# MasterKey.weakness: a key with fewer distinct byte values (or steps) is refused.
MIN_DISTINCT_BYTES = 16
_HKDF_SALT = b"dp_pipeline/stream-key/v1"
_TAG_STR = b"s"
_TAG_INT = b"i"
_TAG_BYTES = b"b"
# Keystream is produced in blocks of this many bytes (a multiple of the 64-byte
# ChaCha20 block) so that small draws do not each pay a call into OpenSSL.
_BUFFER_BYTES = 1 << 16
_BIG_ENDIAN = sys.byteorder == "big"


class MasterKey:
    """A secret 32-byte key. Its bytes never reach a repr, str, log or exception.

    ``MasterKey()`` draws a fresh key from the OS CSPRNG (``secrets``). The
    other constructors exist for deliberate reproducibility (audits, tests).
    """

    __slots__ = ("_key", "source")

    def __init__(self, key: bytes | None = None) -> None:
        if key is None:
            key = secrets.token_bytes(KEY_BYTES)
        if not isinstance(key, bytes | bytearray):
            raise DPTypeError(f"master key must be bytes, got {type(key).__name__}")
        if len(key) != KEY_BYTES:
            # The length is not secret; the bytes are, so they are not quoted.
            raise DPValueError(
                f"master key must be exactly {KEY_BYTES} bytes, got {len(key)} bytes"
            )
        self._key = bytes(key)
        # The file the key was read from (`from_file`), so that whoever binds the key to a
        # ledger records the binding in that file too (release.key_binding); not secret.
        self.source: Path | None = None

    @classmethod
    def generate(cls) -> MasterKey:
        """A fresh key from the operating system's CSPRNG (never one `weakness` refuses)."""
        key = cls()
        while key.weakness() is not None:  # probability below 1e-15 per draw
            key = cls()
        return key

    def weakness(self) -> str | None:
        """Why this key looks chosen by a person or a program rather than drawn, or None.

        A key supplied on purpose (file, environment) may be a placeholder: all zeros,
        one byte repeated, a counter ``00 01 02 ...``, a word typed four times. Such a
        key is guessable, and its public fingerprint then identifies it (anyone can
        compute the fingerprint of the all-zero key). The rule, on the 32 bytes:

        1. fewer than `MIN_DISTINCT_BYTES` (16) distinct byte values;
        2. fewer than 16 distinct steps ``(b[i+1] - b[i]) mod 256`` (counters, ramps);
        3. a period of at most 16 bytes (``b[i] == b[i + p]`` for every i).

        A uniformly random key breaks rule 1 with probability 3.2e-17 (the exact count of
        32 draws from 256 values with at most 15 distinct ones), rule 2 with 4.6e-16
        (31 uniform steps) and rule 3 below 2**-127: below 1e-15 together. The reason
        returned names the rule, never a byte of the key.
        """
        raw = self._key
        if len(set(raw)) < MIN_DISTINCT_BYTES:
            return f"it has fewer than {MIN_DISTINCT_BYTES} distinct byte values"
        steps = {(raw[i + 1] - raw[i]) % 256 for i in range(len(raw) - 1)}
        if len(steps) < MIN_DISTINCT_BYTES:
            return f"its successive byte differences take fewer than {MIN_DISTINCT_BYTES} values"
        for period in range(1, len(raw) // 2 + 1):
            if raw[period:] == raw[:-period]:
                return f"it repeats a pattern of {period} bytes"
        return None

    @classmethod
    def from_hex(cls, text: str) -> MasterKey:
        """Read a key written as 64 hexadecimal digits (whitespace ignored)."""
        if not isinstance(text, str):
            raise DPTypeError(f"master key hex must be a str, got {type(text).__name__}")
        cleaned = "".join(text.split())
        if len(cleaned) != 2 * KEY_BYTES:
            raise DPValueError(
                f"master key hex must be {2 * KEY_BYTES} hexadecimal digits, "
                f"got {len(cleaned)} characters"
            )
        try:
            raw = bytes.fromhex(cleaned)
        except ValueError:
            raise DPValueError("master key hex contains a non-hexadecimal character") from None
        return cls(raw)

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> MasterKey:
        """Read a key file: 64 hex digits (lines starting with ``#`` ignored), or exactly
        32 raw bytes."""
        data = Path(path).read_bytes()
        if len(data) == KEY_BYTES:
            key = cls(data)
            key.source = Path(path)
            return key
        try:
            text = data.decode("ascii")
        except UnicodeDecodeError:
            raise DPValueError(
                f"master key file {str(path)!r} is neither {KEY_BYTES} raw bytes "
                f"nor {2 * KEY_BYTES} hex digits"
            ) from None
        # Lines starting with "#" are notes: dp-release records the key's ledger there.
        text = "\n".join(line for line in text.splitlines() if not line.startswith("#"))
        try:
            key = cls.from_hex(text)
        except ValueError:
            raise DPValueError(
                f"master key file {str(path)!r} is neither {KEY_BYTES} raw bytes "
                f"nor {2 * KEY_BYTES} hex digits"
            ) from None
        key.source = Path(path)
        return key

    @classmethod
    def from_env(cls, name: str) -> MasterKey:
        """Read a key from the environment variable ``name`` (64 hex digits)."""
        text = os.environ.get(name)
        if text is None:
            raise DPKeyError(f"environment variable {name!r} with the master key is not set")
        try:
            return cls.from_hex(text)
        except ValueError:
            raise DPValueError(
                f"environment variable {name!r} must hold {2 * KEY_BYTES} hex digits"
            ) from None

    @property
    def fingerprint(self) -> str:
        """A public 16-hex-digit identifier of the key (HMAC-SHA256 of a fixed label).

        Lets an audit say which key was used without revealing it.
        """
        return hmac.new(self._key, b"dp_pipeline/key-fingerprint/v1", hashlib.sha256).hexdigest()[
            :16
        ]

    def hmac_sha256(self, label: bytes, message: bytes) -> bytes:
        """Keyed HMAC-SHA256 under a key derived for ``label`` (e.g. input fingerprints)."""
        subkey = _hkdf(self._key, b"dp_pipeline/hmac/" + label)
        return hmac.new(subkey, message, hashlib.sha256).digest()

    def _derive(self, info: bytes) -> bytes:
        return _hkdf(self._key, info)

    def __repr__(self) -> str:
        return f"MasterKey(<secret>, fingerprint={self.fingerprint})"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, MasterKey):
            return NotImplemented
        return hmac.compare_digest(self._key, other._key)

    def __hash__(self) -> int:
        return hash(self.fingerprint)

    def __reduce__(self):
        # Executors get derived `StreamKey`s only (and only the tasks that add noise);
        # refusing to pickle makes any other route for the master key fail loudly.
        raise DPTypeError(
            "a MasterKey is never pickled or shipped to Spark executors; derive the "
            "stream keys a task needs on the driver (dp_pipeline.randomness.StreamKey)"
        )


def _hkdf(key: bytes, info: bytes) -> bytes:
    return HKDF(algorithm=hashes.SHA256(), length=KEY_BYTES, salt=_HKDF_SALT, info=info).derive(key)


def encode_labels(labels: tuple[str | int | bytes, ...]) -> bytes:
    """Injective encoding of a label tuple: type tag, 8-byte length, payload for each label.

    The length prefix makes ("a", "bc") and ("ab", "c") distinct; the type tag
    makes the string "1" and the integer 1 distinct.
    """
    parts = [struct.pack(">Q", len(labels))]
    for label in labels:
        if isinstance(label, bool):
            raise DPTypeError(f"stream label must be str, int or bytes, got bool {label!r}")
        if isinstance(label, str):
            tag, payload = _TAG_STR, label.encode("utf-8")
        elif isinstance(label, int | np.integer):
            tag, payload = _TAG_INT, str(int(label)).encode("ascii")
        elif isinstance(label, bytes | bytearray):
            tag, payload = _TAG_BYTES, bytes(label)
        else:
            raise DPTypeError(f"stream label must be str, int or bytes, got {type(label).__name__}")
        parts.append(tag + struct.pack(">Q", len(payload)) + payload)
    return b"".join(parts)


class StreamKey:
    """The derived key of one stream: what a Spark task that adds noise receives.

    HKDF output for one label tuple; it opens exactly that stream and, HKDF
    being a PRF, tells nothing about the master key or any other stream. Its
    bytes never reach a repr; it pickles (unlike `MasterKey`) because shipping
    it to the one task that draws from its stream is its purpose.
    """

    __slots__ = ("_key",)

    def __init__(self, key: bytes) -> None:
        if not isinstance(key, bytes) or len(key) != KEY_BYTES:
            raise DPValueError(f"stream key must be {KEY_BYTES} bytes")
        self._key = key

    def stream(self) -> SecureStream:
        """A fresh reader of the stream from its first byte."""
        return SecureStream(self._key)

    def __repr__(self) -> str:
        return "StreamKey(<secret>)"

    def __reduce__(self):
        return (StreamKey, (self._key,))


def derive_stream_key(master: MasterKey, *labels: str | int | bytes) -> StreamKey:
    """The `StreamKey` for ``labels`` under ``master`` (HKDF-SHA256, RFC 5869)."""
    if not isinstance(master, MasterKey):
        raise DPTypeError(f"master must be a MasterKey, got {type(master).__name__}")
    if not labels:
        raise DPValueError(
            "derive_stream needs at least one label (e.g. release, table, partition)"
        )
    return StreamKey(master._derive(b"dp_pipeline/stream/v1" + encode_labels(labels)))


def derive_stream(master: MasterKey, *labels: str | int | bytes) -> SecureStream:
    """The ChaCha20 stream for ``labels`` under ``master`` (HKDF-SHA256 key derivation)."""
    return derive_stream_key(master, *labels).stream()


class SecureStream:
    """A ChaCha20 keystream read as bytes and unsigned integers (`dp_pipeline.noise.uniform`
    turns them into exact uniform integers and Bernoulli draws).

    Every method consumes the keystream in order, so the same key and the same
    sequence of calls always give the same values.
    """

    __slots__ = ("_buffer", "_encryptor", "_position", "_zeros")

    def __init__(self, key: bytes) -> None:
        if not isinstance(key, bytes) or len(key) != KEY_BYTES:
            raise DPValueError(f"stream key must be {KEY_BYTES} bytes")
        # A fresh key per stream makes a fixed nonce safe (the nonce argument of
        # cryptography's ChaCha20 is the 32-bit counter plus the 96-bit nonce).
        cipher = Cipher(algorithms.ChaCha20(key, b"\x00" * 16), mode=None)
        self._encryptor = cipher.encryptor()
        self._zeros = memoryview(bytes(_BUFFER_BYTES))
        # Keystream not yet handed out is self._buffer[self._position:].
        self._buffer = np.empty(_BUFFER_BYTES, dtype=np.uint8)
        self._position = _BUFFER_BYTES

    def __repr__(self) -> str:
        return "SecureStream(<keyed ChaCha20>)"

    def _fill(self, out: np.ndarray) -> None:
        """Write the next ``out.size`` keystream bytes into the uint8 array ``out``.

        Large requests are encrypted straight into ``out`` (no intermediate
        bytes objects); the byte sequence is the keystream in order either way.
        """
        size = out.size
        position = self._position
        available = _BUFFER_BYTES - position
        if size <= available:
            out[:] = self._buffer[position : position + size]
            self._position = position + size
            return
        out[:available] = self._buffer[position:]
        offset = available
        while size - offset >= _BUFFER_BYTES:
            self._encryptor.update_into(self._zeros, out[offset : offset + _BUFFER_BYTES])
            offset += _BUFFER_BYTES
        rest = size - offset
        if rest:
            self._encryptor.update_into(self._zeros, self._buffer)
            out[offset:] = self._buffer[:rest]
            self._position = rest
        else:
            self._position = _BUFFER_BYTES

    def random_bytes(self, n: int) -> bytes:
        """The next ``n`` bytes of keystream."""
        if n < 0:
            raise DPValueError(f"n must be >= 0, got {n}")
        out = np.empty(n, dtype=np.uint8)
        self._fill(out)
        return out.tobytes()

    def random_uint64(self, n: int) -> np.ndarray:
        """``n`` independent uniform 64-bit integers (little-endian keystream words)."""
        out = np.empty(n, dtype=np.uint64)
        self._fill(out.view(np.uint8))
        if _BIG_ENDIAN:
            out.byteswap(inplace=True)
        return out

    def random_uint32(self, n: int) -> np.ndarray:
        """``n`` independent uniform 32-bit integers (little-endian keystream words)."""
        out = np.empty(n, dtype=np.uint32)
        self._fill(out.view(np.uint8))
        if _BIG_ENDIAN:
            out.byteswap(inplace=True)
        return out
