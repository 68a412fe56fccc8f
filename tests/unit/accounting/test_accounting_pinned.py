"""The accountant's reported values, pinned bit for bit on a fixed set of plans.

The accountant's method choice and bracket arithmetic may be reorganised, but on these
plans every reported bound (lower, upper, method) and the method list must stay exactly
as pinned in ``accounting_pins.json``: a moved line that changes one ulp, or a label,
fails here. The plans: the exact-reference mixtures (`accounting_reference.random_plan`),
the audited plans of `test_accounting_reference`, the seeded release plans of
`accounting_plans`, single mechanisms, selections beside other families, and the plans an
audit named (a subnormal δ, a negligible Gaussian, two incommensurate Gaussians).

Regenerate (only when a change of a reported value is intended and justified):
``PYTHONPATH=. python tests/unit/accounting/test_accounting_pinned.py --write``.
"""

from __future__ import annotations

import json
import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).parent))

from accounting_plans import named_plans

PINS = pathlib.Path(__file__).parent / "accounting_pins.json"
DELTA_AT = (0.5, 2.0)
EPSILON_AT = (1e-6, 1e-10)


def _bits(bound) -> list:
    return [float(bound.lower).hex(), float(bound.upper).hex(), str(bound.method)]


def answers(build) -> dict:
    """Every pinned answer of one plan, each query on the same accountant in this order
    (later queries reuse what earlier ones built, as in a release)."""
    accountant = build()
    result = {"method": str(accountant.method)}
    for epsilon in DELTA_AT:
        result[f"delta({epsilon!r})"] = _bits(accountant.delta(epsilon))
    for delta in EPSILON_AT:
        result[f"epsilon({delta!r})"] = _bits(accountant.epsilon(delta))
    result["methods"] = [str(name) for name in accountant.methods]
    return result


_PINNED = json.loads(PINS.read_text()) if PINS.exists() else {}


@pytest.mark.parametrize("name", sorted(named_plans()))
def test_reported_values_stay_bit_identical(name):
    assert name in _PINNED, f"{name} is not pinned: regenerate {PINS.name} (module docstring)"
    assert answers(named_plans()[name]) == _PINNED[name]


if __name__ == "__main__" and sys.argv[1:] == ["--write"]:
    pins = {name: answers(build) for name, build in sorted(named_plans().items())}
    PINS.write_text(json.dumps(pins, indent=1, ensure_ascii=False) + "\n")
    print(f"wrote {len(pins)} plans to {PINS}")
