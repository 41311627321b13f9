"""The OpenSpiel env and simulator agree with pyspiel's own states under seeded random play:
observations (with the to-play plane), legal masks, players, rewards, terminals, same-step
auto-reset, ``final_obs``, episode return and length, the ``active`` mask, and independent clones."""
from __future__ import annotations

import numpy as np
import pytest

pyspiel = pytest.importorskip("pyspiel")

from lzkernel import ConfigError, Simulator, SimulatorEnvSpec, VectorEnv  # noqa: E402
from lzk_envs.openspiel import OpenSpielEnvSpec  # noqa: E402
from lzk_envs.plugin import OpenSpielEnvConfig, make_openspiel_env  # noqa: E402

GAMES = ["tic_tac_toe", "connect_four"]


@pytest.fixture(scope="module", params=GAMES)
def spec(request: pytest.FixtureRequest) -> OpenSpielEnvSpec:
    return make_openspiel_env(OpenSpielEnvConfig(game=request.param))


def _obs(state, player: int, shape: tuple[int, ...]) -> np.ndarray:
    """What the env shows ``player`` (OpenSpiel's 0 or 1) at ``state`` in observations of ``shape``
    (to-play plane on): a slice of 1.0 for player 0 (our player 1), 0.0 for player 1, then the
    observation tensor."""
    raw = np.asarray(state.observation_tensor(player), np.float32).reshape(shape[0] - 1, *shape[1:])
    return np.concatenate([np.full((1, *shape[1:]), player == 0, np.float32), raw])


def _random_legal(rng: np.random.Generator, legal: np.ndarray) -> np.ndarray:
    return np.where(legal, rng.random(legal.shape), -1.0).argmax(axis=1)


def test_spec_fields_and_protocols(spec: OpenSpielEnvSpec) -> None:
    game = pyspiel.load_game(spec.id.removeprefix("openspiel:"))
    assert isinstance(spec, SimulatorEnvSpec)
    assert spec.num_actions == game.num_distinct_actions()
    assert spec.two_player and spec.truncation_as_terminal
    perfect = ("perfect",) if spec.id == "openspiel:tic_tac_toe" else ()
    assert spec.opponents == ("random", "mcts") + perfect
    assert spec.obs_shape == (game.observation_tensor_shape()[0] + 1, *game.observation_tensor_shape()[1:])
    assert isinstance(spec.make_vector(2, 0), VectorEnv) and isinstance(spec.make_simulator(), Simulator)


def test_params_reach_the_game_and_the_id() -> None:
    spec = make_openspiel_env(OpenSpielEnvConfig(game="connect_four", params={"rows": 5, "columns": 6}))
    assert spec.id == "openspiel:connect_four(columns=6,rows=5)"
    assert spec.obs_shape == (4, 5, 6) and spec.num_actions == 6
    go = OpenSpielEnvSpec.load("go", {"board_size": 9, "komi": 7})  # an int is fine for a float param
    assert go.obs_shape == (5, 9, 9) and go.num_actions == 82


def test_vector_env_matches_pyspiel_with_autoreset_and_active_mask(spec: OpenSpielEnvSpec) -> None:
    """Five rows of seeded random play beside five reference pyspiel states stepped by hand; a
    random third of the rows sits out each step."""
    e, shape = 5, spec.obs_shape
    game = pyspiel.load_game(spec.id.removeprefix("openspiel:"))
    rng = np.random.default_rng(1)
    venv = spec.make_vector(e, seed=3)
    b = venv.reset()
    ref = [game.new_initial_state() for _ in range(e)]
    ended = 0
    for _ in range(150):
        for i, s in enumerate(ref):  # the batch shows each reference state, seen by its mover
            p = s.current_player()
            assert (b.obs[i] == _obs(s, p, shape)).all() and b.to_play[i] == p + 1
            assert b.legal[i].tolist() == [bool(x) for x in s.legal_actions_mask()]
            assert str(b.states[i]) == str(s)
        actions = _random_legal(rng, b.legal)
        active = rng.random(e) > 1 / 3
        before_obs, before_states = b.obs, b.states
        b = venv.step(actions, active)
        assert b.obs.dtype == np.float32 and b.to_play.dtype == np.int64 and not b.truncated.any()
        for i, s in enumerate(ref):
            if not active[i]:  # not stepped: same view, same state object, nothing reported
                assert (b.obs[i] == before_obs[i]).all() and b.states[i] is before_states[i]
                assert b.reward[i] == 0 and not b.terminated[i] and b.episode_length[i] == 0
                continue
            mover = s.current_player()
            s.apply_action(int(actions[i]))
            assert b.reward[i] == s.rewards()[mover]
            assert b.terminated[i] == s.is_terminal()
            if s.is_terminal():  # ended and already restarted in the same step
                ended += 1
                assert (b.final_obs[i] == _obs(s, 1 - mover, shape)).all()
                assert b.episode_return[i] == s.returns()[0] and b.episode_length[i] == len(s.history())
                assert b.reward[i] == (0.0 if s.returns()[0] == 0 else 1.0)  # a finishing move never loses here
                ref[i] = game.new_initial_state()
            else:
                assert (b.final_obs[i] == b.obs[i]).all()
                assert b.episode_return[i] == 0 and b.episode_length[i] == 0
    assert ended >= 10, ended  # the auto-reset path ran many times
    venv.close()


