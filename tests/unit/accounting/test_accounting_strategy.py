"""The accountant's one ordered strategy: its table of methods, `explain`, the capped
flag that steers an ε search, and the one bracket intersection (`DeltaBound.intersect`)."""

from __future__ import annotations

from fractions import Fraction

from accounting_plans import named_plans

from dp_pipeline.accounting import PrivacyAccountant, zcdp_to_epsilon
from dp_pipeline.accounting.bounds import DeltaBound, Method
from dp_pipeline.accounting.strategy import ROWS
from dp_pipeline.mechanisms import DiscreteGaussian, DiscreteLaplace


def test_the_table_is_one_ordered_list_of_methods():
    assert [row.method for row in ROWS] == [
        Method.NEGLIGIBLE_GAUSSIANS,
        Method.THEOREM7,
        Method.LATTICE_CONDITIONING,
        Method.MGF_INVERSION,
        Method.LATTICE_FFT,
        Method.ZCDP,
    ]
    events = list(PrivacyAccountant().add(DiscreteLaplace(2)).add(DiscreteLaplace(3)).events)
    assert ROWS[0].supports(events) == "no discrete Gaussian"
    assert ROWS[1].supports(events) == (
        "not one discrete Gaussian or Laplace coordinate with Δ <= 64"
    )
    assert ROWS[3].supports(events) == "no discrete Gaussian with σ² >= 36.5 (none is smooth)"


def test_explain_says_why_each_earlier_method_was_skipped():
    accountant = named_plans()["laplace-conditioning"]()
    assert accountant.explain() == [
        ("negligible gaussians", "the discrete Gaussians move ε by more than 1e-06"),
        ("theorem7", "not one discrete Gaussian or Laplace coordinate with Δ <= 64"),
        (
            "lattice_conditioning",
            "no discrete Gaussian coordinate's loss step exceeds the rest's loss range",
        ),
        ("mgf_inversion", "no discrete Gaussian with σ² >= 36.5 (none is smooth)"),
        ("support_exact", "used"),
    ]
    single = PrivacyAccountant().add(DiscreteGaussian(8))
    assert single.explain() == [
        ("negligible gaussians", "nothing but discrete Gaussians"),
        ("theorem7", "used"),
    ]


def test_the_answering_method_is_the_one_the_bounds_name():
    for name in ("dg8", "dl2", "pure-half-x3", "laplace-conditioning", "conditioning-seed60"):
        accountant = named_plans()[name]()
        used = accountant.explain()[-1][0]
        assert used == accountant.method
        assert accountant.delta(1.0).method.startswith(used) or accountant.delta(1.0).capped


def test_intersect_keeps_the_larger_lower_and_the_upper_of_the_tighter_bracket():
    one = DeltaBound(0.1, 0.5, Method.SUPPORT_EXACT.value)
    two = DeltaBound(0.2, 0.6, Method.PLD.value, capped=True)
    assert one.intersect(two) == DeltaBound(0.2, 0.5, "support_exact")
    assert not one.intersect(two).capped
    assert two.intersect(one) == DeltaBound(0.2, 0.5, "support_exact")
    # a tie keeps the first one's name
    assert one.intersect(DeltaBound(0.0, 0.5, "pld_fft")).method == "support_exact"
    # a lower end above the other's upper (rounding) is clipped to the upper end
    clipped = DeltaBound(0.3, 0.4, "zcdp", capped=True).intersect(DeltaBound(0.45, 0.9, "x"))
    assert clipped == DeltaBound(0.4, 0.4, "zcdp") and clipped.capped
    assert DeltaBound.clipped(0.7, 0.6, "theorem7") == DeltaBound(0.6, 0.6, "theorem7")


def test_a_closed_form_cap_is_flagged_not_parsed():
    # tiny-σ² Gaussians with huge shifts: the zCDP cap gives the bound at its own ε
    accountant = PrivacyAccountant()
    accountant.add(DiscreteGaussian(Fraction(1046564546684843453818047382966763520)), [8167])
    accountant.add(DiscreteLaplace(Fraction(3747090928, 761)), 7010)
    accountant.add(DiscreteGaussian(Fraction(123286, 943043)), [29387])
    accountant.add(DiscreteGaussian(Fraction(21401944, 593471)), [4471, 1, 45])
    accountant.add(DiscreteGaussian(Fraction(21703415495572679542458438719111168)), [90822, 29410])
    bound = accountant.delta(zcdp_to_epsilon(float(accountant.rho()), 1e-10))
    assert bound.capped and bound.method == "zcdp (tighter than mgf_inversion)"
    tight = PrivacyAccountant().add(DiscreteGaussian(8)).delta(1.0)
    assert not tight.capped and tight.method == Method.THEOREM7
    assert "capped" not in repr(tight)  # the repr and equality stay (lower, upper, method)
