"""Noise UDFs: from cells and their true aggregates to the released, noisy cells.

One implementation (`dp_pipeline.udfs.noise`) is shared by the Spark engine
(grouped ``applyInArrow`` over noise partitions) and the pandas engine (a loop
over noise partitions), which is why both release bit-identical tables.
"""

from dp_pipeline.udfs.noise import (
    arrow_noise_function,
    noisy_partition,
    partition_cells,
    release_columns,
)

__all__ = ["arrow_noise_function", "noisy_partition", "partition_cells", "release_columns"]
