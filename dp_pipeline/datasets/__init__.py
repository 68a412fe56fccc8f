"""Deterministic synthetic test data (numpy's Generator for DATA only, never for noise)."""
