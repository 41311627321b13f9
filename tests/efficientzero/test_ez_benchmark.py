"""``benchmarks/efficientzero.py`` keeps its output contract (a smoke run on tiny cases; no timing asserts)."""
from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


def test_json_rows_pair_muzero_and_efficientzero(monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.syspath_prepend(str(BENCH))
    spec = importlib.util.spec_from_file_location("lzk_bench_ez", BENCH / "efficientzero.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    monkeypatch.setattr(bench, "CASES", [(2, 3, 13.0)])
    monkeypatch.setattr(sys, "argv", ["efficientzero.py", "--json", "--repeats", "2", "--warmup", "0", "--ez-torch"])
    bench.main()
    rows = json.loads(capsys.readouterr().out)
    assert [r["algo"] for r in rows] == ["muzero", "efficientzero", "efficientzero_torch"]
    for r in rows:
        assert r["kind"] == "search" and (r["batch"], r["simulations"]) == (2, 3)
        assert r["ms_per_search"] > 0 and 0.0 < r["network_share"] <= 1.0 and r["ratio_to_muzero"] > 0
    assert rows[0]["ratio_to_muzero"] == 1.0
