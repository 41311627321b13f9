"""Board games through OpenSpiel: a :class:`~lzkernel.SimulatorEnvSpec` and its same-step
auto-reset vector env.

One adapter serves every OpenSpiel game that is sequential, deterministic, perfect-information,
two-player and zero-sum (or constant-sum) with an observation tensor (checked by
:func:`lzk_envs.openspiel_game.load_game` at config time). The vector env steps its rows through
the game's :class:`~lzk_envs.openspiel_sim.OpenSpielSimulator`, so env and search see the same
observations, rewards and players (conventions in that module's docstring):

* ``obs`` [E, *O] float32: ``observation_tensor`` of the player to move, in the game's shape,
  after a leading to-play slice (1.0: player 1 moves, 0.0: player 2) unless ``to_play_plane`` is
  off; with ``mover_planes`` the two players' piece slices are swapped where player 2 moves;
* ``to_play`` [E]: OpenSpiel player + 1 (1 moves first);
* ``reward`` [E]: the reward of the move just made for the player who made it (+1 for a winning
  move, -1 for a move that loses, 0 otherwise and for draws);
* ``episode_return`` [E]: the finished game's return **for player 1**, ``episode_length`` its
  number of moves (both players' moves);
* ``states`` [E]: the rows' ``pyspiel.State`` objects (the env's own: read or clone, never step).

Shape letters: E envs, A actions, O observation shape.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np

from lzkernel import ConfigError, Opponent, StepBatch, Symmetry
from lzk_envs.openspiel_game import game_id, load_game
from lzk_envs.openspiel_sim import OpenSpielSimulator, mover_planes_problem, observation_shape
from lzk_envs.vector import check_restored, check_step_args


@dataclass
class OpenSpielEnvSpec:
    """What a policy needs to know about an OpenSpiel game, and how to make envs, simulators and
    opponents of it (a :class:`~lzkernel.SimulatorEnvSpec`), and its positions and moves as text
    (a :class:`~lzkernel.TextGameEnvSpec`: ``lzkernel play``)."""

    id: str
    obs_shape: tuple[int, ...]
    num_actions: int
    game: Any = field(repr=False)  # pyspiel.Game
    opponents: tuple[str, ...] = ()
    #: Observations start with a slice that says who moves (see :mod:`lzk_envs.openspiel_sim`).
    to_play_plane: bool = True
    #: Slices (a, b) of the game's tensor swapped where player 2 moves: the mover's pieces in a.
    mover_planes: tuple[int, ...] = ()
    two_player: bool = True
    #: OpenSpiel games end by their own rules (go and others have a move cap in the rules), so a
    #: row is never truncated; kept True for the EnvSpec contract.
    truncation_as_terminal: bool = True

    @classmethod
    def load(cls, game: str, params: Mapping[str, Any] | None = None, *,
             to_play_plane: bool = True, mover_planes: Sequence[int] = ()) -> OpenSpielEnvSpec:
        """The spec of OpenSpiel game ``game`` with ``params``; :class:`ConfigError` naming the
        game and the unsupported property when the env cannot play it."""
        from lzk_envs.board_bots import opponent_names

        params = dict(params or {})
        loaded = load_game(game, params)
        problem = mover_planes_problem(loaded, mover_planes) if mover_planes else None
        if problem:
            raise ConfigError(f"env.mover_planes: {problem}")
        return cls(
            id=game_id(loaded, params),
            obs_shape=observation_shape(loaded, to_play_plane),
            num_actions=int(loaded.num_distinct_actions()),
            game=loaded,
            opponents=opponent_names(loaded),
            to_play_plane=to_play_plane,
            mover_planes=tuple(int(i) for i in mover_planes),
        )

    def make_vector(self, num_envs: int, seed: int) -> OpenSpielVectorEnv:
        """``num_envs`` envs; env i is seeded with ``seed + i`` at its first reset."""
        if num_envs < 1:
            raise ValueError(f"num_envs must be >= 1, got {num_envs}")
        return OpenSpielVectorEnv(self.id, self.make_simulator(), num_envs, seed)

    def symmetries(self) -> tuple[Symmetry, ...]:
        """The board's symmetries (:mod:`lzk_envs.board_symmetry`), the identity first."""
        from lzk_envs.board_symmetry import board_symmetries

        return board_symmetries(self.game, self.obs_shape, self.num_actions)

    def make_simulator(self) -> OpenSpielSimulator:
        """A simulator for the states this spec's vector envs report."""
        return OpenSpielSimulator(self.game, self.to_play_plane, self.mover_planes)

    def state_text(self, state: Any) -> str:
        """The game's own drawing of ``state`` (a :class:`~lzkernel.TextGameEnvSpec`)."""
        return str(state).rstrip("\n")

    def action_text(self, state: Any, action: int) -> str:
        """OpenSpiel's name of move ``action`` for the player to move (``x(1,1)``, ``o3``)."""
        return str(state.action_to_string(state.current_player(), int(action)))

    def make_opponent(self, name: str, params: Mapping[str, Any], seed: int) -> Opponent:
        """Opponent ``name`` (one of :attr:`opponents`) with its ``params``, seeded with ``seed``;
        ConfigError for an unknown name or bad params."""
        from lzk_envs.board_bots import make_opponent

        return make_opponent(self.game, name, params, seed, who=self.id)


