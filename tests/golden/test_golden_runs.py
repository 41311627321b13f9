"""The golden runs (see ``golden_runs.py``): each CartPole config's short seeded run gives the
recorded metrics and final parameters, to the last bit on a machine of the recorded kind."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
import golden_runs  # noqa: E402

RECORD = json.loads(golden_runs.RECORD.read_text())
#: Fields that are integers by nature: equal on any machine until trajectories diverge, which
#: in these runs happens only after the first learner updates.
_INTEGRAL = ("event", "train_iter", "env_steps")


@pytest.fixture(scope="module")
def warm(tmp_path_factory: pytest.TempPathFactory) -> None:
    """numba kernels compiled into the cache before any compared run (see golden_runs)."""
    golden_runs.warm_caches(tmp_path_factory.mktemp("golden_warm"))


@pytest.mark.parametrize("stem", sorted(golden_runs.RUNS))
def test_golden_run_reproduces_the_record(stem: str, tmp_path: Path, warm: None) -> None:
    expected = RECORD["runs"][stem]
    got = golden_runs.run_one(stem, tmp_path / "run")
    same_machine = golden_runs.fingerprint() == RECORD["fingerprint"]
    if not same_machine:
        # Another CPU or library version rounds differently: compare the event sequence up to the
        # first training event (collection with the initial weights and the first evaluation).
        first_train = next(i for i, e in enumerate(expected["events"]) if e["event"] == "train")
        head = [{k: e[k] for k in _INTEGRAL} for e in expected["events"][:first_train]]
        assert [{k: e[k] for k in _INTEGRAL} for e in got["events"][:first_train]] == head
        pytest.skip(f"bit-for-bit comparison needs the recorded machine {RECORD['fingerprint']}, "
                    f"this is {golden_runs.fingerprint()}; compared the pre-training events only")
    assert len(got["events"]) == len(expected["events"])
    for i, (g, e) in enumerate(zip(got["events"], expected["events"])):
        # Every recorded field, to the bit; a metric added since the record was written (a new
        # diagnostic) is not in it, and does not change the numbers the record pins.
        g = {k: v for k, v in g.items() if k in e}
        assert g == e, f"{stem}: event {i} differs: " + ", ".join(
            f"{k}: {g.get(k)!r} != {e.get(k)!r}" for k in sorted(set(g) | set(e)) if g.get(k) != e.get(k))
    assert got["params"] == expected["params"]
