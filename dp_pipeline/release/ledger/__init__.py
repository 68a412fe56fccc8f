"""The budget ledger: what each population spent, the run's states and lease, and
the identity that binds a release id to its spec, input and key."""
