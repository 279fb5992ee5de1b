"""``import fbgemm_gpu`` without its version-table warning.

At import, fbgemm_gpu logs a warning to the root logger whenever its torch compatibility table has no
entry for the installed pair (FBGEMM 1.6.0 under torch 2.11, say), once in every process: a gate's
worker processes printed it dozens of times. Whether the ops work is decided by each caller's own
probe (a failed one makes the oracle or SUT "not available"), never by that table. Its own named
loggers (``fbgemm_gpu.*``: the benchmark reporter, the file store) are lowered to errors here too.
"""

from __future__ import annotations

import logging
from types import ModuleType

_TABLE = "_fbgemm_torch_compat_table"


class _DropTableWarning(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return _TABLE not in record.getMessage()


def import_fbgemm() -> ModuleType:
    """The fbgemm_gpu module (importing it registers ``torch.ops.fbgemm``); raises what the import raises."""
    logging.getLogger("fbgemm_gpu").setLevel(logging.ERROR)
    root, drop = logging.getLogger(), _DropTableWarning()
    root.addFilter(drop)
    try:
        import fbgemm_gpu
    finally:
        root.removeFilter(drop)
    return fbgemm_gpu
