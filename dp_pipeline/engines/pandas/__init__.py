"""The pandas engine adapter (numpy rules, one process)."""
