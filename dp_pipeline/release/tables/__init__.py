"""A release's tables computed from its input: on pandas or on Spark, the noisy
invalid-row decision, and the consistent post-processing of the noisy tables."""
