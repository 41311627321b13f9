"""lzk_muzero tests run single-threaded with torch seeded (tiny networks; CPUs shared with other jobs)."""
import pytest


@pytest.fixture(autouse=True)
def _single_thread(one_thread_and_seed: None) -> None:
    """Every test here: see tests/conftest.py."""
