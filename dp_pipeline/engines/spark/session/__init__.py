"""A Spark session's lifecycle, for the job layer that owns one: start, settings, banner, death.

`start` starts a local, classic or Spark Connect session (the Java runtime from
`dp_pipeline.platform.java`); `quiet` sends the JVM's start-up lines to a log
file; `failures` names a session that died under a run; `executors` checks that
the executors' Python imports this dp_pipeline before anything is spent; `kinds`
tells a classic session from a Spark Connect one. The engines never start a
session: they receive one and only ask `kinds` what it is.
"""
