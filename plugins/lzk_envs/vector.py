"""What every vector env of this plugin checks: the shapes of ``step``'s ``actions`` and ``active``,
and that a restored state reaches the saved observations.

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


def check_restored(who: str, got: dict[str, np.ndarray], saved: dict[str, np.ndarray], first_index: int = 0) -> None:
    """Raise ``ValueError`` unless every array of ``got`` (what replaying a saved env state led
    to) equals the saved one bit for bit: an env that does not come back is not deterministic
    given what was saved, and continuing from it would silently be another run. Row i is env
    ``first_index + i`` (a worker's share) in the message."""
    for name, value in got.items():
        want = np.asarray(saved[name])
        if value.shape != want.shape or value.tobytes() != want.astype(value.dtype, copy=False).tobytes():
            rows = [first_index + i for i in range(min(len(value), len(want))) if value[i].tobytes() != want[i].tobytes()]
            raise ValueError(f"{who}: restoring the saved env state did not reproduce the saved {name} (env "
                             f"indices {rows[:8]}); the env is not deterministic given its seed, RNG and actions")

