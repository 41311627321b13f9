"""The OpenSpiel :class:`~lzkernel.Simulator`: clone, step and observe batches of ``pyspiel.State``.

Search calls :meth:`OpenSpielSimulator.step` once per simulation for all trees, so the loop body
is kept to the pyspiel calls themselves: observations are written by an OpenSpiel observer straight
into a float32 buffer (five times faster than ``state.observation_tensor()``, which builds a Python
list), the legal masks of the whole batch are set with one fancy-index assignment, and the output
arrays are allocated once per call.

Conventions (shared with :class:`lzk_envs.openspiel.OpenSpielVectorEnv`, which steps through this):

* players are OpenSpiel's 0 and 1, reported as ``to_play`` 1 and 2;
* ``reward`` is the reward of the move just made for the player who made it;
* a terminal state is seen from the opponent of the player who made the last move (there is no
  player to move there); its ``legal`` row is all False;
* constant-sum games are shifted to zero-sum: at the end of a game, half the game's utility sum is
  taken off each player's reward, so the players' returns are opposite (what negamax backup needs);
* with ``to_play_plane`` (the default), the observation tensor gets one more leading slice that
  says who moves: [C, *R] becomes [C + 1, *R] (a 1-D tensor [F] becomes [F + 1]), its slice 0 all
  1.0 where ``to_play`` is 1 and all 0.0 where it is 2, terminal states included. Many games'
  tensors (tic-tac-toe, connect four, breakthrough, hex) are the same for both players, so without
  it a value network cannot know whose view it predicts;
* with ``mover_planes`` (a, b), slices a and b of the game's tensor (the two players' pieces) are
  swapped wherever player 2 is to move, so slice a always holds the mover's pieces and b the
  opponent's (AlphaGo Zero's encoding, and LightZero's board envs'): one function of the position
  serves both players instead of two. Tic-tac-toe's pieces are slices (2, 1) for (player 1,
  player 2), connect four's (0, 1).

Shape letters: n states, A actions, O observation shape.
"""
from __future__ import annotations

import itertools
from typing import Any, Sequence

import numpy as np

from lzkernel import SimulatorStep
from lzk_envs.openspiel_game import import_pyspiel


def observation_shape(game: Any, to_play_plane: bool) -> tuple[int, ...]:
    """O: the game's observation tensor shape, with one more leading entry for the to-play plane."""
    shape = tuple(int(d) for d in game.observation_tensor_shape())
    return (shape[0] + 1, *shape[1:]) if to_play_plane else shape


def mover_planes_problem(game: Any, mover_planes: Sequence[int]) -> str | None:
    """Why ``mover_planes`` cannot be used with ``game`` (None: it can): two distinct slices of
    the leading axis of a tensor with at least two axes."""
    shape = tuple(int(d) for d in game.observation_tensor_shape())
    if len(mover_planes) != 2 or len(set(mover_planes)) != 2:
        return f"expected two distinct slice indices [a, b], got {list(mover_planes)}"
    if len(shape) < 2:
        return f"the observation tensor of {str(game)!r} is 1-D {list(shape)}: it has no slices to swap"
    if not all(0 <= int(i) < shape[0] for i in mover_planes):
        return f"slice indices must lie in [0, {shape[0]}) for the tensor {list(shape)} of {str(game)!r}"
    return None


