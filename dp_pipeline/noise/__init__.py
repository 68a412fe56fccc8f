"""Exact vectorized samplers over a keyed bit stream (Canonne–Kamath–Steinke 2020).

* `bernoulli_exp(gamma, size, stream)` -> bool array, P[True] = exp(-gamma) (Algorithm 1);
* `discrete_laplace(scale, size, stream)` -> P[Z = z] ∝ exp(-|z|/scale) (Algorithm 2);
* `discrete_gaussian(sigma2, size, stream)` -> P[X = x] ∝ exp(-x²/(2σ²)) (Algorithm 3).

Integer arithmetic only, on uniform draws from a `dp_pipeline.randomness.SecureStream`.
Results are int64 arrays, or object arrays of exact Python ints for parameters so
large that values may leave int64 (scale > 2^50, σ² > 2^100); see each function.
"""

from dp_pipeline.noise.bernoulli_exp import bernoulli_exp
from dp_pipeline.noise.gaussian import discrete_gaussian
from dp_pipeline.noise.laplace import discrete_laplace

__all__ = ["bernoulli_exp", "discrete_gaussian", "discrete_laplace"]
