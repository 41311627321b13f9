"""The segment collector: a number of finished episode pieces per call, envs that never stop.

UniZero's segment collector (SPEC §4.6) returns after a fixed number of game segments and keeps
its envs running across calls. Here it emits :class:`~lzkernel.Trajectory` *pieces* (the replay
buffer cuts and pads the game segments, keeping unfinished tails per env), with LightZero's
defects fixed:

* in-progress pieces, frame windows and timesteps persist across calls (LightZero discards the
  partial segments, losing their transitions and breaking the padding of the previous segment);
* after an episode end the next piece starts at the reset observation (LightZero seeds it from
  the stale terminal observation and its action mask);
* pieces are cut at multiples of ``segment_length`` from the episode start, so a piece that is
  not its episode's last holds exactly one buffer segment;
* ``num_segments`` need not equal the number of envs, and the first call returns after its first
  ``num_segments`` pieces (not after a second round that pads the first).

The periodic KV-cache clearing LightZero drives with ``policy.reset(current_steps=...)`` is the
policy's business here: ``act`` receives each row's episode ``timestep``.
"""
from __future__ import annotations

import numpy as np

from lzkernel import ActingPolicy, EnvSpec, Trajectory
from lzk_workers.collector import CollectorBase


class SegmentCollector(CollectorBase):
    """Plays on ``envs`` persistent envs until ``num_segments`` pieces have finished per call.

    Every env acts at every step. An env's piece finishes when it holds the transitions up to a
    timestep that is a positive multiple of ``segment_length`` (``ended=False``; its ``obs[T]``
    is the next piece's ``obs[0]``) or when its episode ends (``ended=True``, ``terminal`` by the
    env spec's ``truncation_as_terminal`` rule); the next piece then starts at the reset
    observation with timestep 0, and ``policy.reset_envs`` is called for that env.
    """

    def __init__(self, env_spec: EnvSpec, *, envs: int, num_segments: int, segment_length: int, seed: int,
                 frame_stack: int = 1, random_rng: np.random.Generator | None = None, opening_moves: int = 0,
                 opening_rng: np.random.Generator | None = None) -> None:
        if num_segments < 1 or segment_length < 1:
            raise ValueError(f"need num_segments >= 1 and segment_length >= 1, got {num_segments}, {segment_length}")
        super().__init__(env_spec, envs=envs, seed=seed, frame_stack=frame_stack, random_rng=random_rng,
                         opening_moves=opening_moves, opening_rng=opening_rng)
        self.num_segments = num_segments
        self.segment_length = segment_length

    @property
    def pending_transitions(self) -> int:
        """Transitions in the envs' unfinished pieces (returned by a later :meth:`collect`)."""
        return int(self.player.pending_transitions.sum())

    def collect(self, policy: ActingPolicy, *, temperature: float, epsilon: float,
                random_policy: bool = False, n_episode: int | None = None,
                ) -> tuple[list[Trajectory], dict[str, float]]:
        """Play until at least ``num_segments`` pieces have finished in this call (all envs step
        together, so a few more may finish on the last step); the pieces in order of completion
        and the ``collect/...`` (plus the policy's mean ``search/...``) metrics.

        ``random_policy``: act uniformly at random over legal actions instead of ``policy``.
        ``n_episode``: play until that many episodes have ended in this call instead (e.g. a
        random warm-up), returning every piece that finished on the way.
        """
        if n_episode is not None and n_episode < 1:
            raise ValueError(f"n_episode must be >= 1, got {n_episode}")
        n_segments = self.num_segments if n_episode is None else 0
        pieces, metrics = self._play(
            lambda actor: self.player.play_segments(actor, self.segment_length, n_segments=n_segments,
                                                    n_episode=n_episode or 0, temperature=temperature,
                                                    epsilon=epsilon),
            policy, random_policy)
        metrics["collect/segments"] = float(len(pieces))
        return pieces, metrics
