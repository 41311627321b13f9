"""Random openings (``collector.opening_moves``): training episodes start after k ~ U{0..M} random
legal moves that are not training data but are counted as env steps; the collector stays exactly
resumable; an opening that ends the game is drawn again; evaluators are untouched."""
from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pytest

pytest.importorskip("pyspiel")

from test_collector_resume import _same  # noqa: E402
from worker_fakes import StubRun  # noqa: E402

from lzkernel import ResumableVectorEnv  # noqa: E402
from lzk_envs.gym import GymEnvSpec  # noqa: E402
from lzk_envs.openspiel import OpenSpielEnvSpec  # noqa: E402
from lzk_workers.collector import EpisodeCollector  # noqa: E402
from lzk_workers.openings import RandomOpenings, with_openings  # noqa: E402
from lzk_workers.plugin import EpisodeCollectorConfig, make_episode_collector  # noqa: E402


@pytest.fixture(scope="module")
def ttt() -> OpenSpielEnvSpec:
    return OpenSpielEnvSpec.load("tic_tac_toe")


def _collector(spec, opening_moves: int, seed: int = 3) -> EpisodeCollector:
    return EpisodeCollector(spec, envs=4, n_episode=16, seed=seed, random_rng=np.random.default_rng(seed),
                            opening_moves=opening_moves, opening_rng=np.random.default_rng([seed, 7]))


def _random_collect(col: EpisodeCollector):
    return col.collect(None, temperature=1.0, epsilon=0.0, random_policy=True)


def test_games_start_after_zero_to_m_random_moves(ttt: OpenSpielEnvSpec) -> None:
    venv = with_openings(ttt.make_vector(8, 0), 4, np.random.default_rng(0))
    batch = venv.reset()
    lengths: Counter[int] = Counter(len(s.history()) for s in batch.states)
    rng = np.random.default_rng(1)
    for _ in range(300):  # random play; every new game's first position is after its opening
        actions = np.array([rng.choice(np.flatnonzero(row)) for row in batch.legal])
        batch = venv.step(actions)
        for i in np.flatnonzero(batch.terminated):
            lengths[len(batch.states[i].history())] += 1
    assert set(lengths) == {0, 1, 2, 3, 4}  # every k in 0..M occurs, and nothing beyond M
    assert min(lengths.values()) > 0.1 * sum(lengths.values())  # uniform-ish: each k ≥ 10%
    for state, legal in zip(batch.states, batch.legal):  # the views are of the post-opening positions
        assert not state.is_terminal() and legal.sum() == 9 - len(state.history())


def test_openings_are_counted_as_env_steps_but_not_recorded(ttt: OpenSpielEnvSpec) -> None:
    col = _collector(ttt, opening_moves=4)
    pieces, metrics = _random_collect(col)
    recorded = sum(len(p) for p in pieces)
    assert metrics["collect/opening_steps"] > 0
    assert metrics["collect/env_steps"] == recorded + metrics["collect/opening_steps"]
    assert col.total_env_steps == metrics["collect/env_steps"]
    starts = Counter(9 - int(p.legal[0].sum()) for p in pieces)  # marks on the board at the first obs
    assert max(starts) <= 4 and len(starts) > 1
    for p in pieces:  # a piece holds one whole game from its opening on: it ends, nothing is cut
        assert p.ended and p.terminal and p.timestep[0] == 0


def test_without_openings_the_env_is_untouched(ttt: OpenSpielEnvSpec) -> None:
    venv = ttt.make_vector(2, 0)
    assert with_openings(venv, 0, np.random.default_rng(0)) is venv
    pieces, metrics = _random_collect(_collector(ttt, opening_moves=0))
    assert "collect/opening_steps" not in metrics
    assert all(9 - int(p.legal[0].sum()) == 0 for p in pieces)  # every game from the empty board


def test_a_collector_with_openings_resumes_exactly(ttt: OpenSpielEnvSpec) -> None:
    col = _collector(ttt, opening_moves=4)
    assert isinstance(col.player.venv, ResumableVectorEnv)
    for _ in range(2):
        _random_collect(col)
    meta, arrays = col.episode_state()
    fresh = _collector(ttt, opening_moves=4)
    fresh.load_state_dict(col.state_dict())
    fresh.load_episode_state(json.loads(json.dumps(meta)), {k: v.copy() for k, v in arrays.items()})
    for _ in range(3):
        (a, ma), (b, mb) = _random_collect(col), _random_collect(fresh)
        _same(a, b)
        assert ma["collect/opening_steps"] == mb["collect/opening_steps"]
    assert fresh.state_dict() == col.state_dict()


def test_a_state_saved_without_openings_is_refused(ttt: OpenSpielEnvSpec) -> None:
    plain = _collector(ttt, opening_moves=0)
    _random_collect(plain)
    meta, arrays = plain.episode_state()
    with pytest.raises(ValueError, match="without random openings"):
        _collector(ttt, opening_moves=4).load_episode_state(meta, arrays)


def test_an_opening_that_ends_the_episode_is_drawn_again() -> None:
    """CartPole under random moves falls within ~10-40 steps: openings of up to 60 moves often
    end the episode, and then a new episode and a new opening start."""
    spec = GymEnvSpec.probe("CartPole-v1")
    venv = with_openings(spec.make_vector(4, 0), 60, np.random.default_rng(1))
    assert isinstance(venv, RandomOpenings)
    batch = venv.reset()
    assert not (batch.terminated | batch.truncated).any()  # the reset batch reports no ended episode
    assert venv.opening_steps > 4 * 30  # more than one opening's worth per env on average: redrawn
    pole = batch.obs[:, 2]
    assert (np.abs(pole) < 0.2095).all()  # every row is a live episode (the pole has not fallen)


def test_the_option_reaches_the_collector_and_its_own_rng(ttt: OpenSpielEnvSpec) -> None:
    cfg = EpisodeCollectorConfig(envs=2, n_episode=4, opening_moves=3)
    col = make_episode_collector(cfg, StubRun(seed=0), env_spec=ttt, frame_stack=1)
    assert isinstance(col.player.venv, RandomOpenings) and col.player.venv.max_moves == 3
    plain = make_episode_collector(EpisodeCollectorConfig(envs=2, n_episode=4), StubRun(seed=0),
                                   env_spec=ttt, frame_stack=1)
    assert not isinstance(plain.player.venv, RandomOpenings)


def test_versus_games_from_random_openings_keep_the_agents_view(ttt: OpenSpielEnvSpec) -> None:
    from lzk_workers.opponents import OpponentSpec
    from lzk_workers.versus_collector import VersusCollector

    col = VersusCollector(ttt, envs=4, n_episode=16, opponent=OpponentSpec("random", {}, "random"), seed=0,
                          opponent_seed=1, random_rng=np.random.default_rng(0), opening_moves=4,
                          opening_rng=np.random.default_rng(2))
    views, metrics = col.collect(None, temperature=1.0, epsilon=0.0, random_policy=True)
    assert metrics["collect/opening_steps"] > 0 and metrics["collect/episodes"] == 16
    assert metrics["collect/agent_steps"] == sum(len(v) for v in views)
    for v in views:  # every view is the agent's alone: one side throughout, from its first decision
        assert len(set(v.to_play.tolist())) == 1 and v.timestep[0] == 0
    assert len({9 - int(v.legal[0].sum()) for v in views}) > 2  # agents' first positions vary with the openings
