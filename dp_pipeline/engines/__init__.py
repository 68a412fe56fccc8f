"""Engines: DataFrame rows -> dense true cell vectors + diagnostics; one rule set per dialect.

Every engine adapter offers ``aggregate(df, queries)`` (see `dp_pipeline.engines.base`);
the numpy rules (`engines.numpy_rules`, `engines.bounding`) are shared by the pandas
engine and the Spark Parquet pass, the Spark SQL rules live in `engines.spark_sql`.
"""