def test_episode_return_is_player_one_s(spec: OpenSpielEnvSpec) -> None:
    """Player 2 wins a scripted game: the reward goes to its move, the return is -1 (player 1's)."""
    moves = {"openspiel:tic_tac_toe": [0, 3, 1, 4, 8, 5],  # o completes the middle row
             "openspiel:connect_four": [0, 1, 0, 1, 0, 1, 2, 1]}[spec.id]  # o completes column 1
    venv = spec.make_vector(2, seed=0)
    venv.reset()
    for a in moves:
        b = venv.step(np.array([a, 0]), active=np.array([True, False]))
    assert b.terminated.tolist() == [True, False] and b.reward.tolist() == [1.0, 0.0]
    assert b.episode_return[0] == -1.0 and b.episode_length[0] == len(moves)
    fresh = pyspiel.load_game(spec.id.removeprefix("openspiel:")).new_initial_state()
    assert b.states[0].history() == [] and b.to_play[0] == 1 and b.legal[0].all()
    assert (b.obs[0] == _obs(fresh, 0, spec.obs_shape)).all()


def test_illegal_actions_and_bad_calls_name_the_game_and_row() -> None:
    spec = make_openspiel_env(OpenSpielEnvConfig(game="tic_tac_toe"))
    venv = spec.make_vector(2, seed=0)
    with pytest.raises(RuntimeError, match="before reset"):
        venv.step(np.array([0, 0]))
    venv.reset()
    venv.step(np.array([4, 0]))
    with pytest.raises(ValueError, match=r"openspiel:tic_tac_toe.*env index 0.*action 4 is not legal"):
        venv.step(np.array([4, 1]))
    with pytest.raises(ValueError, match=r"env index 1.*action 9"):
        venv.step(np.array([0, 9]))
    with pytest.raises(ValueError, match="shape"):
        venv.step(np.array([0]))
    b = venv.step(np.array([4, 4]), active=np.array([False, True]))  # the rejected calls stepped nothing
    assert [len(s.history()) for s in b.states] == [1, 2]


def test_simulator_matches_pyspiel(spec: OpenSpielEnvSpec) -> None:
    """A batch of six states played at random: the simulator's view of each reached state is
    pyspiel's, terminals have no legal move and the view of the opponent of the last mover."""
    n, shape = 6, spec.obs_shape
    sim = spec.make_simulator()
    rng = np.random.default_rng(2)
    states = [sim.new_state() for _ in range(n)]
    ref = [s.clone() for s in states]
    view = sim.observe(states)
    assert (view.reward == 0).all() and not view.terminal.any() and (view.to_play == 1).all()
    terminals = 0
    for _ in range(60):
        actions = _random_legal(rng, view.legal)
        movers = [s.current_player() for s in ref]
        view = sim.step(states, actions)
        for i, s in enumerate(ref):
            s.apply_action(int(actions[i]))
            assert str(states[i]) == str(s) and view.reward[i] == s.rewards()[movers[i]]
            assert view.terminal[i] == s.is_terminal()
            viewer = 1 - movers[i] if s.is_terminal() else s.current_player()
            assert (view.obs[i] == _obs(s, viewer, shape)).all() and view.to_play[i] == viewer + 1
            assert view.legal[i].tolist() == ([False] * spec.num_actions if s.is_terminal()
                                              else [bool(x) for x in s.legal_actions_mask()])
        again = sim.observe(states)  # observe agrees with step, terminals included
        assert (again.obs == view.obs).all() and (again.legal == view.legal).all()
        assert (again.to_play == view.to_play).all() and (again.terminal == view.terminal).all()
        for i in np.flatnonzero(view.terminal):
            terminals += 1
            states[i] = sim.new_state()
            ref[i] = states[i].clone()
        view = sim.observe(states)
    assert terminals >= 5, terminals


