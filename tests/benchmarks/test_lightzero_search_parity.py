"""benchmarks/lightzero_search_parity.py: the parts that do not need LightZero installed (the
roots, our side's network, the comparison). The comparison against LightZero's C++ tree itself
runs in the benchmark (it needs the rival kit's venv)."""
from __future__ import annotations

import numpy as np
import pytest

import lightzero_search_parity as parity


def test_roots_are_reachable_cartpole_states() -> None:
    obs = parity.cartpole_roots(40, seed=3)
    assert obs.shape == (40, 4) and obs.dtype == np.float32
    assert np.all(np.abs(obs[:, 2]) < 0.21)  # pole angle inside CartPole-v0's termination bound
    assert np.array_equal(obs, parity.cartpole_roots(40, seed=3))
    assert len(np.unique(obs, axis=0)) == 40


def test_our_side_builds_lightzero_s_network_with_perturbed_weights() -> None:
    policy = parity.our_policy(None, "last", 0.05)
    assert type(policy.model.representation[-1]).__name__ == "SimNorm"
    # 108 tensors in LightZero's order (its MuZeroModelMLP with SSL heads): what the LightZero
    # side checks shape by shape.
    state = policy.model.state_dict()
    assert len(state) == 108
    head = state["value_head.3.weight"]
    assert head.abs().max() > 0  # the zero-initialised head was perturbed


def test_compare_counts_equal_roots_and_value_gaps() -> None:
    sims = [25]
    ours = {"root_policy_logits": np.zeros((3, 2)), "root_value_logits": np.zeros((3, 5)),
            "visits_25": np.array([[12.0, 13.0], [25.0, 0.0], [7.0, 18.0]]), "values_25": np.array([1.0, 2.0, 3.0])}
    theirs = {"root_policy_logits": np.zeros((3, 2)), "root_value_logits": np.full((3, 5), 0.5),
              "visits_25": np.array([[12.0, 13.0], [24.0, 1.0], [7.0, 18.0]]), "values_25": np.array([1.0, 2.0, 1.0])}
    out = parity.compare(ours, theirs, sims)
    assert out["root_logits_max_abs_diff"] == 0.5
    (s,) = out["searches"]
    assert (s["visits_equal"], s["roots"], s["max_visit_diff"]) == (2, 3, 1.0)
    assert s["root_value_max_rel_diff"] == pytest.approx(2.0 / 2.0)
    assert s["root_value_median_rel_diff"] == 0.0
