"""A data loader's worker channel over shared memory, with no pickle on the data path.

Worker processes run a callback and write each batch into a shared-memory
chunk as ``[sample data | samples meta | CompletedTask]`` (the layout of NVIDIA
DALI's parallel external source); the parent validates every byte with the
Inert codecs (``shm-message``, ``shm-samples-meta``, ``shm-descriptor``) and
hands back read-only numpy views of the samples, without copying them.
Chunks are sealed memfds (a temporary file where the kernel has none), passed
over a Unix socket.  Only the callback itself is pickled, once, when a worker
starts under ``spawn``.

Example::

    import numpy as np
    from inert.shm import ShmWorkerPool

    def load(sample_info):
        return np.full((2, 3), sample_info.idx_in_epoch, dtype=np.float32)

    if __name__ == "__main__":
        with ShmWorkerPool(load, num_workers=2, start_method="spawn") as pool:
            pool.schedule_range(0, 4)
            with pool.receive() as batch:
                print([float(a[0, 0]) for a in batch.samples])  # [0.0, 1.0, 2.0, 3.0]

This module imports numpy; ``import inert`` does not import it.
"""

from __future__ import annotations

try:
    import numpy as _numpy  # noqa: F401 - checked first, so that a missing extra says so
except ImportError as exc:  # pragma: no cover - exercised by the missing-extra test in a subprocess
    from inert._extras import install_hint

    raise ImportError(f"inert.shm needs numpy: {install_hint('numpy')}") from exc

from ._batch import MAX_SAMPLE_DEPTH, SAMPLE_ALIGNMENT
from ._failures import ChannelClosedError, EndOfData, WorkerDiedError, WorkerTaskError
from ._memory import MemoryBackend
from ._pool import Batch, ShmWorkerPool
from ._tasks import BatchInfo, SampleInfo

__all__ = [
    "ShmWorkerPool",
    "Batch",
    "SampleInfo",
    "BatchInfo",
    "MemoryBackend",
    "WorkerTaskError",
    "EndOfData",
    "WorkerDiedError",
    "ChannelClosedError",
    "SAMPLE_ALIGNMENT",
    "MAX_SAMPLE_DEPTH",
]
