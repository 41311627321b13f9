"""``benchmarks/mcts.py`` keeps its output contract (a smoke run on tiny cases; no timing asserts)."""
from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "mcts.py"


def test_json_output_contract(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.syspath_prepend(str(SCRIPT.parent))  # its sibling modules (gemm_peak)
    spec = importlib.util.spec_from_file_location("lzk_bench_mcts", SCRIPT)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    assert [(b, s) for b, s, _ in bench.CASES] == [(8, 25), (8, 50), (64, 50)]
    monkeypatch.setattr(bench, "CASES", [(2, 3, 13.0), (3, 2, 26.0)])
    monkeypatch.setattr(sys, "argv", ["mcts.py", "--json", "--repeats", "2", "--warmup", "0"])
    bench.main()
    rows = json.loads(capsys.readouterr().out)
    assert [(r["batch"], r["simulations"]) for r in rows] == [(2, 3), (3, 2)]
    for r in rows:
        assert {"batch", "simulations", "ms_per_search", "network_share", "lightzero_ms", "goal_ms"} <= set(r)
        assert r["ms_per_search"] > 0 and 0.0 < r["network_share"] <= 1.0
        assert r["goal_ms"] == r["lightzero_ms"] / 2


def test_learn_rows_report_the_share_of_the_machine_peak(monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.syspath_prepend(str(SCRIPT.parent))
    spec = importlib.util.spec_from_file_location("lzk_bench_mcts_learn", SCRIPT)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    monkeypatch.setattr(bench, "CASES", [(2, 3, 13.0)])
    monkeypatch.setattr(sys, "argv", ["mcts.py", "--json", "--repeats", "2", "--warmup", "0", "--learn",
                                      "--learn-threads", "1", "--learn-dtypes", "float32"])
    bench.main()
    (learn,) = [r for r in json.loads(capsys.readouterr().out) if "learn_dtype" in r]
    assert learn["learn_dtype"] == "float32" and learn["goal_share"] == 0.85
    assert learn["gmac_per_step"] > 10  # batch 256, K = 5: ~16 GMAC of matmuls
    # The rates are the step's matmul work over the measured times (exact up to rounding).
    assert learn["gmac_per_s"] == pytest.approx(learn["gmac_per_step"] / learn["ms_per_step"] * 1e3, rel=0.02)
    assert learn["peak_gmac_per_s"] == pytest.approx(learn["gmac_per_step"] / learn["gemm_ms"] * 1e3, rel=0.02)
    # A step's matmuls alone take less time than the step on a quiet machine (84% on the dev
    # machine). With two rounds on a 2-core CI host the interleaved median is itself noisy: one
    # CI run measured 1.015, the replayed matmuls caught by a burst of load. So the test bounds
    # the share where a broken measurement (a wrong MAC count, a unit slip) would land outside.
    assert 0 < learn["share_of_peak"] < 1.5 and learn["interleaved_gemm_ms"] < 1.5 * learn["interleaved_step_ms"]
    assert 0 < learn["share_min"] <= learn["share_of_peak"] <= learn["share_max"] < 1.5
    assert 0 < learn["share_apart"] < 1.5 and learn["gemm_ms"] < 1.5 * learn["ms_per_step"]
