"""lzk_efficientzero tests: one torch thread (tiny matmuls, shared CPUs) and a fixed torch seed;
the MuZero test helpers and the per-node search reference are importable from here."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(TESTS / "muzero"), str(TESTS / "mcts")]


@pytest.fixture(autouse=True)
def _single_thread(one_thread_and_seed: None) -> None:
    """Every test here: see tests/conftest.py."""
