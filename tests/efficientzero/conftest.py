"""lzk_efficientzero tests: one torch thread (tiny matmuls, shared CPUs) and a fixed torch seed;
the MuZero test helpers and the per-node search reference are importable from here."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

TESTS = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(TESTS / "muzero"), str(TESTS / "mcts")]


@pytest.fixture(autouse=True)
def _single_thread_seeded():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    yield
    torch.set_num_threads(threads)
