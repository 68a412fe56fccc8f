"""Per-noise-partition noise: the one code path that turns true cell aggregates into a release.

Cell ``c`` belongs to noise partition ``c % noise_partitions`` (a fixed number
declared with the query, never Spark's partitioning). Inside a partition the
cells are taken in increasing cell index over the *whole declared domain*
(cells without rows get a true value of 0), and the j-th cell receives the
j-th draw of the stream ``QuerySpec.stream_labels(measure, partition)`` names,
one ``mechanism.sample(n, stream)`` call per partition. The noise of every cell
is therefore a function of (key, query, cell) alone: bit-identical across
engines, executors, core counts, shuffle partitions and task retries.

Keys. The UDFs built here close over a key-free copy of the query and the
derived `StreamKey` of each of its (measure, partition) streams, computed on
the driver: the master key never leaves it (it refuses to be pickled).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np
import pyarrow as pa

from dp_pipeline.errors import InternalError
from dp_pipeline.query.exact_sums import SUM_LIMIT, saturating_add
from dp_pipeline.query.spec import QuerySpec
from dp_pipeline.randomness import StreamKey, derive_stream_key

__all__ = [
    "CELL_COLUMN",
    "MEASURES",
    "PARTITION_COLUMN",
    "TABLE_COLUMN",
    "arrow_cells_noise_function",
    "arrow_noise_function",
    "noise_stream_keys",
    "noisy_dense",
    "noisy_partition",
    "output_value_types",
    "partition_cells",
    "release_columns",
    "released_table",
]

CELL_COLUMN = "_cell"
PARTITION_COLUMN = "_noise_partition"
TABLE_COLUMN = "_dp_table"  # index of a query among those run together
MEASURES = ("count", "sum")  # the noised integer vectors a query can have


def partition_cells(spec: QuerySpec, partition: int) -> np.ndarray:
    """All cell indexes of one noise partition, increasing."""
    return np.arange(partition, spec.cells.total, spec.noise_partitions, dtype=np.int64)


def _clamped_true_values(values: object, what: str) -> np.ndarray:
    """True aggregates as int64, clamped into [-SUM_LIMIT, SUM_LIMIT] (exact ints too)."""
    array = np.asarray(values)
    if array.dtype == object:
        ints = [min(max(int(v), -SUM_LIMIT), SUM_LIMIT) for v in array]
        return np.array(ints, dtype=np.int64)
    if not np.issubdtype(array.dtype, np.integer):
        raise InternalError(f"{what} must be integers, got dtype {array.dtype}")
    return np.clip(array.astype(np.int64, copy=False), -SUM_LIMIT, SUM_LIMIT)


def _noise_draws(values: object, what: str) -> np.ndarray:
    """int64 draws, or exact Python ints (object) when a very wide sampler leaves int64."""
    array = np.asarray(values)
    if array.dtype == object:
        return array
    if not np.issubdtype(array.dtype, np.integer):
        raise InternalError(f"{what} must be integers, got dtype {array.dtype}")
    return array.astype(np.int64, copy=False)


def noise_stream_keys(spec: QuerySpec) -> dict[tuple[str, int], StreamKey]:
    """The derived key of every (measure, noise partition) stream of ``spec`` (driver only)."""
    master = spec.master_key()
    partitions = min(spec.noise_partitions, spec.cells.total)
    return {
        (name, partition): derive_stream_key(master, *spec.stream_labels(name, partition))
        for name, _, _ in spec.measures()
        for partition in range(partitions)
    }


def noisy_partition(
    spec: QuerySpec,
    partition: int,
    true_values: Mapping[str, np.ndarray],
    stream_keys: Mapping[tuple[str, int], StreamKey] | None = None,
) -> dict[str, np.ndarray]:
    """True aggregates of every cell of ``partition`` (in `partition_cells` order) plus noise.

    Returns int64 noisy values per noised vector ("count", "sum"). The noise is
    exact (discrete Gaussian / Laplace samplers on a keyed ChaCha20 stream).
    ``stream_keys`` (from `noise_stream_keys`) is how a Spark task gets its
    streams; without it they are derived from the query's master key.

    Each true value is first clamped into ``[-SUM_LIMIT, SUM_LIMIT]`` (the public
    pre-noise clamp of `dp_pipeline.query.exact_sums`: 1-Lipschitz, so the sensitivity
    is unchanged; the engines already deliver clamped totals, so this only
    restates the invariant), and the noise is added by
    `dp_pipeline.query.exact_sums.saturating_add`: the exact noisy value, clamped into
    the int64 range as post-processing. Neither step can fail on any data.
    """
    size = (spec.cells.total - partition + spec.noise_partitions - 1) // spec.noise_partitions
    out = {}
    for name, mechanism, _sensitivity in spec.measures():
        values = _clamped_true_values(true_values[name], f"true {name}")
        if values.shape != (size,):
            raise InternalError(
                f"noise partition {partition} has {size} cells but {values.shape} {name} values"
            )
        if stream_keys is not None:
            stream = stream_keys[(name, partition)].stream()
        else:
            labels = spec.stream_labels(name, partition)
            stream = derive_stream_key(spec.master_key(), *labels).stream()
        noise = _noise_draws(mechanism.sample(size, stream), f"{name} noise")
        if noise.shape != (size,):
            raise InternalError(f"sampler returned {noise.shape} draws, expected {size}")
        out[name] = saturating_add(values, noise)
    return out


def noisy_dense(spec: QuerySpec, true_values: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Every declared cell's true value plus noise, dense by cell index, in one process.

    ``true_values`` holds one int64 vector of ``spec.cells.total`` true values per
    noised vector ("count", "sum"). Each noise partition gets exactly the
    `noisy_partition` call the Spark noise UDFs make for it, so the result is
    bit-identical to theirs (the noise of a cell depends only on the key, the
    stream labels and the cell index).
    """
    total = spec.cells.total
    names = [name for name, _, _ in spec.measures()]
    noisy = {name: np.empty(total, dtype=np.int64) for name in names}
    for partition in range(min(spec.noise_partitions, total)):
        cells = partition_cells(spec, partition)
        part = noisy_partition(spec, partition, {name: true_values[name][cells] for name in names})
        for name, values in part.items():
            noisy[name][cells] = values
    return noisy


