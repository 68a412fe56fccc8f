"""Driver-side privacy accounting: pure math on mechanism values, knows nothing of data.

Methods: zCDP (CKS 2020 Cor. 13), exact 1-D discrete Gaussian (CKS Thm. 7), exact
compositions by inversion of the moment generating function (Bromwich integral with
rigorous error bounds), multivariate lattice FFT (CKS §4), grid privacy-loss distributions
by FFT (Koskela et al. 2021),
calibration of σ² / Laplace scales, continuous Gaussian calibration (Balle–Wang, Vinterbo),
and exact margins of error. The persistent budget ledger is `dp_pipeline.release.ledger.store`.

What a user needs is exported here: the `PrivacyAccountant` (compose mechanisms and
events, read δ(ε) and ε(δ) as two-sided bounds; a key selection is one `KeySelection`
event), one mechanism's δ, ε, ρ (and a discrete
Laplace's pure ε), the calibrations, margins of error and exact noise variances.
"""

from dp_pipeline.accounting.accountant import PrivacyAccountant
from dp_pipeline.accounting.accuracy import margin_of_error
from dp_pipeline.accounting.bounds import DeltaBound, EpsilonBound
from dp_pipeline.accounting.calibration import (
    calibrate_discrete_gaussian,
    calibrate_discrete_laplace,
    calibrate_zcdp_shares,
)
from dp_pipeline.accounting.discrete_gaussian import (
    discrete_gaussian_delta,
    discrete_gaussian_epsilon,
    discrete_gaussian_rho,
)
from dp_pipeline.accounting.discrete_laplace import (
    discrete_laplace_delta,
    discrete_laplace_epsilon,
    discrete_laplace_pure_epsilon,
    discrete_laplace_rho,
)
from dp_pipeline.accounting.events import KeySelection, PrivacyEvent, key_selection
from dp_pipeline.accounting.gaussian import (
    gaussian_sigma_analytic,
    gaussian_sigma_classic,
    gaussian_sigma_vinterbo,
)
from dp_pipeline.accounting.multivariate import multivariate_delta, multivariate_epsilon
from dp_pipeline.accounting.noise_variance import noise_variance
from dp_pipeline.accounting.pld import PrivacyLossDistribution
from dp_pipeline.accounting.zcdp import standard_zcdp_epsilon, zcdp_to_delta, zcdp_to_epsilon

__all__ = [
    "DeltaBound",
    "EpsilonBound",
    "KeySelection",
    "PrivacyAccountant",
    "PrivacyEvent",
    "PrivacyLossDistribution",
    "calibrate_discrete_gaussian",
    "calibrate_discrete_laplace",
    "calibrate_zcdp_shares",
    "discrete_gaussian_delta",
    "discrete_gaussian_epsilon",
    "discrete_gaussian_rho",
    "discrete_laplace_delta",
    "discrete_laplace_epsilon",
    "discrete_laplace_pure_epsilon",
    "discrete_laplace_rho",
    "gaussian_sigma_analytic",
    "gaussian_sigma_classic",
    "gaussian_sigma_vinterbo",
    "key_selection",
    "margin_of_error",
    "multivariate_delta",
    "multivariate_epsilon",
    "noise_variance",
    "standard_zcdp_epsilon",
    "zcdp_to_delta",
    "zcdp_to_epsilon",
]
