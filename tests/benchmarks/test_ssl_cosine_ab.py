"""benchmarks/ssl_cosine_ab.py: alternating learner steps with and without the fused SSL cosine."""
from __future__ import annotations

import re
import sys

import pytest

import ssl_cosine_ab
from lzk_common import numba_rows


def test_pairs_alternate_and_the_fused_check_is_restored(monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    seen: list[bool] = []
    original = numba_rows.supported

    def recording(*tensors):  # type: ignore[no-untyped-def]
        seen.append(True)
        return original(*tensors)

    monkeypatch.setattr(numba_rows, "supported", recording)
    monkeypatch.setattr(sys, "argv", ["ssl_cosine_ab.py", "--dtype", "bfloat16", "--pairs", "2", "--threads", "1"])
    ssl_cosine_ab.main()
    out = capsys.readouterr().out
    assert re.search(r"bfloat16, 1 threads, 2 pairs: step median fused [\d.]+ ms, torch [\d.]+ ms; "
                     r"fused − torch per pair: median [+-][\d.]+ ms", out), out
    # The fused side consulted the kernels' check (6 warm-up + 2 timed steps); the torch side did not.
    assert len(seen) == 8
    assert numba_rows.supported is recording
