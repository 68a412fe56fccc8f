"""A short demo: exact discrete Gaussian noise on counts of a small synthetic table.

Run ``python -m dp_pipeline.demo``. The table is deterministic synthetic test
data (numpy's Generator is used for the DATA only); the noise comes from a fresh
`MasterKey` through a keyed ChaCha20 stream, so the noisy counts differ per run.
Every declared category is released, including those with a true count of 0.
This is a sampler demonstration, not a privacy accounting: the release job
(which plans σ² from a budget) replaces it as the main command.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pandas as pd

from dp_pipeline import DiscreteGaussian, MasterKey
from dp_pipeline.randomness import derive_stream

CATEGORIES = ["north", "south", "east", "west", "centre", "islands"]


def synthetic_table(rows: int = 1000) -> pd.DataFrame:
    """Deterministic synthetic people, one region each ("islands" never occurs: a zero count)."""
    rng = np.random.Generator(np.random.PCG64(2024))
    regions = rng.choice(CATEGORIES[:-1], size=rows, p=[0.35, 0.25, 0.2, 0.15, 0.05])
    return pd.DataFrame({"person_id": np.arange(rows), "region": regions})


def noisy_counts(table: pd.DataFrame, sigma2: Fraction, master: MasterKey) -> pd.DataFrame:
    """True and noisy counts per declared region (each person counted once: sensitivity 1)."""
    true = table["region"].value_counts().reindex(CATEGORIES, fill_value=0).astype(np.int64)
    noise = DiscreteGaussian(sigma2).sample(
        len(CATEGORIES), derive_stream(master, "demo", "region")
    )
    return pd.DataFrame(
        {
            "region": CATEGORIES,
            "true_count": true.to_numpy(),
            "noisy_count": true.to_numpy() + noise,
        }
    )


def main() -> None:
    sigma2 = Fraction(25)
    result = noisy_counts(synthetic_table(), sigma2, MasterKey())
    print(
        f"dp_pipeline demo: counts by region with exact discrete Gaussian noise, sigma^2 = {sigma2}"
    )
    print(
        "(noise from a fresh MasterKey and a keyed ChaCha20 stream; zero counts are released too)"
    )
    print(result.to_string(index=False))


if __name__ == "__main__":
    main()
