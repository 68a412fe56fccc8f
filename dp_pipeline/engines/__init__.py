"""Engines: DataFrame rows -> dense true cell vectors + diagnostics; one rule set per dialect.

One backend interface, `dp_pipeline.engines.backend.aggregate(df, queries)`, returns one
`dp_pipeline.engines.base.CellAggregates` per query from every path (pandas, Spark SQL,
the Parquet pass);
the numpy rules (`engines.numpy_rules`, `engines.bounding`) are shared by the pandas
engine and the Spark Parquet pass, the Spark SQL rules live in `engines.spark_sql`.
"""
