"""``benchmarks/learn_contention.py``: learner steps timed quiet and beside busy processes; the
spinners run while it times and are gone afterwards."""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

import learn_contention


def _children() -> set[int]:
    """PIDs of this process's live children (from /proc)."""
    me, kids = os.getpid(), set()
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                fields = (d / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == me and fields[0] != "Z":
                kids.add(int(d.name))
    return kids


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")
def test_spinners_run_during_the_call_and_are_gone_after() -> None:
    before = _children()
    during = learn_contention.with_busy(2, lambda: _children() - before)
    assert len(during) == 2
    assert not (_children() - before)


def test_rows_and_slowdown_against_the_quiet_figure(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "c.json"
    monkeypatch.setattr(sys, "argv", ["learn_contention.py", "--threads", "1", "--busy", "1", "0",
                                      "--dtypes", "float32", "--warmup", "0", "--repeats", "1", "--out", str(out)])
    learn_contention.main()
    rows = json.loads(out.read_text())["rows"]
    assert [(r["busy_processes"], r["threads"], r["learn_dtype"]) for r in rows] == [(0, 1, "float32"), (1, 1, "float32")]
    assert rows[0]["slowdown"] == 1.0 and rows[1]["slowdown"] > 0 and all(r["median_ms"] > 0 for r in rows)
