"""What a release reports: ``privacy_report.json``, ``report.html`` with its plots,
and the accuracy against the truth on synthetic input."""
