"""Fixtures of the worker tests (the fakes live in worker_fakes.py)."""
from __future__ import annotations

import pytest
from worker_fakes import FakeEnvSpec


@pytest.fixture
def spec() -> FakeEnvSpec:
    return FakeEnvSpec()

