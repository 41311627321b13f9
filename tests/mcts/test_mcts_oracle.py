"""The batched numba search against the per-node Python reference (tests/mcts/reference.py) on
random trees: identical visit counts, root values and inference counts, with deterministic
tie-breaking, one or two players, with and without ReZero reuse."""
from __future__ import annotations

import numpy as np
import pytest

from lzk_mcts import SearchConfig
from mcts_fakes import FakeModel, random_reuse, random_roots, search
from reference import reference_search


@pytest.mark.parametrize("mode", ["continuous", "discrete", "tiny"])
@pytest.mark.parametrize("reuse", [False, True], ids=["plain", "reuse"])
@pytest.mark.parametrize("two_player", [False, True], ids=["1p", "2p"])
def test_batched_search_matches_reference(two_player: bool, reuse: bool, mode: str) -> None:
    seed = 100 * two_player + 10 * reuse + ["continuous", "discrete", "tiny"].index(mode)
    rng = np.random.default_rng(seed)
    for trial in range(3):
        B, A, S = 5, int(rng.integers(2, 6)), int(rng.integers(8, 40))
        cfg = SearchConfig(num_simulations=S, discount=float(rng.choice([1.0, 0.997, 0.9])))
        logits, legal, to_play = random_roots(rng, B, A, two_player)
        true_action = reuse_value = None
        if reuse:
            true_action, reuse_value = random_reuse(rng, legal, 1e-3 if mode == "tiny" else 1.0)
        model = FakeModel(A, range(B), seed=seed * 7 + trial, mode=mode)
        result = search(model, logits, legal, to_play, cfg, np.random.default_rng(0), add_noise=False,
                        deterministic=True, true_action=true_action, reuse_value=reuse_value)
        ref_calls = 0
        for b in range(B):
            counts, value, calls = reference_search(
                model.reference_model(b), logits[b], legal[b], int(to_play[b]), cfg,
                -1 if true_action is None else int(true_action[b]),
                0.0 if reuse_value is None else float(reuse_value[b]))
            ref_calls += calls
            assert result.visit_counts[b].tolist() == counts, f"trial {trial} row {b}"
            np.testing.assert_allclose(result.root_value[b], value, rtol=1e-5, atol=1e-7,
                                       err_msg=f"trial {trial} row {b}")
        assert model.inferences == ref_calls
        assert result.stats["search/inferences_per_sim"] == pytest.approx(ref_calls / S)
