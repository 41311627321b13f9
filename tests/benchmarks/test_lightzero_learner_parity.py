"""benchmarks/lightzero_learner_parity.py: the parts that do not need LightZero installed (the
batch, the layers whose gradient is 0 but for rounding, the comparison helper). The step against
LightZero's ``_forward_learn`` itself runs in the benchmark (it needs the rival kit's venv)."""
from __future__ import annotations

import numpy as np
import pytest

import lightzero_learner_parity as parity
from lightzero_search_parity import our_policy


def test_batch_targets_follow_the_mask() -> None:
    b = parity.learner_batch(64, seed=2)
    k = parity.K
    assert b.obs.shape == (64, k + 1, 4) and b.actions.shape == (64, k) and b.mask.shape == (64, k + 1)
    padded = b.mask == 0
    assert padded.any() and not padded[:, :k - 2].any()  # rows end 1-3 steps early, never sooner
    assert np.all(b.target_value[padded] == 0) and np.all(b.target_policy[padded] == 0)
    assert np.allclose(b.target_policy[~padded].sum(-1), 1.0)
    assert np.array_equal(b.target_reward, b.mask[:, :k]) and np.all((b.weights >= 0.5) & (b.weights <= 1))


def test_linear_then_norm_finds_every_linear_a_batchnorm_follows() -> None:
    model = our_policy(None, "last", 0.05).model
    pairs = parity.linear_then_norm(model)
    assert pairs["prediction_trunk.1"] == ("prediction_trunk.0.bias", False)
    assert pairs["ssl.projection.1"] == ("ssl.projection.0.bias", True)  # bias-free forward (BatchNormedLinear)
    assert "representation.1" in pairs and len(pairs) == 14
    names = dict(model.named_modules())
    assert all(type(names[norm]).__name__.startswith("GroupedBatchNorm") for norm in pairs)


def test_relative_difference_scales_by_the_reference() -> None:
    assert parity.relative(np.array([1.0, 2.1]), np.array([1.0, 2.0])) == pytest.approx(0.05)
    assert parity.relative(np.zeros(3), np.zeros(3)) == 0.0
