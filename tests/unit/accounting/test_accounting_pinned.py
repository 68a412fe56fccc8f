"""The accountant's reported values, pinned to their last bits on a fixed set of plans.

The accountant's method choice and bracket arithmetic may be reorganised, but on these
plans every method label and the method list must stay exactly as pinned in
``accounting_pins.json``, and every reported bound within ``ULPS`` units in the last place:
the floating-point libraries underneath (numpy's vectorised exp and log take other SIMD
paths on other CPUs) may round a last bit differently on another machine, while a moved
line that changes a bound more, or a label, fails here. Whether each bound is true is
checked against exact references elsewhere (`test_accounting_brackets_true`,
`test_accounting_reference`). The plans: the exact-reference mixtures
(`accounting_reference.random_plan`),
the audited plans of `test_accounting_reference`, the seeded release plans of
`accounting_plans`, single mechanisms, selections beside other families, and the plans an
audit named (a subnormal δ, a negligible Gaussian, two incommensurate Gaussians).

Regenerate (only when a change of a reported value is intended and justified):
``PYTHONPATH=. python tests/unit/accounting/test_accounting_pinned.py --write``.
"""

from __future__ import annotations

import json
import math
import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).parent))

from accounting_plans import named_plans

PINS = pathlib.Path(__file__).parent / "accounting_pins.json"
DELTA_AT = (0.5, 2.0)
ULPS = 4
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
    found, pinned = answers(named_plans()[name]), _PINNED[name]
    assert found.keys() == pinned.keys()
    for query, value in pinned.items():
        if not isinstance(value, list) or len(value) != 3 or query == "methods":
            assert found[query] == value, query
            continue
        assert found[query][2] == value[2], query  # the method label, exactly
        for end, (got, want) in enumerate(zip(found[query][:2], value[:2], strict=True)):
            assert ulps_apart(float.fromhex(got), float.fromhex(want)) <= ULPS, (query, end)


def ulps_apart(a: float, b: float) -> int:
    """How many doubles lie between ``a`` and ``b`` (0 when equal)."""
    steps, low, high = 0, min(a, b), max(a, b)
    while low < high and steps <= ULPS:
        low = math.nextafter(low, high)
        steps += 1
    return steps


def test_ulps_apart_counts_doubles():
    assert ulps_apart(1.0, 1.0) == 0
    assert ulps_apart(1.0, math.nextafter(1.0, 2.0)) == 1
    assert ulps_apart(5e-324, 0.0) == 1
    assert ulps_apart(1.0, 1.0 + 1e-9) > ULPS


if __name__ == "__main__" and sys.argv[1:] == ["--write"]:
    pins = {name: answers(build) for name, build in sorted(named_plans().items())}
    PINS.write_text(json.dumps(pins, indent=1, ensure_ascii=False) + "\n")
    print(f"wrote {len(pins)} plans to {PINS}")
