"""Keys kept against ε on a synthetic web log: the plot of docs/tutorial_open_domain.md.

    python examples/open_domain_keys.py --out docs/open_domain_keys.png

A web log of 100,000 visits by 20,000 visitors to Zipf-distributed URLs (numpy, seed 0);
for each ``selection_epsilon``, ``max_cells`` and ``selection_noise`` the URLs a
FROM_DATA count releases (``df.dp.count(by="url", domains={"url": FROM_DATA}, ...)``,
δ = 1e-6 for the selection). The plot shows the keys kept against ε, one line per
(``max_cells``, noise), and the
number of URLs held by at least 50 visitors for scale (a public-looking reference the
selection never sees). Prints the table it plots. Needs matplotlib.
"""

from __future__ import annotations

import argparse
from fractions import Fraction
from pathlib import Path

import numpy as np
import pandas as pd

from dp_pipeline import FROM_DATA, MasterKey

EPSILONS = (Fraction(1, 8), Fraction(1, 4), Fraction(1, 2), Fraction(1), Fraction(2), Fraction(4))
# (max_cells, selection_noise): Laplace for few keys per unit, Gaussian for many.
SERIES = ((1, "laplace"), (4, "laplace"), (16, "laplace"), (16, "gaussian"))


def web_log(visits: int = 100_000, visitors: int = 20_000, seed: int = 0) -> pd.DataFrame:
    """Visits (visitor, url): each visitor's URLs drawn from one Zipf law."""
    rng = np.random.default_rng(seed)
    return pd.DataFrame(
        {
            "visitor": rng.integers(0, visitors, visits),
            "url": [f"/page/{k}" for k in rng.zipf(1.3, visits) % 20_000],
        }
    )


def keys_kept(log: pd.DataFrame, key: MasterKey) -> pd.DataFrame:
    """One row per (max_cells, noise, selection_epsilon): the threshold and the URLs
    released."""
    rows = []
    for max_cells, noise in SERIES:
        for epsilon in EPSILONS:
            counts = log.dp.count(
                by="url",
                domains={"url": FROM_DATA},
                max_cells=max_cells,
                epsilon=1,
                selection_epsilon=epsilon,
                selection_delta=Fraction(1, 10**6),
                selection_noise=noise,
                key=key,
                release_id="open-domain-tutorial",
                table=f"urls {max_cells} {noise} {epsilon}",
                privacy_unit="visitor",
            )
            selection = counts.dp.info.key_selection
            rows.append(
                {
                    "max_cells": max_cells,
                    "noise": noise,
                    "selection_epsilon": float(epsilon),
                    "threshold": selection.threshold,
                    "keys_kept": selection.keys_kept,
                }
            )
    return pd.DataFrame(rows)


def plot(table: pd.DataFrame, reference: int, out: Path) -> None:
    """Keys kept against ε (log scale), one line per (max_cells, noise)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(6, 3.6))
    for (max_cells, noise), rows in table.groupby(["max_cells", "noise"], sort=False):
        axes.plot(
            rows["selection_epsilon"],
            rows["keys_kept"],
            marker="o",
            label=f"max_cells = {max_cells}, {noise}",
        )
    axes.axhline(reference, color="grey", linestyle=":", label="URLs with >= 50 visitors")
    axes.set_xscale("log", base=2)
    axes.set_xlabel("selection_epsilon (selection_delta = 1e-6)")
    axes.set_ylabel("URLs released")
    axes.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(out, dpi=110)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--out", type=Path, required=True, help="the PNG to write")
    out = parser.parse_args(argv).out
    log = web_log()
    table = keys_kept(log, MasterKey())
    print(table.to_string(index=False))
    reference = int((log.groupby("url")["visitor"].nunique() >= 50).sum())
    plot(table, reference, out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
