"""The symmetries of board games (rotations and reflections of the board), as observation and
action permutations (:class:`lzkernel.Symmetry`), for learners that augment their batches.

A game is listed only where its rules, its observation tensor and its action numbering all
respect the symmetry (``tests/envs/test_board_symmetry.py`` checks each by playing transformed
move sequences): tic-tac-toe and go have the board's eight symmetries (go: the pass move is
fixed), connect four its mirror image. Any other game gets the identity only.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from lzkernel import Symmetry

#: Spatial transforms of an array's last two axes (the board): the dihedral group of a square.
_DIHEDRAL: tuple[Callable[[np.ndarray], np.ndarray], ...] = (
    lambda a: a,
    lambda a: np.rot90(a, 1, axes=(-2, -1)),
    lambda a: np.rot90(a, 2, axes=(-2, -1)),
    lambda a: np.rot90(a, 3, axes=(-2, -1)),
    lambda a: np.flip(a, -1),
    lambda a: np.flip(a, -2),
    lambda a: np.swapaxes(a, -1, -2),
    lambda a: np.rot90(np.swapaxes(a, -1, -2), 2, axes=(-2, -1)),
)
_MIRROR = _DIHEDRAL[0], _DIHEDRAL[4]

#: game short name → (board transforms, how actions sit on the board: "cells" (row-major cells,
#: then fixed extra actions such as pass) or "columns" (one action per column)).
_GAMES: dict[str, tuple[tuple[Callable[[np.ndarray], np.ndarray], ...], str]] = {
    "tic_tac_toe": (_DIHEDRAL, "cells"),
    "go": (_DIHEDRAL, "cells"),
    "connect_four": (_MIRROR, "columns"),
}


def board_symmetries(game: Any, obs_shape: tuple[int, ...], num_actions: int) -> tuple[Symmetry, ...]:
    """The symmetries of OpenSpiel ``game`` for observations of ``obs_shape`` ([C, H, W]), the
    identity first; only the identity for games not listed above."""
    identity = Symmetry(np.arange(int(np.prod(obs_shape)), dtype=np.int64), np.arange(num_actions, dtype=np.int64))
    entry = _GAMES.get(game.get_type().short_name)
    if entry is None or len(obs_shape) != 3:
        return (identity,)
    transforms, layout = entry
    h, w = obs_shape[1:]
    obs_base = np.arange(int(np.prod(obs_shape)), dtype=np.int64).reshape(obs_shape)
    out = []
    for f in transforms:
        if layout == "cells":
            cells = np.arange(h * w, dtype=np.int64).reshape(h, w)
            action_index = np.concatenate([f(cells).reshape(-1), np.arange(h * w, num_actions, dtype=np.int64)])
        else:
            action_index = f(np.arange(w, dtype=np.int64)[None, :]).reshape(-1)
        out.append(Symmetry(np.ascontiguousarray(f(obs_base)).reshape(-1), np.ascontiguousarray(action_index)))
    return tuple(out)
