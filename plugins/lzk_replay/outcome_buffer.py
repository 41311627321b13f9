"""The outcome buffer: single positions of whole episodes with the game's outcome as value target
(AlphaZero, SPEC §5.3). No unroll, no bootstrap: a learner batch is K = 0.

For the position at step t of an episode of T moves, with ``r_j`` the reward of move j for its
mover and ``σ(t, j)`` = +1 when the mover at j is the mover at t, −1 otherwise::

    z_t = Σ_{j ≥ t} γ^{j−t} · σ(t, j) · r_j          (backwards: z_t = r_t + γ·σ(t, t+1)·z_{t+1})

so in a two-player game that ends with a win, every position of the winner gets +1 and every
position of the loser −1 (γ = 1); a draw gives 0. An episode cut by a time limit counts as ended
there (no value beyond its last move). The policy target is the stored visit distribution.

With ``root_value_weight`` w > 0 the value target is ``(1 − w)·z_t + w·q_t``, q_t the search's
root value at t (the mover's view, as the collector records it). The outcome of one game is a
single noisy draw of a position's value: a move sampled for exploration late in a won game turns
every earlier position's target to −1; the search's value is the network's current estimate
improved by lookahead, biased but far less noisy. Averaging the two is what Oracle's connect-four
AlphaZero study found to learn fastest ("Lessons from AlphaZero, part 4", 2018; w = 0.5);
w = 0 is the paper's target.

Storage is a FIFO ring of ``capacity`` positions (numpy arrays); sampling is uniform, without
replacement when the batch fits (as LightZero's AlphaZero buffer). ``update_priorities`` accepts
and ignores priorities (uniform replay).

Shapes: C capacity, B batch, A actions, O observation shape.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from lzk_replay.sampling import draw
from lzkernel import Batch, Trajectory

_STATE_VERSION = 1


def outcome_targets(traj: Trajectory, discount: float) -> np.ndarray:
    """z_t [T] float32 of a whole episode (see the module docstring)."""
    T = len(traj)
    z = np.zeros(T, np.float64)
    after = 0.0  # z_{t+1} from the view of the mover at t+1 (0 past the last move)
    for t in range(T - 1, -1, -1):
        sign = 1.0 if traj.to_play[t + 1] == traj.to_play[t] else -1.0
        after = float(traj.rewards[t]) + discount * sign * after
        z[t] = after
    return z.astype(np.float32)


class OutcomeBuffer:
    """Positions with outcome value targets (optionally mixed with the root values), FIFO over
    ``capacity`` positions, uniform sampling."""

    def __init__(self, *, capacity: int, obs_shape: Sequence[int], num_actions: int, discount: float = 1.0,
                 root_value_weight: float = 0.0, obs_dtype: Any = np.float32) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        if not 0.0 <= root_value_weight <= 1.0:
            raise ValueError(f"root_value_weight must be in [0, 1], got {root_value_weight}")
        self.capacity, self.discount = int(capacity), float(discount)
        self.root_value_weight = float(root_value_weight)
        self.obs_shape, self.num_actions = tuple(int(d) for d in obs_shape), int(num_actions)
        c, a = self.capacity, self.num_actions
        self.obs = np.zeros((c, *self.obs_shape), obs_dtype)  # [C, *O]
        self.policy = np.zeros((c, a), np.float32)  # [C, A] visit distributions
        self.value = np.zeros(c, np.float32)  # [C] value targets: z, or (1 − w)·z + w·q
        self.legal = np.zeros((c, a), bool)  # [C, A]
        self.to_play = np.zeros(c, np.int64)  # [C]
        self.ids = np.full(c, -1, np.int64)  # [C] global position id (-1: empty)
        self.next_id = 0  # ids of stored positions are next_id - n ... next_id - 1
        # n: positions stored. Not min(next_id, capacity): a state saved by a smaller buffer
        # holds fewer than that, and the trainer's readiness check reads this count.
        self._stored = 0

    @property
    def num_transitions(self) -> int:
        return self._stored

    def __len__(self) -> int:
        return self.num_transitions

    def push(self, trajectories: Sequence[Trajectory]) -> int:
        """Store every position of the (whole) episodes; the oldest positions beyond ``capacity``
        are overwritten. Returns the positions stored."""
        n = 0
        for traj in trajectories:
            if not traj.ended:
                raise ValueError("the outcome buffer stores whole episodes (their outcome is the value target); "
                                 "collect with the 'episode' or 'versus' collector")
            T = len(traj)
            if traj.obs.shape[1:] != self.obs_shape or traj.visit_dist.shape != (T, self.num_actions):
                raise ValueError(f"trajectory obs {traj.obs.shape[1:]} / visit_dist {traj.visit_dist.shape} do not "
                                 f"match the buffer's {self.obs_shape} / (T, {self.num_actions})")
            z = outcome_targets(traj, self.discount)
            if self.root_value_weight > 0.0:
                w = np.float32(self.root_value_weight)
                z = ((1 - w) * z + w * np.asarray(traj.root_values, np.float32)).astype(np.float32)
            # Only the last `capacity` positions of an oversized push can survive it; the ones
            # before them still take their ids, so that position t keeps id next_id + t and slot
            # id % capacity stays the oldest position's.
            skipped = max(0, T - self.capacity)
            self.next_id += skipped
            for t in range(skipped, T):
                slot = self.next_id % self.capacity
                self.obs[slot], self.policy[slot], self.value[slot] = traj.obs[t], traj.visit_dist[t], z[t]
                self.legal[slot], self.to_play[slot], self.ids[slot] = traj.legal[t], traj.to_play[t], self.next_id
                self.next_id += 1
            self._stored = min(self._stored + T - skipped, self.capacity)
            n += T
        return n

    def sample(self, batch_size: int, rng: np.random.Generator, source: Any = None) -> Batch:
        """A K = 0 batch of ``batch_size`` stored positions (uniform; ``source`` unused: outcome
        targets need no network)."""
        n = self.num_transitions
        if n == 0 or batch_size < 1:
            raise ValueError(f"cannot sample {batch_size} positions from {n}")
        slots, _ = draw((self.ids >= 0).astype(np.float64), batch_size, rng)
        b = slots.shape[0]
        return Batch(obs=self.obs[slots, None].astype(np.float32), actions=np.zeros((b, 0), np.int64),
                     mask=np.ones((b, 1), np.float32), target_reward=np.zeros((b, 0), np.float32),
                     target_value=self.value[slots, None].copy(), target_policy=self.policy[slots, None].copy(),
                     weights=np.ones(b, np.float32), indices=self.ids[slots].copy(),
                     to_play=self.to_play[slots, None].copy(), legal=self.legal[slots, None].copy())

    def update_priorities(self, indices: np.ndarray, priorities: np.ndarray) -> int:
        """Uniform replay: priorities are not used (nothing is written)."""
        return 0

    def stats(self) -> dict[str, float]:
        return {"transitions": float(self.num_transitions)}

    def state_dict(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """Meta and the stored positions, oldest first (their size grows with what is stored)."""
        order = np.argsort(np.where(self.ids >= 0, self.ids, np.iinfo(np.int64).max))[: self.num_transitions]
        meta = {"version": _STATE_VERSION, "next_id": self.next_id, "capacity": self.capacity,
                "obs_shape": list(self.obs_shape), "num_actions": self.num_actions}
        arrays = {"obs": self.obs[order], "policy": self.policy[order], "value": self.value[order],
                  "legal": self.legal[order], "to_play": self.to_play[order], "ids": self.ids[order]}
        return meta, arrays

    def load_state_dict(self, meta: dict[str, Any], arrays: dict[str, np.ndarray]) -> None:
        if meta.get("version") != _STATE_VERSION:
            raise ValueError(f"unknown outcome buffer state version {meta.get('version')!r}")
        if list(meta["obs_shape"]) != list(self.obs_shape) or int(meta["num_actions"]) != self.num_actions:
            raise ValueError("outcome buffer state does not match this buffer's observation shape / action count")
        self.ids[:] = -1
        keep = arrays["ids"][-self.capacity:]  # the newest positions that fit this capacity
        slots = keep % self.capacity
        for name in ("obs", "policy", "value", "legal", "to_play"):
            getattr(self, name)[slots] = arrays[name][-self.capacity:]
        self.ids[slots] = keep
        self.next_id = int(meta["next_id"])
        self._stored = int(keep.shape[0])
