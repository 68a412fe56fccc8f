"""The fingerprint of files outside the local file system holds whole files in a JVM's heap
(Spark's ``binaryFile`` reader): hashed in groups one heap holds, and a file no heap
setting in force can hold refused before the reservation, naming the file and the fix."""

from __future__ import annotations

import os

import pytest

from dp_pipeline.release.run import Progress, run_release
from dp_pipeline.release.sources.binary_memory import (
    BINARY_FILE_BYTES,
    HOLD_FACTOR,
    file_groups,
    hashing_budget,
    heap_setting,
    memory_bytes,
    task_slots,
    too_large_problem,
)
from dp_pipeline.release.spec.load import load_spec
from dp_pipeline.release.spec.model import SpecError
from tests.unit.release.sources.test_release_sources import _ledger_rows, spec_text, write_spec

MIB, GIB = 2**20, 2**30


def test_memory_settings_read_as_spark_reads_them():
    assert memory_bytes("2g") == 2 * GIB
    assert memory_bytes("512m") == memory_bytes("512M") == memory_bytes("512mb") == 512 * MIB
    assert memory_bytes("4096") == 4 * GIB  # no unit: MiB, as spark.driver.memory takes it
    assert memory_bytes("1t") == 2**40 and memory_bytes("100k") == 100 * 2**10
    assert memory_bytes("lots") is None and memory_bytes("2.5g") is None
    assert heap_setting("local[2]") == heap_setting("local") == "spark.driver.memory"
    assert heap_setting("spark://host:7077") == heap_setting("yarn") == "spark.executor.memory"


def test_files_are_grouped_so_one_heap_holds_a_group():
    # 2g: (2048 - 300) MiB x 0.6 for the files; a 124 MB file holds 4 x 124 MB.
    budget = hashing_budget(2 * GIB)
    assert budget == int(1748 * MIB * 0.6)
    sizes = [(f"f{i}", 124_000_000) for i in range(10)]
    groups = file_groups(sizes, budget)
    assert [len(g) for g in groups] == [2, 2, 2, 2, 2]
    assert [uri for group in groups for uri in group] == [uri for uri, _ in sizes]
    for group in groups:
        assert sum(HOLD_FACTOR * size for uri, size in sizes if uri in group) <= budget
    assert [len(g) for g in file_groups(sizes, hashing_budget(1536 * MIB))] == [1] * 10
    # One job when the tasks one JVM runs at once fit anyway (local[2] at 2g), else groups.
    assert file_groups(sizes, budget, slots=2) == [[uri for uri, _ in sizes]]
    assert [len(g) for g in file_groups(sizes, budget, slots=4)] == [2, 2, 2, 2, 2]
    assert task_slots("local[2]", None, None) == 2 and task_slots("local[3,2]", "8", "1") == 3
    assert task_slots("local", None, None) == 1 and task_slots("local[*]", None, None) >= 1
    assert task_slots("yarn", "4", "2") == 2 and task_slots("spark://h:7077", None, None) is None
    assert [len(g) for g in file_groups(sizes, hashing_budget(8 * GIB))] == [10]
    # Small files share one job; a file needing more than the budget is alone.
    assert file_groups([("a", 10), ("b", 20), ("c", budget), ("d", 5)], budget) == [
        ["a", "b"],
        ["c"],
        ["d"],
    ]
    assert hashing_budget(256 * MIB) == 0


def test_a_file_too_large_is_named_with_the_fix_and_no_content():
    files = [("viewfs://c/data/a.csv", "viewfs://c/data/a.csv", 124_000_000)]
    assert too_large_problem(files, "spark.driver.memory", 2 * GIB) is None
    problem = too_large_problem(files, "spark.driver.memory", GIB)
    assert problem == (
        "1 file(s) are too large to fingerprint with spark.driver.memory = 1g, e.g. "
        "'viewfs://c/data/a.csv' (118 MiB): Spark's binaryFile reader holds a whole file, "
        "about 4 times its size, in the heap; raise spark.driver.memory to 2g or more "
        "(--conf spark.driver.memory=2g or [run.spark_conf]), or write the input as smaller "
        "files (Spark writes parts of about 128 MB)"
    )
    huge = [*files, ("s3a://<credentials>@b/p/big.csv", "s3a://k:s@b/p/big.csv", 3 * GIB)]
    problem = too_large_problem(huge, "spark.executor.memory", 64 * GIB)
    assert problem.startswith(
        "1 file(s) are larger than 2 GiB, the most Spark's binaryFile reader (which "
        "fingerprints files outside the local file system) holds, e.g. "
        "'s3a://<credentials>@b/p/big.csv' (3.0 GiB); write the input as smaller files"
    )
    assert too_large_problem([("x", "x", BINARY_FILE_BYTES)], "s", None) is None
    assert too_large_problem([("x", "x", BINARY_FILE_BYTES + 1)], "s", None) is not None


@pytest.mark.spark
@pytest.mark.parametrize(
    ("size", "expected"),
    [
        # The tests' session runs with spark.driver.memory = 1g.
        (200 * MIB, "1 file(s) are too large to fingerprint with spark.driver.memory = 1g, e.g. "),
        (BINARY_FILE_BYTES + 1, "1 file(s) are larger than 2 GiB, the most Spark's binaryFile "),
    ],
)
def test_a_viewfs_file_too_large_to_fingerprint_is_refused_before_the_reservation(
    spark, tmp_path, size, expected
):
    data = tmp_path / "mounted"
    data.mkdir()
    with open(data / "people.csv", "wb") as handle:
        handle.write(b"pid,year,sex,spend\n")
        handle.truncate(size)  # sparse: nothing is read before the refusal
    cluster = f"dpbig{size}"  # Hadoop caches a viewfs file system by its cluster's name
    mount = f'"spark.hadoop.fs.viewfs.mounttable.{cluster}.link./data" = "file://{data}"'
    text = spec_text(tmp_path, f'path = "viewfs://{cluster}/data"\nformat = "csv"')
    spec = load_spec(write_spec(tmp_path, f"{text}\n[run.spark_conf]\n{mount}\n"))
    with pytest.raises(SpecError) as caught:
        run_release(spec, progress=Progress(quiet=True), spark=spark)
    (problem,) = caught.value.problems
    assert problem.startswith(expected), problem
    assert f"'viewfs://{cluster}/data/people.csv'" in problem  # the file, by its location
    assert "\n" not in problem and "pid" not in problem
    assert str(caught.value).startswith(f"input 'viewfs://{cluster}/data':")
    assert _ledger_rows(tmp_path / "ledger.sqlite") == 0
    assert os.path.getsize(data / "people.csv") == size
