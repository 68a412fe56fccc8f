"""The Spark engine adapter: Spark SQL aggregation or the Parquet pass, then the noise step.

Imports PySpark; nothing below the engines layer does.
"""
