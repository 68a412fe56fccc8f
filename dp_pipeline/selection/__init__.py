"""DP selections (quantile, median, top-k) over bucket counts from any engine."""
