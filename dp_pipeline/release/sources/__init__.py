"""Where a release's input comes from: the files an engine reads, their fingerprint,
the columns and types read, and the sealed synthetic sample."""
