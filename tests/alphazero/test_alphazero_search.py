"""The AlphaZero policy's search with the real game (OpenSpiel through the simulator protocol):
winning and saving moves on hand-made positions, the visit contract, legality, terminal nodes,
independent batch rows, and root noise that differs between moves yet replays from the seed."""
from __future__ import annotations

import numpy as np
import pytest

from lzk_alphazero.config import AlphaZeroPolicyConfig
from lzk_alphazero.policy import AlphaZeroPolicy
from lzk_envs.openspiel import OpenSpielEnvSpec


def _policy(game: str, sims: int, seed: int = 0) -> tuple[AlphaZeroPolicy, OpenSpielEnvSpec]:
    spec = OpenSpielEnvSpec.load(game)
    cfg = AlphaZeroPolicyConfig(num_simulations=sims, eval_num_simulations=sims)
    return AlphaZeroPolicy(cfg, spec, seed=seed), spec  # untrained: uniform priors, value 0


def _state(spec: OpenSpielEnvSpec, moves: list[int]):
    sim = spec.make_simulator()
    state = sim.new_state()
    for a in moves:
        sim.step([state], np.array([a]))
    return state


#: (game, moves so far, the moves that win or save the game for the side to move)
POSITIONS = [
    ("tic_tac_toe", [0, 3, 1, 4], {2}),  # x wins at once (o threatens 5)
    ("tic_tac_toe", [0, 4, 8, 6], {2}),  # o threatens 6-4-2: x must block
    ("tic_tac_toe", [0, 1, 2, 6], {8}),  # x's only fork: 8 threatens 4 and 5
    ("connect_four", [3, 0, 3, 0, 3, 1], {3}),  # x has three in column 3: win on top
    ("connect_four", [0, 3, 1, 3, 6, 3], {3}),  # o has three in column 3: block on top
    ("connect_four", [3, 0, 2, 0], {4}),  # x on 2, 3 of the bottom row, o on column 0: 4 opens a three at both ends
]


@pytest.mark.parametrize(("game", "moves", "good"), POSITIONS)
def test_the_search_finds_the_winning_or_saving_move(game: str, moves: list[int], good: set[int]) -> None:
    policy, spec = _policy(game, 400)
    state = _state(spec, moves)
    view = spec.make_simulator().observe([state])
    res = policy.act(view.obs, view.legal, view.to_play, mode="eval", env_ids=np.zeros(1, np.int64), states=[state])
    assert int(res.action[0]) in good, (res.action, np.round(res.visit_dist[0], 2))


@pytest.mark.parametrize("moves", [[0, 3, 1, 4], [0, 3, 1, 4, 8]])  # x, then o, to move with a win in one
def test_root_value_is_the_movers_view(moves: list[int]) -> None:
    """The recorded root value (a value target with ``buffer.root_value_weight``) is the side to
    move's: a position it wins in one move is worth nearly +1 to it, whichever player it is."""
    policy, spec = _policy("tic_tac_toe", 200)
    state = _state(spec, moves)
    view = spec.make_simulator().observe([state])
    res = policy.act(view.obs, view.legal, view.to_play, mode="eval", env_ids=np.zeros(1, np.int64), states=[state])
    assert float(res.root_value[0]) > 0.8, res.root_value


def test_visits_legality_and_terminal_nodes() -> None:
    """A batch of positions: visits sum to S over legal moves only; winning moves lead to
    terminal nodes (never expanded, so revisits cost no network call)."""
    policy, spec = _policy("tic_tac_toe", 200)
    states = [_state(spec, m) for m, _ in [([0, 3, 1, 4], 0), ([4], 0), ([], 0)]]
    view = spec.make_simulator().observe(states)
    calls = []
    evaluate = policy.evaluate
    policy.evaluate = lambda obs, *a: calls.append(len(obs)) or evaluate(obs, *a)  # type: ignore[method-assign]
    res, _, metrics = policy.search(view.obs, view.legal, view.to_play, states, 200, add_noise=True,
                                    deterministic=False)
    counts = res.visit_counts
    assert (counts.sum(axis=1) == 200).all() and (counts[~view.legal] == 0).all()
    # Root inference + one call per simulation at most; the won position needs fewer trees.
    assert len(calls) <= 201 and max(calls[1:]) <= 3
    assert sum(calls[1:]) < 3 * 200  # terminal revisits of the won position skip the network
    assert 0.0 < metrics["search/network_share"] < 1.0 and metrics["search/simulator_share"] > 0.0
    # the shared search's timings, under the names every search-based policy logs (docs/metrics.md)
    assert 0.0 < metrics["search/tree_ms"] + metrics["search/model_ms"] <= metrics["search/ms"]
    assert metrics["search/model_ms"] > 0.0 and 0.0 < metrics["search/inferences_per_sim"] <= 3.0


