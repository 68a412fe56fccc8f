"""Deterministic synthetic card payments with an open set of merchants (TEST DATA only).

One row per payment: ``payer_id`` (the privacy unit, ``"p000042"``), ``merchant``
(``"m00017"``: Zipf-distributed, so a few merchants are paid by thousands of payers
and most by one or two: the keys no one can declare in advance), ``channel``
(``"web"``, ``"shop"``, ``"app"``) and ``amount`` (whole currency units). Each payer
makes a few payments at a few favourite merchants. numpy's Generator, seeded: data
for examples and tests, never noise.
"""

from __future__ import annotations

import os

import numpy as np
import pandas as pd

from dp_pipeline.errors import DPValueError

__all__ = ["CHANNELS", "payments_frame", "write_payments"]

CHANNELS = ("web", "shop", "app")
# Merchant popularity ~ rank^-ZIPF_EXPONENT, over this many possible merchants.
ZIPF_EXPONENT = 1.3
MERCHANTS = 100_000


def payments_frame(payers: int = 20_000, seed: int = 2026) -> pd.DataFrame:
    """The payments of ``payers`` payers (1 to 8 payments each, at 1 to 3 merchants)."""
    if isinstance(payers, bool) or not isinstance(payers, int) or not 1 <= payers <= 10**7:
        raise DPValueError(f"payers={payers!r}: must be an integer between 1 and 10**7")
    rng = np.random.Generator(np.random.PCG64(seed))
    favourites = rng.integers(1, 4, payers)
    ranks = rng.zipf(ZIPF_EXPONENT, (payers, 3))
    ranks = np.where(ranks > MERCHANTS, rng.integers(1, MERCHANTS + 1, (payers, 3)), ranks)
    counts = rng.integers(1, 9, payers)
    payer = np.repeat(np.arange(payers), counts)
    choice = (rng.random(payer.size) * favourites[payer]).astype(np.int64)
    merchant = ranks[payer, choice]
    amount = np.maximum(1, rng.lognormal(3.0, 1.0, payer.size).round()).astype(np.int64)
    return pd.DataFrame(
        {
            "payer_id": [f"p{p:06d}" for p in payer.tolist()],
            "merchant": [f"m{m:05d}" for m in merchant.tolist()],
            "channel": np.asarray(CHANNELS, dtype=object)[rng.integers(0, 3, payer.size)],
            "amount": amount,
        }
    )


def write_payments(path: str | os.PathLike[str], payers: int = 20_000, seed: int = 2026) -> None:
    """`payments_frame` written as CSV (a header line, then one payment per line)."""
    payments_frame(payers, seed).to_csv(path, index=False)
