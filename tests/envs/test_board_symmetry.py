"""Board symmetries are real: playing the transformed moves from the start reaches a position
whose observation is the transformed observation (and whose legal moves are the transformed ones)."""
from __future__ import annotations

import numpy as np
import pytest

from lzk_envs.openspiel import OpenSpielEnvSpec
from lzkernel import SymmetricEnvSpec


def _inverse(perm: np.ndarray) -> np.ndarray:
    inv = np.empty_like(perm)
    inv[perm] = np.arange(len(perm))
    return inv


@pytest.mark.parametrize(("game", "params", "count"), [("tic_tac_toe", {}, 8), ("connect_four", {}, 2),
                                                        ("go", {"board_size": 5}, 8), ("breakthrough", {}, 1)])
def test_transformed_moves_reach_the_transformed_position(game: str, params: dict, count: int) -> None:
    spec = OpenSpielEnvSpec.load(game, params)
    assert isinstance(spec, SymmetricEnvSpec)
    syms = spec.symmetries()
    assert len(syms) == count
    np.testing.assert_array_equal(syms[0].obs_index, np.arange(len(syms[0].obs_index)))  # identity first
    sim = spec.make_simulator()
    rng = np.random.default_rng(0)
    for game_no in range(6):
        state = sim.new_state()
        moves = []
        for _ in range(int(rng.integers(1, 12))):
            view = sim.observe([state])
            if view.terminal[0]:
                break
            a = int(rng.choice(np.flatnonzero(view.legal[0])))
            moves.append(a)
            sim.step([state], np.array([a]))
        view = sim.observe([state])
        for sym in syms:
            sigma = _inverse(sym.action_index)  # move a here is move sigma[a] in the transformed game
            other = sim.new_state()
            for a in moves:
                sim.step([other], np.array([sigma[a]]))
            o_view = sim.observe([other])
            np.testing.assert_array_equal(o_view.obs[0].reshape(-1), view.obs[0].reshape(-1)[sym.obs_index])
            if not view.terminal[0]:
                np.testing.assert_array_equal(o_view.legal[0], view.legal[0][sym.action_index])
