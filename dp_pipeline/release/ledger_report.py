"""What ``dp-release ledger`` reports per population: spent, left and releases.

Read from the ledger only (`Ledger.populations`, `Ledger.spent`, `Ledger.history`):
the cap, the composed spend of the committed and open releases (the
accountant's upper bound, with its lower bound where the accountant gives one,
as `Ledger.reserve` composes it), what is left of the cap, and how many
releases are in each state. The same summary is a table for a person and a
JSON object for a scheduler or a dashboard.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from dp_pipeline.release.ledger.phrases import cap_phrase, delta_text, rounded, spend_points

__all__ = ["PopulationSummary", "summaries", "summary_table"]


@dataclass(frozen=True)
class PopulationSummary:
    """One population of a ledger: its cap, spend, what is left and its releases."""

    population: str
    cap: dict  # exact strings: rho, or epsilon and delta
    spent: dict | None  # `Spend.to_dict()`, None before any release
    left: dict  # rho left (exact), or epsilon left at the cap's delta (upper bound spent)
    releases: dict[str, int]  # committed, open (reserved or running), aborted
    history: list[dict]

    def to_dict(self) -> dict:
        return {
            "population": self.population,
            "cap": self.cap,
            "spent": self.spent,  # kept: ε at the cap's δ beside δ at the cap's ε
            "spent_at_cap": None if self.spent is None else spend_points(self.spent, self.cap),
            "left": self.left,
            "releases": self.releases,
            "history": self.history,
        }


def _left(spend, cap: dict) -> dict:
    if cap["rho"] is not None:
        used = Fraction(0) if spend is None or spend.rho is None else spend.rho
        return {"rho": str(max(Fraction(cap["rho"]) - used, Fraction(0)))}
    epsilon_cap = float(Fraction(cap["epsilon"]))
    if spend is None:
        return {"epsilon": epsilon_cap, "delta": cap["delta"]}
    if spend.epsilon is None:  # a cap with delta = 0: no epsilon at delta to subtract
        return {"epsilon": None, "delta": cap["delta"]}
    return {"epsilon": max(epsilon_cap - spend.epsilon, 0.0), "delta": cap["delta"]}


def summaries(ledger, population: str | None = None) -> list[PopulationSummary]:
    """Every population of ``ledger`` (a `Ledger`), or only ``population``."""
    caps = ledger.populations()
    names = [population] if population is not None else sorted(caps)
    found = []
    for name in names:
        spend, _ = ledger.spent(name)
        entries = ledger.history(name)
        counts = {"committed": 0, "open": 0, "aborted": 0}
        for entry in entries:
            if entry.status in ("committed", "aborted"):
                counts[entry.status] += 1
            else:
                counts["open"] += 1
        history = [
            {
                "release_id": entry.release_id,
                "state": entry.state or entry.status,
                "reserved_at": entry.reserved_at,
                "cumulative": entry.cumulative,
            }
            for entry in entries
        ]
        found.append(
            PopulationSummary(
                name,
                caps[name],
                None if spend is None else spend.to_dict(),
                _left(spend, caps[name]),
                counts,
                history,
            )
        )
    return found


def _figure(values: dict | None, cap: dict, *, up: bool) -> str:
    """A spend (``up``: an upper bound, rounded up) or what is left (rounded down), with
    the δ its ε is taken at: ``ε 1.88 at δ = 1e-9``."""
    if values is None:
        return "nothing"
    if cap["rho"] is not None:
        return f"ρ {rounded(Fraction(values['rho']), up=up)}" if values.get("rho") else "nothing"
    if values.get("epsilon") is None:
        return "-"
    return f"ε {rounded(values['epsilon'], up=up)} at δ = {delta_text(cap['delta'])}"


def summary_table(found: list[PopulationSummary]) -> str:
    """The summaries as a fixed-width table; ε spent and left are at the cap's δ, and say so."""
    rows = [("population", "cap", "spent", "left", "committed", "open", "aborted")]
    for item in found:
        rows.append(
            (
                item.population,
                cap_phrase(item.cap),
                _figure(item.spent, item.cap, up=True),
                _figure(item.left, item.cap, up=False),
                str(item.releases["committed"]),
                str(item.releases["open"]),
                str(item.releases["aborted"]),
            )
        )
    widths = [max(len(row[column]) for row in rows) for column in range(len(rows[0]))]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in rows
    )
