"""The public surface's one table of verbs and the stubs written from it.

- `verbs`: every verb of ``df.dp``, `dp_pipeline.spark`, `Session` and `Session.cost`,
  with the parameter objects that build its arguments (statistics from `dp_pipeline.query`,
  selections from `dp_pipeline.selection`), so it sits above both.
- `stubs`: the ``.pyi`` files type checkers read, written from the runtime signatures
  (``python -m dp_pipeline.surface.stubs``; ``--check`` compares them).
"""
