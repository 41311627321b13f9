"""The versus collector on real tic-tac-toe: scripted games returned as the agent saw them, sides
alternating per game and across collects, metrics; and self-play through the episode collector."""
from __future__ import annotations

from collections import defaultdict

import numpy as np
import pytest

pytest.importorskip("pyspiel")

from board_fakes import FirstLegalAgent, ScriptedAgent, ScriptedSpec  # noqa: E402
from worker_fakes import StubRun  # noqa: E402

from lzk_envs.openspiel import OpenSpielEnvSpec  # noqa: E402
from lzk_workers.collector import EpisodeCollector  # noqa: E402
from lzk_workers.opponents import OpponentSpec  # noqa: E402
from lzk_workers.plugin import VersusCollectorConfig, make_versus_collector  # noqa: E402
from lzk_workers.versus_collector import VersusCollector  # noqa: E402

#: x 0, o 3, x 1, o 4, x 2: x (player 1) completes the top row with the game's fifth move.
X_WINS = [0, 3, 1, 4, 2]


@pytest.fixture(scope="module")
def ttt() -> OpenSpielEnvSpec:
    return OpenSpielEnvSpec.load("tic_tac_toe")


def collector(spec, *, envs: int = 2, n_episode: int = 2, opponent: str = "scripted") -> VersusCollector:
    return VersusCollector(spec, envs=envs, n_episode=n_episode, opponent=OpponentSpec(opponent, {}, opponent),
                           seed=0, opponent_seed=11, random_rng=np.random.default_rng(0))


def test_scripted_games_as_the_agent_saw_them(ttt: OpenSpielEnvSpec) -> None:
    """Env 0's agent is x and wins, env 1's is o and loses to a game the opponent ends; in the
    next collect they swap sides."""
    col = collector(ScriptedSpec(ttt, X_WINS))
    agent = ScriptedAgent(X_WINS)
    views, m = col.collect(agent, temperature=1.0, epsilon=0.0)
    by_env = {v.env_id: v for v in views}
    x, o = by_env[0], by_env[1]
    assert x.actions.tolist() == [0, 1, 2] and x.rewards.tolist() == [0, 0, 1] and x.to_play.tolist() == [1] * 4
    assert o.actions.tolist() == [3, 4] and o.rewards.tolist() == [0, -1] and o.to_play.tolist() == [2] * 3
    assert (x.episode_return, o.episode_return) == (1.0, -1.0)
    # observations: the agent's decision points (plane 1.0 for x to move, 0.0 for o), then the end position
    assert (x.obs[:3, 0] == 1).all() and (o.obs[:2, 0] == 0).all()
    assert x.obs[0, 1].all()  # x's first decision: the empty board (plane 1 of the raw tensor: empty cells)
    assert (x.obs[-1] == o.obs[-1]).all() and (x.obs[-1, 0] == 0).all()  # the same final position, o "to move"
    assert (x.visit_dist == np.eye(9, dtype=np.float32)[[0, 1, 2]]).all() and (o.root_values == 0.5).all()
    assert m["collect/env_steps"] == 10 and m["collect/agent_steps"] == 5 and m["collect/episodes"] == 2
    assert (m["collect/win_rate"], m["collect/draw_rate"], m["collect/loss_rate"]) == (0.5, 0.0, 0.5)
    assert m["collect/return_mean"] == 0.0 and m["collect/first_player_rate"] == 0.5
    assert m["collect/episode_length_mean"] == 5
    # the agent saw its rows only: env 0 at plies 0, 2, 4; env 1 at plies 1, 3
    seen = defaultdict(list)
    for call in agent.calls:
        for i, h in zip(call["env_ids"].tolist(), call["histories"]):
            seen[i].append(len(h))
    assert dict(seen) == {0: [0, 2, 4], 1: [1, 3]}
    views, m = col.collect(agent, temperature=1.0, epsilon=0.0)
    by_env = {v.env_id: v for v in views}
    assert by_env[0].to_play[0] == 2 and by_env[0].episode_return == -1.0  # sides swapped
    assert by_env[1].to_play[0] == 1 and by_env[1].episode_return == 1.0
    assert col.state_dict()["agent_player"] == [1, 2]  # and back for the third game
    assert (col.total_env_steps, col.total_episodes) == (20, 4)


def test_sides_alternate_per_env_and_views_hold_only_the_agent(ttt: OpenSpielEnvSpec) -> None:
    col = collector(ttt, envs=3, n_episode=6, opponent="random")
    agent = FirstLegalAgent(metrics={"search/ms": 1.0})
    sides = defaultdict(list)
    steps = 0
    for _ in range(2):
        views, m = col.collect(agent, temperature=1.0, epsilon=0.0)
        assert len(views) == 6
        for v in views:
            side = int(v.to_play[0])
            assert (v.to_play == side).all()  # only the agent's player
            sides[v.env_id].append(side)
            assert (v.visit_dist.sum(axis=1) == 1).all() and (v.root_values == 0.5).all()  # no bot row kept
            assert v.rewards.sum() == v.episode_return and (v.rewards[:-1] == 0).all()  # tic-tac-toe: final rewards
            assert v.timestep.tolist() == list(range(len(v) + 1)) and v.ended and v.terminal
            assert (v.obs[:-1, 0] == float(side == 1)).all()  # the plane: the agent's player moves
        assert m["collect/win_rate"] + m["collect/draw_rate"] + m["collect/loss_rate"] == pytest.approx(1.0)
        assert m["collect/agent_steps"] == sum(len(v) for v in views) < m["collect/env_steps"]
        assert m["search/ms"] == 1.0
        steps += m["collect/env_steps"]
    # env i starts as player 1 + i % 2 and switches after every game, across collects too
    assert dict(sides) == {0: [1, 2, 1, 2], 1: [2, 1, 2, 1], 2: [1, 2, 1, 2]}
    assert col.total_env_steps == steps


