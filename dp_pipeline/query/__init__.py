"""What is computed, apart from where it runs: per-statistic parameters, domains, cell index,
value bounds, the exact-sum rules and the privacy cost of a query (known before any data is read).
"""