def test_simulator_rejects_illegal_moves_and_terminal_states() -> None:
    sim = make_openspiel_env(OpenSpielEnvConfig(game="tic_tac_toe")).make_simulator()
    s = sim.new_state()
    sim.step([s], np.array([0]))
    with pytest.raises(ValueError, match=r"tic_tac_toe.*state 0.*action 0 is not legal"):
        sim.step([s], np.array([0]))
    for a in [3, 1, 4, 2]:
        sim.step([s], np.array([a]))
    assert s.is_terminal()
    with pytest.raises(ValueError, match="cannot step a terminal state"):
        sim.step([s], np.array([5]))


def test_clones_are_independent(spec: OpenSpielEnvSpec) -> None:
    sim = spec.make_simulator()
    original = sim.new_state()
    sim.step([original], np.array([0]))
    copy = sim.clone(original)
    before = str(original)
    sim.step([copy, copy], np.array([1, 2]))  # the clone moves on, the original stays
    assert str(original) == before and original.history() == [0]
    sim.step([original], np.array([2]))  # and the other way round
    assert copy.history() == [0, 1, 2] and original.history() == [0, 2]
    # a clone of an env's state can be searched without touching the env
    venv = spec.make_vector(1, seed=0)
    b = venv.reset()
    probe = sim.clone(b.states[0])
    sim.step([probe], np.array([3]))
    b2 = venv.step(np.array([5]))
    assert b2.states[0].history() == [5] and probe.history() == [3]


def test_to_play_plane_says_who_moves_and_can_be_turned_off() -> None:
    """Tic-tac-toe's tensor is the same for both players: the plane alone tells them apart (1.0
    for player 1, 0.0 for player 2, terminal views included); ``to_play_plane: false`` gives the
    raw tensor; a 1-D tensor (oware) gets one more leading feature."""
    on = make_openspiel_env(OpenSpielEnvConfig(game="tic_tac_toe"))
    off = make_openspiel_env(OpenSpielEnvConfig(game="tic_tac_toe", to_play_plane=False))
    assert (on.obs_shape, off.obs_shape) == ((4, 3, 3), (3, 3, 3))
    sim_on, sim_off = on.make_simulator(), off.make_simulator()
    assert (sim_on.obs_shape, sim_off.obs_shape) == (on.obs_shape, off.obs_shape)
    state = sim_on.new_state()
    views = [sim_on.observe([state])]
    for a in [0, 3, 1, 4, 8, 5]:  # o (player 2) completes the middle row
        views.append(sim_on.step([state], np.array([a])))
    assert [int(v.to_play[0]) for v in views] == [1, 2, 1, 2, 1, 2, 1]
    for view in views:  # the plane follows to_play, at the terminal state too
        assert (view.obs[0, 0] == float(view.to_play[0] == 1)).all()
    assert views[-1].terminal[0] and (views[-1].obs[0, 0] == 1.0).all()
    raw = sim_off.observe([state]).obs[0]
    assert raw.shape == (3, 3, 3) and (views[-1].obs[0, 1:] == raw).all()  # then the game's own tensor
    assert (np.asarray(state.observation_tensor(0)) == np.asarray(state.observation_tensor(1))).all()
    venv = off.make_vector(1, seed=0)
    b = venv.reset()
    assert b.obs.shape == (1, 3, 3, 3) and (b.obs[0] == _obs(b.states[0], 0, (4, 3, 3))[1:]).all()
    oware = OpenSpielEnvSpec.load("oware")
    raw_len = pyspiel.load_game("oware").observation_tensor_shape()[0]
    sim = oware.make_simulator()
    state = sim.new_state()
    first = sim.observe([state])
    second = sim.step([state], np.flatnonzero(first.legal[0])[:1])
    assert oware.obs_shape == (raw_len + 1,) and first.obs.shape == (1, raw_len + 1)
    assert (first.obs[0, 0], second.obs[0, 0], int(second.to_play[0])) == (1.0, 0.0, 2)


