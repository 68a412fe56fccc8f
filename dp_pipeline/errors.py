"""Exception types.

User errors are ``ValueError``/``TypeError`` (or subclasses defined next to the
code that raises them) whose message names the field, the value and the rule.
``InternalError`` is reserved for broken invariants: a bug in dp_pipeline,
never the user's input. It is raised explicitly, never via ``assert`` (asserts
vanish under ``python -O``).
"""

from __future__ import annotations


class InternalError(RuntimeError):
    """An internal invariant failed. This is a bug in dp_pipeline; please report it."""