class OpenSpielVectorEnv:
    """E games of one OpenSpiel game stepped together, with same-step auto-reset.

    Invariants between calls: ``_states[i]`` is row i's running game (never terminal),
    ``_obs[i]``/``_legal[i]``/``_to_play[i]`` its view, ``_len[i]`` the moves made in it.

    The supported games are deterministic (no chance nodes, checked at config time), so the seed
    cannot change a game; it is kept for the :class:`~lzkernel.VectorEnv` contract. For the same
    reason a checkpoint (:class:`lzkernel.ResumableVectorEnv`) holds each row's moves so far,
    which :meth:`load_state_dict` plays again from a new game.
    """

    def __init__(self, env_id: str, sim: OpenSpielSimulator, num_envs: int, seed: int) -> None:
        self.env_id = env_id
        self.num_envs = num_envs
        self.seed = seed
        self.obs_shape = sim.obs_shape
        self.num_actions = sim.num_actions
        self._sim = sim
        self._states: list[Any] = [None] * num_envs
        self._obs = np.zeros((num_envs, *sim.obs_shape), np.float32)  # [E, *O]
        self._legal = np.zeros((num_envs, sim.num_actions), bool)  # [E, A]
        self._to_play = np.ones(num_envs, np.int64)  # [E]
        self._len = np.zeros(num_envs, np.int64)  # [E] moves in the running game
        self._started = False

    def _new_games(self, rows: np.ndarray) -> None:
        """Start a fresh game in each of ``rows`` and record its view."""
        for i in rows:
            self._states[i] = self._sim.new_state()
        view = self._sim.observe([self._states[i] for i in rows])
        self._obs[rows], self._legal[rows], self._to_play[rows] = view.obs, view.legal, view.to_play
        self._len[rows] = 0

    def _batch(self, reward: np.ndarray, terminated: np.ndarray, final_obs: np.ndarray,
               ep_ret: np.ndarray, ep_len: np.ndarray) -> StepBatch:
        return StepBatch(
            obs=self._obs.copy(),
            legal=self._legal.copy(),
            to_play=self._to_play.copy(),
            reward=reward,
            terminated=terminated,
            truncated=np.zeros(self.num_envs, bool),
            final_obs=final_obs,
            episode_return=ep_ret,
            episode_length=ep_len,
            states=list(self._states),
        )

    # -- VectorEnv -------------------------------------------------------------------------------

    def reset(self) -> StepBatch:
        """Start a new game in every row: rewards zero, no episode ended."""
        self._new_games(np.arange(self.num_envs))
        self._started = True
        e = self.num_envs
        return self._batch(np.zeros(e, np.float32), np.zeros(e, bool), self._obs.copy(),
                           np.zeros(e, np.float32), np.zeros(e, np.int64))

    def step(self, actions: np.ndarray, active: np.ndarray | None = None) -> StepBatch:
        """Play ``actions`` [E] int (each legal for its row) in the rows where ``active`` [E] bool
        (default all) is True; the other rows repeat their view with zero reward.

        Where a game ends, the row already holds a new game's first state and ``final_obs`` (the
        end position, seen by the opponent of the last mover), ``episode_return`` (player 1's) and
        ``episode_length`` describe the finished one.
        """
        if not self._started:
            raise RuntimeError(f"openspiel env {self.env_id!r}: step() called before reset()")
        e = self.num_envs
        actions, active = check_step_args(f"openspiel env {self.env_id!r}", e, actions, active)
        rows = np.flatnonzero(active)
        for i in rows:  # checked here so the error names the env row, before any row is stepped
            a = int(actions[i])
            if not (0 <= a < self.num_actions) or not self._legal[i, a]:
                raise ValueError(
                    f"openspiel env {self.env_id!r} (env index {i}): action {a} is not legal "
                    f"(num_actions={self.num_actions}, legal={np.flatnonzero(self._legal[i]).tolist()})"
                )
        reward = np.zeros(e, np.float32)
        terminated = np.zeros(e, bool)
        ep_ret = np.zeros(e, np.float32)
        ep_len = np.zeros(e, np.int64)
        final_obs = self._obs.copy()
        if rows.size:
            view = self._sim.step([self._states[i] for i in rows], actions[rows])
            self._obs[rows], self._legal[rows], self._to_play[rows] = view.obs, view.legal, view.to_play
            final_obs[rows], reward[rows], terminated[rows] = view.obs, view.reward, view.terminal
            self._len[rows] += 1
            done = rows[view.terminal]
            if done.size:  # same-step auto-reset: the row moves on to a new game
                ep_ret[done] = [self._sim.player1_return(self._states[i]) for i in done]
                ep_len[done] = self._len[done]
                self._new_games(done)
        return self._batch(reward, terminated, final_obs, ep_ret, ep_len)

    # -- ResumableVectorEnv ----------------------------------------------------------------------

    def state_dict(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """Meta: which env; arrays: the running games' moves (``actions`` [ΣT] int64, ``lengths``
        [E]) and their views (``obs`` [E, *O], ``legal`` [E, A], ``to_play`` [E])."""
        if not self._started:
            raise ValueError(f"openspiel env {self.env_id!r}: state_dict() before reset()")
        moves = [list(state.history()) for state in self._states]
        meta = {"kind": "openspiel", "env_id": self.env_id, "num_envs": self.num_envs}
        arrays = {"actions": np.array([a for m in moves for a in m], np.int64),
                  "lengths": np.array([len(m) for m in moves], np.int64),
                  "obs": self._obs.copy(), "legal": self._legal.copy(), "to_play": self._to_play.copy()}
        return meta, arrays

    def load_state_dict(self, meta: dict[str, Any], arrays: dict[str, np.ndarray]) -> StepBatch:
        """Play every row's saved moves from a new game; the current rows (as :meth:`reset`)."""
        mine = {"kind": "openspiel", "env_id": self.env_id, "num_envs": self.num_envs}
        if {k: meta.get(k) for k in mine} != mine:
            raise ValueError(f"env state {({k: meta.get(k) for k in mine})} does not fit this vector env {mine}")
        self._new_games(np.arange(self.num_envs))
        ends = np.cumsum(arrays["lengths"])
        for i, state in enumerate(self._states):
            for a in arrays["actions"][ends[i] - arrays["lengths"][i]: ends[i]]:
                state.apply_action(int(a))
        view = self._sim.observe(self._states)
        self._obs[:], self._legal[:], self._to_play[:] = view.obs, view.legal, view.to_play
        self._len[:] = arrays["lengths"]
        check_restored(f"openspiel env {self.env_id!r}",
                       {"obs": self._obs, "legal": self._legal, "to_play": self._to_play}, arrays)
        self._started = True
        e = self.num_envs
        return self._batch(np.zeros(e, np.float32), np.zeros(e, bool), self._obs.copy(),
                           np.zeros(e, np.float32), np.zeros(e, np.int64))

    def close(self) -> None:
        self._states = [None] * self.num_envs
