"""Queries whose grouping key is selected from the data (``domains={"merchant": FROM_DATA}``).

- `plan`: the statistic over a stand-in domain (its noise calibrated to the worst-case
  sensitivity, whatever keys are released) and the selection's plan, threshold and event,
  all before anything is read; `bind_keys` puts the released keys in place.
- `pandas`: the selection and the statistic on a pandas DataFrame.
- `spark`: the same on a Spark DataFrame, the selection streamed (imports PySpark, so it
  is not re-exported here).

Above `dp_pipeline.keyselect` (the selection core) and the engines, below the surfaces
(``df.dp``, `dp_pipeline.spark`, `Session`).
"""

from __future__ import annotations

from dp_pipeline.from_data.plan import PlannedStatistic, SelectedKey, bind_keys, plan_statistic

__all__ = ["PlannedStatistic", "SelectedKey", "bind_keys", "plan_statistic"]
