"""``run.retain_freed_memory``: glibc malloc keeps freed memory in the process, so a loop that
frees and re-allocates large buffers (a learner step's activations) stops page-faulting them in."""
from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from lzkernel.config.run_config import RunConfig
from lzkernel.memory import MMAP_THRESHOLD_BYTES, TRIM_THRESHOLD_BYTES, retain_freed_memory


class _FakeLibc:
    def __init__(self, answer: int) -> None:
        self.calls: list[tuple[int, int]] = []
        self.answer = answer

        def mallopt(param: int, value: int) -> int:
            self.calls.append((param, value))
            return self.answer

        self.mallopt = mallopt


def test_sets_the_mmap_threshold_then_the_trim_threshold() -> None:
    libc = _FakeLibc(1)
    assert retain_freed_memory(libc) is True  # type: ignore[arg-type]
    assert libc.calls == [(-3, MMAP_THRESHOLD_BYTES), (-1, TRIM_THRESHOLD_BYTES)]  # M_MMAP_, M_TRIM_THRESHOLD


def test_reports_false_where_the_c_library_refuses_or_lacks_mallopt() -> None:
    refusing = _FakeLibc(0)  # musl's stub mallopt returns 0
    assert retain_freed_memory(refusing) is False  # type: ignore[arg-type]
    assert retain_freed_memory(object()) is False  # type: ignore[arg-type]


def test_on_by_default() -> None:
    assert RunConfig().retain_freed_memory is True


_CHURN = textwrap.dedent("""
    import resource, sys
    import numpy as np
    from lzkernel.memory import retain_freed_memory
    if sys.argv[1] == "retain":
        assert retain_freed_memory()
    def faults():
        return resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for step in range(21):
        if step == 1:
            start = faults()  # after the first step: its pages are new either way
        bufs = [np.ones(2_000_000, np.float32) for _ in range(3)]  # 3 x 8 MB, then all freed
        del bufs
    print(faults() - start)
""")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc malloc")
def test_freed_buffers_are_not_faulted_in_again() -> None:
    """20 steps that each allocate and free 24 MB: with the default thresholds glibc returns the
    memory on many of the steps and the next one faults thousands of pages back in; retained, none."""
    faults = {}
    for mode in ("default", "retain"):
        out = subprocess.run([sys.executable, "-c", _CHURN, mode], capture_output=True, text=True, check=True)
        faults[mode] = int(out.stdout.strip())
    assert faults["default"] > 5_000, faults  # 16,000-27,000 measured: glibc trims some of the steps
    assert faults["retain"] < faults["default"] / 10, faults