def test_random_warm_up_and_resume(ttt: OpenSpielEnvSpec) -> None:
    col = collector(ttt, envs=2, n_episode=2, opponent="random")
    views, m = col.collect(FirstLegalAgent(), temperature=1.0, epsilon=0.0, random_policy=True, n_episode=3)
    assert len(views) == 3 and m["collect/episodes"] == 3
    for v in views:  # the random actor acted for the agent: uniform over its legal moves
        assert np.allclose(v.visit_dist.sum(axis=1), 1) and (v.visit_dist[:, 0] < 1).all()
    state = col.state_dict()
    assert state["agent_player"] == [1, 1]  # env 0 played twice (as 1, then 2), env 1 once (as 2)
    other = collector(ttt, opponent="random")
    assert other.agent_player.tolist() == [1, 2]
    other.load_state_dict(state)
    assert other.agent_player.tolist() == [1, 1] and other.total_episodes == 3


def test_a_resumed_collector_meets_the_same_opponent(ttt: OpenSpielEnvSpec) -> None:
    """Collect, save, collect again; a new collector loaded from the save plays the second
    collect's games move for move: the random bot of collect n is rebuilt from (seed, n), so its
    state need not be saved. Its moves differ from one collect to the next."""
    col = collector(ttt, envs=2, n_episode=2, opponent="random")
    first, _ = col.collect(FirstLegalAgent(), temperature=1.0, epsilon=0.0)
    state, (meta, arrays) = col.state_dict(), col.episode_state()
    second, _ = col.collect(FirstLegalAgent(), temperature=1.0, epsilon=0.0)
    other = collector(ttt, envs=2, n_episode=2, opponent="random")
    other.load_state_dict(state)
    other.load_episode_state(meta, arrays)
    resumed, _ = other.collect(FirstLegalAgent(), temperature=1.0, epsilon=0.0)
    assert [g.actions.tolist() for g in resumed] == [g.actions.tolist() for g in second]
    assert state["collects"] == 1 and other.collects == col.collects == 2
    games = [[g.actions.tolist() for g in c.collect(FirstLegalAgent(), temperature=1.0, epsilon=0.0)[0]]
             for c in (col, other) for _ in range(3)]
    assert games[:3] == games[3:] and len({str(g) for g in games[:3] + [[x.actions.tolist() for x in first]]}) > 1


def test_factory_seeds_the_opponent_from_the_run(ttt: OpenSpielEnvSpec) -> None:
    spec, run = ScriptedSpec(ttt), StubRun(seed=3)
    cfg = VersusCollectorConfig(envs=2, n_episode=4, opponent={"name": "mcts", "simulations": 5})
    col = make_versus_collector(cfg, run, env_spec=spec, frame_stack=1)
    first = int(np.random.SeedSequence([run.seed("collector", "opponent", 0), 0]).generate_state(1)[0])
    assert spec.made == [("mcts", {"simulations": 5}, first)]  # collect n's opponent: (the run's seed, n)
    assert col.n_episode == 4 and col.player.num_envs == 2
    with pytest.raises(ValueError, match="needs frame_stack 1, got 4"):
        make_versus_collector(cfg, run, env_spec=spec, frame_stack=4)


def test_self_play_alternates_players_and_rewards_the_mover(ttt: OpenSpielEnvSpec) -> None:
    """Self-play is the episode collector: the policy plays both sides; to_play alternates and
    each reward is its mover's (here player 2 wins: the reward sits on its move, player 1's
    return is -1)."""
    o_wins = [0, 3, 1, 4, 8, 5]
    col = EpisodeCollector(ttt, envs=1, n_episode=2, seed=0)
    agent = ScriptedAgent(o_wins)
    (first, second), _ = col.collect(agent, temperature=1.0, epsilon=0.0)
    for traj in (first, second):
        assert traj.to_play.tolist() == [1, 2, 1, 2, 1, 2, 1]
        assert traj.actions.tolist() == o_wins and traj.rewards.tolist() == [0, 0, 0, 0, 0, 1]
        assert traj.to_play[len(traj) - 1] == 2 and traj.episode_return == -1.0
        assert (traj.obs[:, 0] == (traj.to_play == 1)[:, None, None]).all()  # the plane follows the mover
    first_legal, _ = EpisodeCollector(ttt, envs=1, n_episode=1, seed=0).collect(
        FirstLegalAgent(), temperature=1.0, epsilon=0.0)
    (x_wins,) = first_legal  # x 0 2 4 6 against o 1 3 5: x completes the 2-4-6 diagonal
    assert x_wins.rewards.tolist() == [0] * 6 + [1] and x_wins.to_play[6] == 1 and x_wins.episode_return == 1.0
