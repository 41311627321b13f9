"""Entry point of lzk_common. The shared library of search-based policies registers no
components, but is listed by ``lzkernel plugins`` with its version like every plugin. Its one
hook says when numba compiles kernels in a run (:func:`lzk_common.numba_cache.announce_compiles`):
otherwise the first run after an install sits at "starting" for 10-20 s without a word."""
from __future__ import annotations

from typing import Any

from lzkernel import hookimpl


@hookimpl
def lzkernel_run_start(run: Any) -> None:
    if run.is_main:
        from lzk_common.numba_cache import announce_compiles  # numba only once a run starts

        announce_compiles()
