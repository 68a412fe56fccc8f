"""The Spark SQL dialect of the query rules: coding rows to cells, bounding, diagnostics.

Column expressions and DataFrame transforms only (no Python per row); the
adapter that runs them is `dp_pipeline.engines.spark`.
"""