def test_batch_rows_are_independent() -> None:
    policy, spec = _policy("connect_four", 50)
    states = [_state(spec, m) for m in ([3, 0, 3, 0, 3, 1], [], [0, 6])]
    view = spec.make_simulator().observe(states)
    together = policy.act(view.obs, view.legal, view.to_play, mode="eval", env_ids=np.arange(3), states=states)
    for i in range(3):
        alone = policy.act(view.obs[i:i + 1], view.legal[i:i + 1], view.to_play[i:i + 1], mode="eval",
                           env_ids=np.arange(1), states=states[i:i + 1])
        np.testing.assert_array_equal(alone.visit_dist[0], together.visit_dist[i])


def test_root_noise_differs_between_moves_and_replays_from_the_seed() -> None:
    """Collect-mode searches of one position: a new Dirichlet draw every move (LightZero's C++
    tree reuses one); the same seed replays the same sequence of searches."""
    def visits(seed: int) -> list[np.ndarray]:
        policy, spec = _policy("tic_tac_toe", 30, seed=seed)
        state = _state(spec, [])
        view = spec.make_simulator().observe([state])
        return [policy.act(view.obs, view.legal, view.to_play, mode="collect", env_ids=np.zeros(1, np.int64),
                           timestep=np.zeros(1, np.int64), states=[state]).visit_dist[0] for _ in range(4)]

    a, b = visits(0), visits(0)
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)
    assert any(not np.array_equal(a[0], x) for x in a[1:])


def test_states_are_required_and_never_modified() -> None:
    policy, spec = _policy("tic_tac_toe", 20)
    state = _state(spec, [0, 4])
    before = str(state)
    view = spec.make_simulator().observe([state])
    with pytest.raises(ValueError, match="simulator states"):
        policy.act(view.obs, view.legal, view.to_play, mode="eval", env_ids=np.zeros(1, np.int64))
    policy.act(view.obs, view.legal, view.to_play, mode="eval", env_ids=np.zeros(1, np.int64), states=[state])
    assert str(state) == before


def test_eval_is_greedy_and_collect_samples_only_the_first_moves() -> None:
    spec = OpenSpielEnvSpec.load("tic_tac_toe")
    policy = AlphaZeroPolicy(AlphaZeroPolicyConfig(num_simulations=20, sample_moves=2), spec, seed=0)
    state = _state(spec, [])
    view = spec.make_simulator().observe([state])
    late = [policy.act(view.obs, view.legal, view.to_play, mode="collect", env_ids=np.zeros(1, np.int64),
                       timestep=np.array([5]), states=[state]) for _ in range(8)]
    for res in late:  # past sample_moves: the most visited move
        assert res.action[0] == int(np.argmax(res.visit_dist[0]))
    early = {int(policy.act(view.obs, view.legal, view.to_play, mode="collect", env_ids=np.zeros(1, np.int64),
                            timestep=np.array([0]), states=[state]).action[0]) for _ in range(20)}
    assert len(early) > 1  # sampled in proportion to the visits


def test_the_search_network_is_the_model_with_batchnorm_folded() -> None:
    """``evaluate`` (the search's network) equals the model in eval mode to float rounding, with
    no BatchNorm left, after BN statistics and weights moved away from their initial values."""
    import torch

    policy, spec = _policy("connect_four", 4)
    with torch.no_grad():
        for m in policy.model.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.running_mean.uniform_(-0.5, 0.5), m.running_var.uniform_(0.5, 2.0)
                m.weight.uniform_(0.5, 1.5), m.bias.uniform_(-0.2, 0.2)
        for p in policy.model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    policy.mark_weights_changed()
    obs = spec.make_simulator().observe([_state(spec, m) for m in ([], [3, 3, 2], [0, 1, 2, 3, 4])]).obs
    logits, value = policy.evaluate(obs)
    policy.model.eval()
    with torch.no_grad():
        ref_logits, ref_value = policy.model(torch.as_tensor(obs, dtype=torch.float32))
    np.testing.assert_allclose(logits, ref_logits.numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(value, ref_value.numpy(), rtol=1e-4, atol=1e-5)
    net = policy._nets.get("online")
    assert not any(isinstance(m, torch.nn.BatchNorm2d) for m in net.modules())


def test_the_search_counts_a_nodes_own_visits(monkeypatch: pytest.MonkeyPatch) -> None:
    """AlphaZero's pUCT takes N = the node's own visit count below the root (SPEC §5.2), so the
    priors steer the first descent below a new node; MuZero's default counts the children only."""
    import lzk_mcts

    seen = []
    real = lzk_mcts.search

    def spy(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        seen.append(args[4])
        return real(*args, **kwargs)

    monkeypatch.setattr(lzk_mcts, "search", spy)
    policy, spec = _policy("tic_tac_toe", 10)
    state = _state(spec, [])
    view = spec.make_simulator().observe([state])
    policy.act(view.obs, view.legal, view.to_play, mode="collect", env_ids=np.zeros(1, np.int64), states=[state])
    assert [c.parent_visits for c in seen] == ["node"]
    assert lzk_mcts.SearchConfig().parent_visits == "children"
