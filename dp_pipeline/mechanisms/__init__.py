"""Mechanisms as immutable values shared by the samplers, the accountant and the ledger."""

from dp_pipeline.mechanisms.additive import DiscreteGaussian, DiscreteLaplace
from dp_pipeline.mechanisms.exponential import BaseTwoExponential

__all__ = ["BaseTwoExponential", "DiscreteGaussian", "DiscreteLaplace"]
