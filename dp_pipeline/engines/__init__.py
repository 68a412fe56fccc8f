"""Engines: DataFrame rows -> bounded cell vectors + diagnostics; one rule set per dialect.

One backend interface, `dp_pipeline.engines.backend`: ``aggregate(df, queries)`` returns
one `dp_pipeline.engines.base.CellAggregates` per query from every path (pandas, Spark
SQL, the Parquet pass); ``noisy_cells`` / ``noisy_tables`` give a Spark pass's noisy
tables, noised on the driver or the executors by one rule. The numpy rules
(`engines.numpy_rules`, `engines.bounding`) are shared by the pandas engine and the
Spark Parquet pass, the Spark SQL rules live in `engines.spark_sql`.
"""
