"""benchmarks/fused_rows_ab.py: alternating learner steps with and without the fused row kernels."""
from __future__ import annotations

import re
import sys

import pytest

import fused_rows_ab
from lzk_common import numba_rows


@pytest.mark.parametrize("kernels", ["all", "ce"])
def test_pairs_alternate_and_the_fused_checks_are_restored(monkeypatch: pytest.MonkeyPatch,
                                                           capsys: pytest.CaptureFixture[str], kernels: str) -> None:
    seen: dict[str, list[tuple[int, ...]]] = {"supported": [], "ce_supported": []}
    originals = {name: getattr(numba_rows, name) for name in seen}

    def recording(name: str):  # type: ignore[no-untyped-def]
        def check(*tensors):  # type: ignore[no-untyped-def]
            seen[name].append(tuple(tensors[0].shape))
            return originals[name](*tensors)
        return check

    wrappers = {name: recording(name) for name in seen}
    for name, wrapper in wrappers.items():
        monkeypatch.setattr(numba_rows, name, wrapper)
    monkeypatch.setattr(sys, "argv", ["fused_rows_ab.py", "--dtype", "bfloat16", "--kernels", kernels,
                                      "--pairs", "2", "--threads", "1"])
    fused_rows_ab.main()
    out = capsys.readouterr().out
    assert re.search(rf"bfloat16, kernels {kernels}, 1 threads, 2 pairs: step median fused [\d.]+ ms, torch [\d.]+ ms; "
                     r"fused − torch per pair: median [+-][\d.]+ ms", out), out
    # 6 warm-up + 2 timed steps per side. The fused side consults the cross-entropy check for the
    # value and reward supports ([1536, 601], [1280, 601]; the 2-wide policy rows never reach it);
    # the torch side does not, and consults the cosine check only where it stays fused.
    steps = 8
    assert seen["ce_supported"].count((1536, 601)) == steps and seen["ce_supported"].count((1280, 601)) == steps
    assert len(seen["supported"]) == (steps if kernels == "all" else 2 * steps)
    for name, wrapper in wrappers.items():
        assert getattr(numba_rows, name) is wrapper
