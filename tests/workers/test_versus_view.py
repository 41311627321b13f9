"""The agent's view of a two-player game (hand-computed on scripted trajectories), game results
and rates, and the acting wrapper that splits env rows between the agent and a bot."""
from __future__ import annotations

import numpy as np
import pytest

from lzkernel import Trajectory
from lzk_workers.versus import VersusActor, agent_return, agent_view, outcome_rates


def game(to_play: list[int], rewards: list[float], ended: bool = True) -> Trajectory:
    """A recorded game of T moves: obs[t] = [t], action t + 10, root value t, visit one-hot on t."""
    t = len(rewards)
    assert len(to_play) == t + 1
    return Trajectory(
        obs=np.arange(t + 1, dtype=np.float32)[:, None], actions=np.arange(t, dtype=np.int64) + 10,
        rewards=np.array(rewards, np.float32), visit_dist=np.eye(t, 9, dtype=np.float32),
        root_values=np.arange(t, dtype=np.float32), pred_values=-np.arange(t, dtype=np.float32),
        legal=np.ones((t + 1, 9), bool), to_play=np.array(to_play, np.int64),
        timestep=np.arange(t + 1, dtype=np.int64), ended=ended, terminal=ended, env_id=3, episode_return=0.0)


#: Player 1 (x) wins with its third move: x 0, o 3, x 1, o 4, x 2.
X_WINS = game([1, 2, 1, 2, 1, 2], [0, 0, 0, 0, 1])
#: Player 2 (o) wins with its third move (the agent, x, loses to a game the opponent ends).
O_WINS = game([1, 2, 1, 2, 1, 2, 1], [0, 0, 0, 0, 0, 1])


def test_agent_first_who_ends_the_game() -> None:
    view = agent_view(X_WINS, 1)
    assert view is not None and len(view) == 3
    assert view.obs[:, 0].tolist() == [0, 2, 4, 5]  # its decision points, then the final observation
    assert view.actions.tolist() == [10, 12, 14] and view.root_values.tolist() == [0, 2, 4]
    assert view.rewards.tolist() == [0, 0, 1]  # its move minus the opponent's reply
    assert view.to_play.tolist() == [1, 1, 1, 1] and view.timestep.tolist() == [0, 1, 2, 3]
    assert (view.visit_dist == np.eye(5, 9, dtype=np.float32)[[0, 2, 4]]).all()
    assert view.episode_return == 1.0 == agent_return(X_WINS, 1)
    assert view.ended and view.terminal and view.env_id == 3 and view.legal.shape == (4, 9)


def test_agent_second_loses_to_the_opponent_s_last_move() -> None:
    view = agent_view(X_WINS, 2)
    assert view is not None and view.obs[:, 0].tolist() == [1, 3, 5]
    assert view.rewards.tolist() == [0, -1]  # o's last move, then x's winning reply: 0 - 1
    assert view.to_play.tolist() == [2, 2, 2] and view.actions.tolist() == [11, 13]
    assert view.episode_return == -1.0 == agent_return(X_WINS, 2)


def test_agent_first_in_a_game_the_opponent_ends() -> None:
    view = agent_view(O_WINS, 1)
    assert view is not None and view.obs[:, 0].tolist() == [0, 2, 4, 6]
    assert view.rewards.tolist() == [0, 0, -1] and view.episode_return == -1.0
    mirror = agent_view(O_WINS, 2)
    assert mirror is not None and mirror.rewards.tolist() == [0, 0, 1] and mirror.obs[:, 0].tolist() == [1, 3, 5, 6]


def test_moves_twice_in_a_row_and_rewards_before_the_first_move() -> None:
    """Games need not alternate: a reward sums the agent's move and every opponent move up to its
    next one; an opponent move before the agent's first counts only in episode_return."""
    g = game([1, 2, 2, 1, 2], [0.5, 0.25, 1.0, -0.5])
    one, two = agent_view(g, 1), agent_view(g, 2)
    assert one is not None and two is not None
    assert one.obs[:, 0].tolist() == [0, 3, 4] and one.rewards.tolist() == pytest.approx([0.5 - 0.25 - 1.0, -0.5])
    assert one.episode_return == pytest.approx(-1.25) == -two.episode_return
    assert two.obs[:, 0].tolist() == [1, 2, 4] and two.rewards.tolist() == pytest.approx([0.25, 1.0 + 0.5])
    assert sum(two.rewards) - 0.5 == pytest.approx(two.episode_return)  # the dropped 0.5 is x's first move


def test_no_decision_point_and_unfinished_pieces() -> None:
    assert agent_view(game([1, 2], [1.0]), 2) is None  # the opponent ended the game at once
    with pytest.raises(ValueError, match="whole game"):
        agent_view(game([1, 2, 1], [0, 0], ended=False), 1)


def test_outcome_rates() -> None:
    rates = outcome_rates("eval/vs_x", [1.0, 0.0, -1.0, 1.0])
    assert rates == {"eval/vs_x/win_rate": 0.5, "eval/vs_x/draw_rate": 0.25, "eval/vs_x/loss_rate": 0.25}
    assert outcome_rates("collect", []) == {}


# -- the acting wrapper ----------------------------------------------------------------------------


def test_actor_splits_rows_between_agent_and_bot() -> None:
    pytest.importorskip("pyspiel")
    from board_fakes import FirstLegalAgent, ScriptedBot

    from lzk_envs.openspiel import OpenSpielEnvSpec

    spec = OpenSpielEnvSpec.load("tic_tac_toe")
    venv = spec.make_vector(4, seed=0)
    b = venv.reset()
    b = venv.step(np.array([4, 4, 0, 0]), active=np.array([False, False, True, True]))  # envs 2, 3: o to move
    sides = np.array([1, 2, 2, 1], np.int64)
    agent = FirstLegalAgent(metrics={"search/ms": 2.0})
    actor = VersusActor(agent, ScriptedBot([4, 4]), sides, alternate=True)
    ids = np.arange(4)
    res = actor.act(b.obs, b.legal, b.to_play, mode="collect", env_ids=ids, timestep=np.array([0, 0, 1, 1]),
                    states=b.states)
    (call,) = agent.calls
    assert call["env_ids"].tolist() == [0, 2] and call["to_play"].tolist() == [1, 2]  # the agent's rows only
    assert call["histories"] == [(), (0,)] and (call["obs"] == b.obs[[0, 2]]).all()
    assert res.action.tolist() == [0, 4, 1, 4]  # agent: first legal; bot: the script's ply
    assert res.visit_dist[[1, 3]].sum() == 0 and (res.root_value[[1, 3]] == 0).all() and (res.pred_value[[1, 3]] == 0).all()
    assert res.visit_dist[0, 0] == 1 and res.root_value[2] == 0.5 and res.metrics == {"search/ms": 2.0}
    only_bot = actor.act(b.obs[[1]], b.legal[[1]], b.to_play[[1]], mode="collect", env_ids=ids[[1]], states=b.states[1:2])
    assert len(agent.calls) == 1 and only_bot.metrics is None  # no agent row: the agent is not called
    actor.reset_envs([1, 2], "collect")
    assert sides.tolist() == [1, 1, 1, 1] and actor.ended == [(1, 2), (2, 2)]  # switched in place, logged first
    assert agent.resets == [([1, 2], "collect")]
    with pytest.raises(ValueError, match="SimulatorEnvSpec"):
        actor.act(b.obs, b.legal, b.to_play, mode="collect", env_ids=ids, states=None)
    with pytest.raises(ValueError, match="players 1 or 2"):
        VersusActor(agent, ScriptedBot([]), np.array([0, 1]), alternate=False)