class OpenSpielSimulator:
    """A :class:`~lzkernel.Simulator` for the states of one ``pyspiel.Game``."""

    def __init__(self, game: Any, to_play_plane: bool = True, mover_planes: Sequence[int] = ()) -> None:
        pyspiel = import_pyspiel()
        from open_spiel.python.observation import make_observation

        self.game = game
        self.num_actions: int = game.num_distinct_actions()
        self.obs_shape: tuple[int, ...] = observation_shape(game, to_play_plane)
        # entries of the leading to-play slice in a flat observation (prod of the trailing axes;
        # 1 for a 1-D tensor); 0: no plane
        self._plane = int(np.prod(self.obs_shape[1:])) if to_play_plane else 0
        if mover_planes:
            problem = mover_planes_problem(game, mover_planes)
            if problem:
                raise ValueError(f"openspiel mover_planes: {problem}")
        self._mover_planes: tuple[int, ...] = tuple(int(i) for i in mover_planes)
        self._tensor_shape = tuple(int(d) for d in game.observation_tensor_shape())
        self._spiel_error = pyspiel.SpielError
        observer = make_observation(game)
        self._set_obs = observer.set_from  # writes the observation of (state, player) into _obs_buf
        self._obs_buf: np.ndarray = observer.tensor  # [prod(O)] float32, owned by the observer
        constant_sum = game.get_type().utility == pyspiel.GameType.Utility.CONSTANT_SUM
        self._shift = game.utility_sum() / 2 if constant_sum else 0.0

    # -- states ----------------------------------------------------------------------------------

    def new_state(self) -> Any:
        """The game's initial state."""
        return self.game.new_initial_state()

    def clone(self, state: Any) -> Any:
        """An independent copy of ``state``."""
        return state.clone()

    def player1_return(self, state: Any) -> float:
        """The return of player 1 (OpenSpiel's player 0) of the game ``state`` is in, zero-sum."""
        return state.player_return(0) - (self._shift if state.is_terminal() else 0.0)

    # -- Simulator -------------------------------------------------------------------------------

    def _empty(self, n: int) -> SimulatorStep:
        return SimulatorStep(
            obs=np.empty((n, *self.obs_shape), np.float32),
            legal=np.zeros((n, self.num_actions), bool),
            to_play=np.empty(n, np.int64),
            reward=np.zeros(n, np.float32),
            terminal=np.zeros(n, bool),
        )

    def _illegal(self, i: int, state: Any, action: int) -> ValueError:
        where = f"openspiel simulator {str(self.game)!r} (state {i})"
        if state.is_terminal():
            return ValueError(f"{where}: cannot step a terminal state (action {action})")
        return ValueError(f"{where}: action {action} is not legal (num_actions={self.num_actions}, "
                          f"legal={state.legal_actions()})")

    def step(self, states: Sequence[Any], actions: np.ndarray) -> SimulatorStep:
        """Advance each of the n ``states`` in place by ``actions`` [n] int; the view of the
        states reached (``reward`` for the mover). ValueError for an illegal action or a terminal
        state (the states before it in the batch have been stepped)."""
        n = len(states)
        actions = np.asarray(actions)
        if actions.shape != (n,) or not np.issubdtype(actions.dtype, np.integer):
            raise ValueError(f"openspiel simulator {str(self.game)!r}: actions must be an integer array of "
                             f"shape ({n},), got {actions.dtype} {actions.shape}")
        view = self._empty(n)
        obs, reward, terminal, to_play = view.obs.reshape(n, -1), view.reward, view.terminal, view.to_play
        moves: list[list[int]] = []  # legal actions of each reached state ([] at terminals)
        set_obs, buf, error, plane = self._set_obs, self._obs_buf, self._spiel_error, self._plane
        for i, (state, action) in enumerate(zip(states, actions.tolist())):
            mover = state.current_player()
            try:
                state.apply_action_with_legality_check(action)
            except error:
                raise self._illegal(i, state, action) from None
            if state.is_terminal():
                terminal[i] = True
                reward[i] = state.player_reward(mover) - self._shift
                player = 1 - mover
                moves.append([])
            else:
                reward[i] = state.player_reward(mover)
                player = state.current_player()
                moves.append(state.legal_actions())
            set_obs(state, player)
            obs[i, plane:] = buf
            to_play[i] = player + 1
        self._finish_obs(obs, to_play)
        self._set_legal(view.legal, moves)
        return view

    def observe(self, states: Sequence[Any]) -> SimulatorStep:
        """The view of n states as they are (rewards zero)."""
        n = len(states)
        view = self._empty(n)
        obs = view.obs.reshape(n, -1)
        moves: list[list[int]] = []
        for i, state in enumerate(states):
            if state.is_terminal():  # seen by the opponent of the last mover, as in step()
                view.terminal[i] = True
                player = 1 - state.full_history()[-1].player
                moves.append([])
            else:
                player = state.current_player()
                moves.append(state.legal_actions())
            self._set_obs(state, player)
            obs[i, self._plane:] = self._obs_buf
            view.to_play[i] = player + 1
        self._finish_obs(obs, view.to_play)
        self._set_legal(view.legal, moves)
        return view

    def _finish_obs(self, obs: np.ndarray, to_play: np.ndarray) -> None:
        """Complete the flat observations ``obs`` [n, prod(O)], which hold the game's tensors after
        the to-play slice: the leading slice 1.0 where ``to_play`` [n] is player 1, else 0.0
        (without the plane: nothing); with ``mover_planes`` (a, b), slices a and b swapped in the
        rows where player 2 moves."""
        if self._plane:
            obs[:, : self._plane] = (to_play == 1)[:, None]
        if self._mover_planes:
            second = np.flatnonzero(to_play == 2)
            if second.size:
                tensors = obs[:, self._plane:].reshape(len(obs), self._tensor_shape[0], -1)  # a view
                a, b = self._mover_planes
                tensors[second, a], tensors[second, b] = tensors[second, b], tensors[second, a]

    @staticmethod
    def _set_legal(legal: np.ndarray, moves: list[list[int]]) -> None:
        """``legal`` [n, A] (all False) gets True at row i, columns ``moves[i]``: one assignment."""
        counts = np.fromiter(map(len, moves), np.int64, len(moves))
        cols = np.fromiter(itertools.chain.from_iterable(moves), np.int64, int(counts.sum()))
        legal[np.repeat(np.arange(len(moves)), counts), cols] = True
