"""The outcome buffer (AlphaZero): value targets are each mover's game outcome, positions are
single (K = 0), capacity is FIFO, state round-trips."""
from __future__ import annotations

import numpy as np
import pytest

from lzk_replay.outcome_buffer import OutcomeBuffer, outcome_targets
from lzkernel import Trajectory

A = 9


def _game(rewards: list[float], to_play: list[int], ended: bool = True, start: float = 0.0) -> Trajectory:
    T = len(rewards)
    obs = (start + np.arange(T + 1, dtype=np.float32))[:, None].repeat(2, 1)  # obs[t] = [t, t] (+ start)
    visits = np.eye(A, dtype=np.float32)[np.arange(T) % A]
    return Trajectory(obs=obs, actions=np.arange(T) % A, rewards=np.asarray(rewards, np.float32), visit_dist=visits,
                      root_values=np.zeros(T, np.float32), pred_values=np.zeros(T, np.float32),
                      legal=np.ones((T + 1, A), bool), to_play=np.asarray(to_play, np.int64),
                      timestep=np.arange(T + 1), ended=ended, terminal=ended)


def test_self_play_targets_have_each_movers_sign() -> None:
    """Players alternate 1, 2, 1, 2, 1; player 1 wins with the last move: +1 at player 1's
    positions, −1 at player 2's."""
    win = _game([0, 0, 0, 0, 1], [1, 2, 1, 2, 1, 2])
    np.testing.assert_array_equal(outcome_targets(win, 1.0), [1, -1, 1, -1, 1])
    draw = _game([0] * 9, [1, 2] * 5)
    np.testing.assert_array_equal(outcome_targets(draw, 1.0), np.zeros(9))
    # Player 2 wins with its 3rd move (the 6th of the game).
    loss = _game([0, 0, 0, 0, 0, 1], [1, 2, 1, 2, 1, 2, 1])
    np.testing.assert_array_equal(outcome_targets(loss, 1.0), [-1, 1, -1, 1, -1, 1])


def test_targets_when_a_player_moves_twice_and_with_discount() -> None:
    """Player 1 moves twice in a row (to_play 1, 1, 2, 1) and wins at the end; γ = 0.5 discounts by
    the moves still to come."""
    g = _game([0, 0, 0, 1], [1, 1, 2, 1, 2])
    np.testing.assert_array_equal(outcome_targets(g, 1.0), [1, 1, -1, 1])
    np.testing.assert_allclose(outcome_targets(g, 0.5), [0.125, 0.25, -0.5, 1.0])


def test_agent_view_trajectories_keep_their_rewards() -> None:
    """A bot-mode trajectory (every step the agent's) sums the agent's rewards."""
    g = _game([0.0, -1.0], [2, 2, 2])  # the bot won with its reply to the agent's second move
    np.testing.assert_array_equal(outcome_targets(g, 1.0), [-1, -1])


def test_root_value_weight_mixes_outcome_and_search_value() -> None:
    """w = 0.25: target = 0.75·z + 0.25·q per position, each in its mover's view; w = 0 keeps z."""
    win = _game([0, 0, 0, 0, 1], [1, 2, 1, 2, 1, 2])
    win.root_values = np.asarray([0.2, -0.4, 0.6, -0.8, 1.0], np.float32)
    z = outcome_targets(win, 1.0)
    mixed = OutcomeBuffer(capacity=10, obs_shape=(2,), num_actions=A, root_value_weight=0.25)
    plain = OutcomeBuffer(capacity=10, obs_shape=(2,), num_actions=A)
    mixed.push([win]), plain.push([win])
    np.testing.assert_allclose(mixed.value[:5], 0.75 * z + 0.25 * win.root_values, rtol=1e-6)
    np.testing.assert_array_equal(plain.value[:5], z)
    with pytest.raises(ValueError, match="root_value_weight"):
        OutcomeBuffer(capacity=10, obs_shape=(2,), num_actions=A, root_value_weight=1.5)


def test_sample_is_a_k0_batch_of_stored_positions() -> None:
    buf = OutcomeBuffer(capacity=100, obs_shape=(2,), num_actions=A)
    buf.push([_game([0, 0, 0, 0, 1], [1, 2, 1, 2, 1, 2]), _game([0] * 3, [1, 2, 1, 2], start=100)])
    assert buf.num_transitions == 8
    b = buf.sample(8, np.random.default_rng(0))
    assert b.obs.shape == (8, 1, 2) and b.actions.shape == (8, 0) and b.target_policy.shape == (8, 1, A)
    assert sorted(b.indices.tolist()) == list(range(8))  # without replacement: each position once
    for i in range(8):
        t = int(b.obs[i, 0, 0]) % 100
        expected = 0.0 if b.obs[i, 0, 0] >= 100 else (1.0 if t % 2 == 0 else -1.0)
        assert b.target_value[i, 0] == expected and b.to_play[i, 0] == (1 if t % 2 == 0 else 2)
        assert b.target_policy[i, 0, t % A] == 1.0