def test_vector_env_state_replays_the_moves_on_fresh_games(spec: OpenSpielEnvSpec) -> None:
    """A saved state (each row's moves so far) continues exactly on a fresh vector env."""
    import json

    from lzkernel import ResumableVectorEnv

    rng = np.random.default_rng(3)
    env = spec.make_vector(4, seed=0)
    assert isinstance(env, ResumableVectorEnv)
    batch = env.reset()
    for _ in range(11):  # tic-tac-toe games end within 9 moves: some rows have auto-reset
        batch = env.step(_random_legal(rng, batch.legal), rng.random(4) < 0.9)
    meta, arrays = env.state_dict()
    fresh = spec.make_vector(4, seed=0)
    got = fresh.load_state_dict(json.loads(json.dumps(meta)), arrays)
    for name in ("obs", "legal", "to_play"):
        np.testing.assert_array_equal(getattr(got, name), getattr(batch, name), err_msg=name)
    assert [s.history() for s in got.states] == [s.history() for s in batch.states]
    for _ in range(20):
        actions, active = _random_legal(rng, batch.legal), rng.random(4) < 0.9
        batch, other = env.step(actions, active), fresh.step(actions, active)
        for name in ("obs", "legal", "to_play", "reward", "terminated", "final_obs", "episode_return",
                     "episode_length"):
            np.testing.assert_array_equal(getattr(batch, name), getattr(other, name), err_msg=name)


@pytest.mark.parametrize("game,planes", [("tic_tac_toe", (2, 1)), ("connect_four", (0, 1))])
def test_mover_planes_put_the_mover_s_pieces_first(game: str, planes: tuple[int, int]) -> None:
    """With ``mover_planes`` (a, b), under random play in the simulator and the vector env, slice
    a holds exactly the mover's pieces and b the opponent's (read from pyspiel's board), the
    other slices and the to-play plane are the game's own, and the first player's view is the
    plain tensor."""
    a, b = planes
    spec = make_openspiel_env(OpenSpielEnvConfig(game=game, mover_planes=list(planes)))
    plain = make_openspiel_env(OpenSpielEnvConfig(game=game))
    assert spec.obs_shape == plain.obs_shape and spec.mover_planes == planes
    sim, raw_sim = spec.make_simulator(), plain.make_simulator()
    rng = np.random.default_rng(0)
    swapped = 0
    for _ in range(20):
        state = sim.new_state()
        view = sim.observe([state])
        while True:
            raw = raw_sim.observe([state])
            obs, ref = view.obs[0], raw.obs[0]
            if view.to_play[0] == 1:
                assert (obs == ref).all()
            else:
                swapped += 1
                assert (obs[1 + a] == ref[1 + b]).all() and (obs[1 + b] == ref[1 + a]).all()
                others = [i for i in range(ref.shape[0]) if i not in (1 + a, 1 + b)]
                assert (obs[others] == ref[others]).all()
            # the mover's slice counts the mover's stones on pyspiel's board (x: player 1, o: player 2)
            assert obs[1 + a].sum() == str(state).count("xo"[int(view.to_play[0]) - 1])
            if view.terminal[0]:
                break
            legal = np.flatnonzero(view.legal[0])
            view = sim.step([state], np.array([rng.choice(legal)]))
    assert swapped > 20
    venv, raw_venv = spec.make_vector(4, seed=0), plain.make_vector(4, seed=0)
    batch, raw_batch = venv.reset(), raw_venv.reset()
    for _ in range(30):
        second = batch.to_play == 2
        assert (batch.obs[~second] == raw_batch.obs[~second]).all()
        assert (batch.obs[second][:, 1 + a] == raw_batch.obs[second][:, 1 + b]).all()
        actions = np.array([rng.choice(np.flatnonzero(row)) for row in batch.legal])
        batch, raw_batch = venv.step(actions), raw_venv.step(actions)


def test_mover_planes_errors_name_the_key_and_the_problem() -> None:
    """Bad ``mover_planes``: one line naming the key and what is expected."""
    cases = {("tic_tac_toe", (0, 3)): "must lie in [0, 3)", ("tic_tac_toe", (1, 1)): "two distinct",
             ("tic_tac_toe", (1,)): "two distinct", ("oware", (0, 1)): "1-D"}
    for (game, planes), words in cases.items():
        problems = OpenSpielEnvConfig(game=game, mover_planes=list(planes)).validate()
        assert len(problems) == 1 and problems[0][0] == "mover_planes" and words in problems[0][1]
        with pytest.raises(ConfigError, match=r"env\.mover_planes"):
            OpenSpielEnvSpec.load(game, mover_planes=planes)
