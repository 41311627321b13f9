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


@pytest.mark.parametrize("saved, now", [(0, 4), (4, 0), (4, 6)])
def test_episodes_saved_with_other_openings_are_refused(ttt: OpenSpielEnvSpec, saved: int, now: int) -> None:
    old = _collector(ttt, opening_moves=saved)
    _random_collect(old)
    meta, arrays = old.episode_state()
    with pytest.raises(ValueError, match=f"saved with collector.opening_moves {saved}, this run has {now}"):
        _collector(ttt, opening_moves=now).load_episode_state(meta, arrays)


class _ScriptedRng:
    """Opening lengths from a list; the first legal action as the random move."""

    def __init__(self, lengths: list[int]) -> None:
        self.lengths = list(lengths)

    def integers(self, low: int, high: int, size: int | None = None):  # noqa: ANN201
        if size is None:
            return self.lengths.pop(0)
        return np.array([self.lengths.pop(0) for _ in range(size)])

    def choice(self, a: np.ndarray) -> int:
        return int(a[0])


def test_an_opening_that_ends_the_episode_is_drawn_again() -> None:
    """Episodes 0 and 1 last 2 moves, episode 2 lasts 50: openings of 5 and 4 moves end the first
    two (each redrawn), the third opening (3 moves) is played in episode 2."""
    from worker_fakes import FakeVectorEnv

    inner = FakeVectorEnv(1, 0, length=lambda i, k: 2 if k < 2 else 50)
    venv = RandomOpenings(inner, 5, _ScriptedRng([5, 4, 3]))  # type: ignore[arg-type]
    batch = venv.reset()
    assert venv.opening_steps == 2 + 2 + 3
    assert batch.obs[0].tolist() == [0, 2, 3]  # env 0, episode 2, step 3
    assert not (batch.terminated | batch.truncated).any() and batch.episode_return[0] == 0
    assert (batch.final_obs == batch.obs).all()  # nothing ended in a reset batch


def test_after_an_episode_end_the_final_obs_is_the_ended_episode_s() -> None:
    from worker_fakes import FakeVectorEnv

    inner = FakeVectorEnv(2, 0, length=lambda i, k: 3 + i)
    venv = RandomOpenings(inner, 2, _ScriptedRng([0, 0, 2]))  # type: ignore[arg-type]
    batch = venv.reset()
    for _ in range(3):  # the third step ends env 0's episode (3 moves); env 1 goes on
        batch = venv.step(batch.legal.argmax(1))
    assert batch.terminated.tolist() == [True, False]
    assert batch.final_obs[0].tolist() == [0, 0, 3]  # the ended episode's last observation
    assert batch.obs[0].tolist() == [0, 1, 2]  # the next episode, after its 2-move opening
    assert batch.final_obs[1].tolist() == batch.obs[1].tolist() == [1, 0, 3]
    assert venv.opening_steps == 2


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
    for v in views:  # each view starts at a position where the agent is to move (the to-play plane)
        assert v.obs[0][0].mean() == (1.0 if v.to_play[0] == 1 else 0.0)
    assert len({9 - int(v.legal[0].sum()) for v in views}) > 2  # agents' first positions vary with the openings