def test_capacity_is_fifo_and_unfinished_games_are_refused() -> None:
    buf = OutcomeBuffer(capacity=5, obs_shape=(2,), num_actions=A)
    buf.push([_game([0] * 4, [1, 2] * 2 + [1])])  # positions 0..3
    buf.push([_game([0] * 3, [1, 2, 1, 2], start=100)])  # positions 4..6: 0 and 1 dropped
    assert buf.num_transitions == 5 and sorted(buf.ids.tolist()) == [2, 3, 4, 5, 6]
    assert sorted(buf.obs[:, 0].tolist()) == [2, 3, 100, 101, 102]
    with pytest.raises(ValueError, match="whole episodes"):
        buf.push([_game([0, 0], [1, 2, 1], ended=False)])
    assert buf.update_priorities(np.array([3]), np.array([0.5])) == 0  # uniform replay


def test_state_round_trip_keeps_the_newest_positions() -> None:
    buf = OutcomeBuffer(capacity=6, obs_shape=(2,), num_actions=A)
    for k in range(4):
        buf.push([_game([0, 1], [1, 2, 1], start=10 * k)])
    meta, arrays = buf.state_dict()
    assert arrays["obs"].shape == (6, 2)  # proportional to what is stored
    other = OutcomeBuffer(capacity=6, obs_shape=(2,), num_actions=A)
    other.load_state_dict(meta, arrays)
    b1, b2 = buf.sample(6, np.random.default_rng(3)), other.sample(6, np.random.default_rng(3))
    for name in ("obs", "target_value", "target_policy", "indices", "to_play"):
        np.testing.assert_array_equal(getattr(b1, name), getattr(b2, name))
    small = OutcomeBuffer(capacity=3, obs_shape=(2,), num_actions=A)
    small.load_state_dict(meta, arrays)
    assert small.num_transitions == 3 and sorted(small.ids.tolist()) == [5, 6, 7]


def test_a_game_longer_than_the_capacity_keeps_its_newest_positions_in_fifo_order() -> None:
    """A 6-move game into a 4-slot buffer keeps its moves 2–5 (ids 2–5); the next game's single
    position then replaces the oldest stored one (id 2), not a newer one."""
    buf = OutcomeBuffer(capacity=4, obs_shape=(2,), num_actions=A)
    buf.push([_game([0] * 6, [1, 2] * 3 + [1])])
    assert sorted(buf.ids.tolist()) == [2, 3, 4, 5]
    np.testing.assert_array_equal(buf.obs[buf.ids % 4, 0], buf.ids)  # obs[t] = t: id = move index
    buf.push([_game([1], [1, 2], start=100.0)])
    assert sorted(buf.ids.tolist()) == [3, 4, 5, 6]
    assert buf.obs[6 % 4, 0] == 100.0 and buf.obs[buf.ids % 4][:, 0].tolist().count(100.0) == 1


def test_a_state_from_a_smaller_buffer_counts_only_what_it_holds() -> None:
    """Resuming into a larger capacity: 3 positions restored into 6 slots count as 3 (not
    min(next_id, capacity) = 6, which would pass the trainer's readiness check with half the
    data and make a 6-batch sample draw duplicates), and the saved state holds no empty slots."""
    small = OutcomeBuffer(capacity=3, obs_shape=(2,), num_actions=A)
    for k in range(4):
        small.push([_game([0, 1], [1, 2, 1], start=10 * k)])
    big = OutcomeBuffer(capacity=6, obs_shape=(2,), num_actions=A)
    big.load_state_dict(*small.state_dict())
    assert big.num_transitions == len(big) == 3
    meta, arrays = big.state_dict()
    assert sorted(arrays["ids"].tolist()) == [5, 6, 7]
    big.push([_game([0, 1], [1, 2, 1], start=100)])
    assert big.num_transitions == 5 and sorted(big.ids[big.ids >= 0].tolist()) == [5, 6, 7, 8, 9]
    big.push([_game([0, 1], [1, 2, 1], start=200)])
    assert big.num_transitions == 6 and sorted(big.ids.tolist()) == [6, 7, 8, 9, 10, 11]
