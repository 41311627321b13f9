"""``benchmarks/_results.write_results``: an explicit path is written as given; the default path
never replaces a committed result (the docs cite those files as evidence)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

import _results


def test_the_default_path_never_replaces_an_existing_result(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_results, "RESULTS", tmp_path)
    first = _results.write_results({"run": 1}, "bench.json")
    assert first == tmp_path / "bench.json"
    second = _results.write_results({"run": 2}, "bench.json")
    assert second != first and second.name.startswith("bench_") and second.suffix == ".json"
    assert json.loads(first.read_text()) == {"run": 1} and json.loads(second.read_text()) == {"run": 2}
    # an explicit path is the caller's choice: written over
    again = _results.write_results({"run": 3}, "bench.json", str(first))
    assert again == first and json.loads(first.read_text()) == {"run": 3}
