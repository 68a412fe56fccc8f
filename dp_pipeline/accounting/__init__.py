"""Driver-side privacy accounting: pure math on mechanisms, and the budget ledger."""
