"""Canonical JSON and its SHA-256: the identity of queries and releases.

Two descriptions have the same digest exactly when their canonical JSON is
equal (sorted keys, no whitespace, exact rationals as strings), so a digest
names what is computed, never how it happened to be written down.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

__all__ = ["canonical_json", "digest_of"]


def canonical_json(data: Any) -> str:
    """``data`` as canonical JSON (sorted keys, compact separators, UTF-8 kept)."""
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def digest_of(data: Any) -> str:
    """SHA-256 (64 hex digits) of `canonical_json` of ``data``."""
    return hashlib.sha256(canonical_json(data).encode("utf-8")).hexdigest()
