"""What every vector env of this plugin checks on ``step``: the shapes of ``actions`` and ``active``.

Shape letters: E envs.
"""
from __future__ import annotations

import numpy as np


def check_step_args(who: str, num_envs: int, actions: np.ndarray,
                    active: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """``actions`` [E] integer and ``active`` [E] bool (all True when None), checked.

    ``who`` names the env in the error (e.g. ``gymnasium env 'CartPole-v0'``). Raises
    ``ValueError`` for a wrong shape or a non-integer action array.
    """
    actions = np.asarray(actions)
    if actions.shape != (num_envs,) or not np.issubdtype(actions.dtype, np.integer):
        raise ValueError(
            f"{who}: actions must be an integer array of shape ({num_envs},), got {actions.dtype} {actions.shape}"
        )
    active = np.ones(num_envs, bool) if active is None else np.asarray(active, bool)
    if active.shape != (num_envs,):
        raise ValueError(f"{who}: active must have shape ({num_envs},), got {active.shape}")
    return actions, active
