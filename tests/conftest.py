"""Fixtures shared by the test packages."""
from __future__ import annotations

from typing import Iterator

import pytest


@pytest.fixture()
def one_thread_and_seed() -> Iterator[None]:
    """One torch thread (tiny matmuls; CPUs shared with other jobs) and torch seeded with 0,
    restored afterwards. Packages of model tests use it for every test (their conftest)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    yield
    torch.set_num_threads(before)
