"""The machine a Spark session starts on: a Java runtime (`java`), the JVM's start-up cache.

Used by `dp_pipeline.engines.spark.session.start` only, off the engines' import path.
"""
