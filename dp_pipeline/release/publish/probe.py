"""The output's file system probed before the reservation: nothing is reserved when the run
could not publish."""

from __future__ import annotations

from dp_pipeline.release.publish.filesystems import (
    OutputLocationError,
    ReleaseFileSystem,
    open_filesystem,
    probe_write,
)
from dp_pipeline.release.spec.model import ReleaseSpec, SpecError
from dp_pipeline.release.uris import is_uri

__all__ = ["check_output"]


def check_output(spec: ReleaseSpec, spark=None) -> ReleaseFileSystem | None:
    """The file system of an output URI, probed by writing and deleting a small file there.

    None for a local output folder (`check_machine` probed it). Called before the
    reservation: raises `SpecError` (one line naming ``output.dir`` and the fix, no
    credential) when the session cannot write the output.
    """
    if not is_uri(spec.output_dir):
        return None
    try:
        filesystem = open_filesystem(spec.output_dir, spark)
        probe_write(filesystem)
    except OutputLocationError as error:
        raise SpecError([str(error)], spec.source) from None
    return filesystem
