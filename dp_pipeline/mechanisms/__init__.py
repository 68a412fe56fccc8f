"""Mechanisms as immutable values shared by the samplers, the accountant and the ledger."""

from dp_pipeline.mechanisms.additive import DiscreteGaussian, DiscreteLaplace

__all__ = ["DiscreteGaussian", "DiscreteLaplace"]