def output_value_types(spec: QuerySpec) -> list[tuple[str, pa.DataType]]:
    """Names and Arrow types of the released value columns, in output order."""
    if spec.statistic == "count":
        return [("count", pa.int64())]
    sum_type = pa.int64() if spec.value_bounds.granularity.denominator == 1 else pa.float64()
    if spec.statistic == "sum":
        return [("sum", sum_type)]
    return [("sum", sum_type), ("count", pa.int64()), ("mean", pa.float64())]


def _scaled_int64(units: np.ndarray, factor: int) -> np.ndarray:
    """``clip(units * factor, int64 range)`` exactly, for a positive integer ``factor``.

    ``units * factor`` fits in int64 exactly when ``units`` lies in
    ``[ceil(-2**63 / factor), floor((2**63 - 1) / factor)]``; outside, the exact
    product is beyond the int64 end of the sign of ``units``.
    """
    if factor == 1:
        return units
    top = (2**63 - 1) // factor
    bottom = -((2**63) // factor)
    inside = (units >= bottom) & (units <= top)
    scaled = np.where(inside, units, 0) * np.int64(factor)
    if inside.all():
        return scaled
    ends = np.where(units < 0, np.int64(-(2**63)), np.int64(2**63 - 1))
    return np.where(inside, scaled, ends)


def release_columns(spec: QuerySpec, noisy: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Post-process noisy integer vectors into released value columns (no privacy cost).

    - ``sum`` is reported in the column's units: ``units * granularity``, an
      int64 when the granularity is an integer (clamped into the int64 range
      where the exact product leaves it), else float64 computed as
      ``units * numerator / denominator`` (the same IEEE operations everywhere).
    - ``mean`` = sum / max(count, 1), clipped into [lower, upper].
    """
    out: dict[str, np.ndarray] = {}
    if "sum" in noisy:
        bounds = spec.value_bounds
        units = noisy["sum"]
        if bounds.granularity.denominator == 1:
            out["sum"] = _scaled_int64(units, bounds.granularity.numerator)
        else:
            out["sum"] = (
                units.astype(np.float64)
                * float(bounds.granularity.numerator)
                / float(bounds.granularity.denominator)
            )
    if "count" in noisy:
        out["count"] = noisy["count"]
    if spec.statistic == "mean":
        denominator = np.maximum(noisy["count"], 1).astype(np.float64)
        mean = out["sum"].astype(np.float64) / denominator
        out["mean"] = np.clip(mean, float(spec.value_bounds.lower), float(spec.value_bounds.upper))
    return out


def _partition_of(table: pa.Table) -> int:
    partitions = np.unique(table.column(PARTITION_COLUMN).to_numpy())
    if partitions.size != 1:
        raise InternalError(f"a noise group holds partitions {partitions.tolist()}")
    return int(partitions[0])


def _dense_true_values(spec: QuerySpec, partition: int, table: pa.Table) -> dict[str, np.ndarray]:
    """The true values of every cell of ``partition`` (0 where the group has no row)."""
    cells = table.column(CELL_COLUMN).to_numpy()
    present = cells >= 0  # the marker row (-1) only makes an empty partition run
    positions = (cells[present] - partition) // spec.noise_partitions
    size = partition_cells(spec, partition).size
    true_values = {}
    for name, _, _ in spec.measures():
        dense = np.zeros(size, dtype=np.int64)
        dense[positions] = table.column(name).to_numpy(zero_copy_only=False)[present]
        true_values[name] = dense
    return true_values


def released_table(
    spec: QuerySpec,
    cells: np.ndarray,
    noisy: Mapping[str, np.ndarray],
    key_types: Mapping[str, pa.DataType],
) -> pa.Table:
    """The released Arrow table of ``cells``: decoded key columns, then the value columns.

    ``noisy`` holds the noisy integer vectors (`noisy_partition` output) of those
    cells; the value columns are their post-processing (`release_columns`).
    """
    value_types = output_value_types(spec)
    schema = pa.schema([(column, key_types[column]) for column in spec.cells.columns] + value_types)
    released = release_columns(spec, noisy)
    keys = spec.cells.decode(cells)
    arrays = [
        pa.array(values, type=key_types[column])
        for column, values in zip(spec.cells.columns, keys, strict=True)
    ]
    arrays += [pa.array(released[name], type=kind) for name, kind in value_types]
    return pa.Table.from_arrays(arrays, schema=schema)


def arrow_noise_function(
    spec: QuerySpec, key_types: Mapping[str, pa.DataType]
) -> Callable[[pa.Table], pa.Table]:
    """The grouped-Arrow UDF: one noise partition's present cells in, all its cells out.

    Input columns: ``_noise_partition`` (constant), ``_cell`` (cell index, or -1
    on the one marker row each partition gets so that empty partitions still run)
    and the true aggregates ("count", and "sum" for sums and means). Output: the
    key columns (with the Arrow types in ``key_types``) and the released values.
    """

    keys = noise_stream_keys(spec)
    shipped = spec.without_key()

    def noise_one_partition(table: pa.Table) -> pa.Table:
        partition = _partition_of(table)
        true_values = _dense_true_values(shipped, partition, table)
        noisy = noisy_partition(shipped, partition, true_values, keys)
        return released_table(shipped, partition_cells(shipped, partition), noisy, key_types)

    return noise_one_partition


def arrow_cells_noise_function(specs: Sequence[QuerySpec]) -> Callable[[pa.Table], pa.Table]:
    """The grouped-Arrow UDF of several queries at once: groups are (query, noise partition).

    Input: ``_dp_table`` and ``_noise_partition`` (constant per group), ``_cell``
    (-1 on the marker row) and the true "count" and "sum". Output: ``_dp_table``,
    ``_cell`` for every cell of that partition, and the noisy "count" and "sum"
    integer vectors (0 where the query has no such measure), before post-processing.
    The noise is the same as `arrow_noise_function`'s for each query.
    """
    schema = pa.schema(
        [(TABLE_COLUMN, pa.int32()), (CELL_COLUMN, pa.int64())]
        + [(name, pa.int64()) for name in MEASURES]
    )

    keys = [noise_stream_keys(spec) for spec in specs]
    shipped = [spec.without_key() for spec in specs]

    def noise_one_group(table: pa.Table) -> pa.Table:
        indexes = np.unique(table.column(TABLE_COLUMN).to_numpy())
        if indexes.size != 1:
            raise InternalError(f"a noise group holds queries {indexes.tolist()}")
        index = int(indexes[0])
        spec = shipped[index]
        partition = _partition_of(table)
        true_values = _dense_true_values(spec, partition, table)
        noisy = noisy_partition(spec, partition, true_values, keys[index])
        cells = partition_cells(spec, partition)
        zeros = np.zeros(cells.size, dtype=np.int64)
        arrays = [pa.array(np.full(cells.size, indexes[0], np.int32)), pa.array(cells)]
        arrays += [pa.array(noisy.get(name, zeros)) for name in MEASURES]
        return pa.Table.from_arrays(arrays, schema=schema)

    return noise_one_group
