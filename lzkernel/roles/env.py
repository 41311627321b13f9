"""Environments: the vector-env contract collectors and evaluators step, the env spec a policy
is built from, and the simulator contract search with a real environment steps.

Shape letters: E envs, n states, A actions, O observation shape.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Mapping, Protocol, Sequence, runtime_checkable

if TYPE_CHECKING:
    import numpy as np


@dataclass
class StepBatch:
    """What a vector env returns from ``reset`` and ``step``, one row per env.

    Auto-reset happens on the same step: where ``terminated | truncated`` is true, ``obs``,
    ``legal``, ``to_play`` and ``states`` already belong to the *next* episode's first state, and
    ``final_obs`` holds the last observation of the finished episode (elsewhere it equals
    ``obs``). ``reward`` is the reward of the transition just taken (zeros after ``reset``), for
    the player who took it in two-player games.
    """

    obs: np.ndarray  # [E, *O] float32 (two-player games: from the view of the player to move)
    legal: np.ndarray  # [E, A] bool, at least one True per row
    to_play: np.ndarray  # [E] int64: -1 single player, else the player to move (1 or 2)
    reward: np.ndarray  # [E] float32
    terminated: np.ndarray  # [E] bool: the MDP ended (no bootstrap past it)
    truncated: np.ndarray  # [E] bool: cut by a time limit (bootstrap allowed unless configured)
    final_obs: np.ndarray  # [E, *O]
    episode_return: np.ndarray  # [E] float32: return of the episode that just ended (0 elsewhere)
    episode_length: np.ndarray  # [E] int64: its length in steps (0 elsewhere)
    #: [E] simulator states of the rows' current positions (envs that offer a :class:`Simulator`;
    #: None elsewhere). They are the env's own states: read them or ``clone`` them, never step them.
    states: Sequence[Any] | None = None
    #: [E] int64, or None (no env was): times each row's env raised and was recreated during
    #: this call (an env's ``max_restarts``). A row with a count that did not end an episode
    #: abandoned its running episode (the step that raised took no transition): keep none of it
    #: that was not handed on yet. Its ``obs``, ``legal``, ``to_play`` and ``states`` are the new
    #: env's first state; reward 0 and no episode end. (A row that ended its episode and has a
    #: count lost nothing: the env raised while starting the next episode.) An env worker that is
    #: lost restarts all of its envs, so a row left out of ``step``'s ``active`` may have a count.
    restarted: np.ndarray | None = None

    def abandoned(self) -> np.ndarray:
        """[E] bool: the rows whose running episode was abandoned in this call (``restarted``
        without an episode end): what a player drops, and where a new episode starts."""
        import numpy as np

        if self.restarted is None:
            return np.zeros(len(self.reward), bool)
        return (self.restarted > 0) & ~(self.terminated | self.truncated)


@runtime_checkable
class VectorEnv(Protocol):
    """E environments stepped together, with same-step auto-reset."""

    num_envs: int

    def reset(self) -> StepBatch:
        """Reset every env (seeded at the first call) and return the first states."""

    def step(self, actions: np.ndarray, active: np.ndarray | None = None) -> StepBatch:
        """Step the envs with ``actions`` [E] int64 (each legal for its row). ``active`` [E] bool,
        when given, leaves the other rows unstepped (their rows in the result are unchanged and
        their rewards zero, unless ``restarted`` counts them): collectors use it for envs that met
        their episode quota."""

    def close(self) -> None: ...


@runtime_checkable
class ResumableVectorEnv(VectorEnv, Protocol):
    """A vector env whose running episodes can be checkpointed and continued exactly.

    ``state_dict`` after any ``reset``/``step``; ``load_state_dict`` on a fresh vector env made by
    the same spec with the same ``num_envs`` and ``seed`` (before its ``reset``) puts every env
    where the saved one was: the same running episode, the same position in it and the same RNG
    state, so that the same actions give bit-identical ``step`` results. How is the env's choice
    (a snapshot of each env, or its seed or RNG state and the actions since, replayed).
    """

    def state_dict(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """``(meta, arrays)``: plain values (checkpointable with ``torch.load(weights_only=True)``)
        and numpy arrays (no object dtype)."""

    def load_state_dict(self, meta: dict[str, Any], arrays: dict[str, np.ndarray]) -> StepBatch:
        """Continue from a :meth:`state_dict`; returns the current rows as :meth:`reset` does (rewards
        zero, no episode ended). Raises ``ValueError`` when the state does not fit this vector env
        or the env does not come back to the saved observations (it is not deterministic)."""


@runtime_checkable
class RestartingVectorEnv(VectorEnv, Protocol):
    """A vector env that may restart envs outside ``step`` and ``reset``: one whose envs run in
    worker processes replaces a worker it finds lost while saving (``state_dict``).
    :meth:`take_restarts` hands those rows over at once, so that what its caller saves next holds
    them as the caller will go on with them (a resumed run then continues as the saving one)."""

    def take_restarts(self) -> tuple[np.ndarray, StepBatch] | None:
        """The rows restarted outside ``step``/``reset`` since the last call (None: none): their
        env indices [R] and a batch of R rows, their new first states as ``reset`` gives them,
        ``restarted`` counting each row's restarts. The next ``step`` no longer reports them (it
        steps them as any row), and the next ``state_dict`` no longer marks them pending."""


@runtime_checkable
class EnvSpec(Protocol):
    """Built by the ``env`` component: what a policy needs to know and how to make envs."""

    id: str
    obs_shape: tuple[int, ...]
    num_actions: int
    two_player: bool
    #: When true, a time-limit truncation ends the episode like a termination (no bootstrap).
    truncation_as_terminal: bool

    def make_vector(self, num_envs: int, seed: int) -> VectorEnv:
        """``num_envs`` envs; env i is seeded with ``seed + i`` at its first reset."""


def make_checked_vector(spec: EnvSpec, num_envs: int, seed: int) -> VectorEnv:
    """``spec.make_vector(num_envs, seed)``, checked against :class:`VectorEnv`: a vector env
    that lacks a member the players call is a :class:`lzkernel.PluginError` here, naming the
    spec's class and the members, not an AttributeError deep in a collect or an evaluation."""
    from lzkernel.component import missing_members, protocol_members
    from lzkernel.errors import PluginError

    venv = spec.make_vector(num_envs, seed)
    missing = missing_members(venv, VectorEnv)
    if missing:
        if "close" not in missing:  # its worker processes, say, must not outlive the error
            venv.close()
        raise PluginError(f"env {spec.id!r}: {type(spec).__module__}.{type(spec).__name__}.make_vector returned a "
                          f"{type(venv).__name__}, which does not implement VectorEnv: it lacks {', '.join(missing)} "
                          f"(VectorEnv declares {', '.join(protocol_members(VectorEnv))})")
    return venv


# ---------------------------------------------------------------------------------------------
# Simulators: search with a real environment
# ---------------------------------------------------------------------------------------------


@dataclass
class SimulatorStep:
    """The view of n simulator states after :meth:`Simulator.step` (or :meth:`Simulator.observe`).

    ``reward`` is the reward of the transition into the state for the player who moved (zeros
    from ``observe``). At a terminal state ``legal`` is all False and ``obs``/``to_play`` are
    whatever the game reports there: nothing is chosen from it.
    """

    obs: np.ndarray  # [n, *O] float32: the network input, from the view of the player to move
    legal: np.ndarray  # [n, A] bool
    to_play: np.ndarray  # [n] int64: the player to move (1 or 2; -1 for single-player games)
    reward: np.ndarray  # [n] float32
    terminal: np.ndarray  # [n] bool: the game is over at the state


@runtime_checkable
class Simulator(Protocol):
    """A game that search can play forward: clone a state, step states in place, observe them.

    States are opaque handles (an OpenSpiel state, a board array, ...). ``clone`` returns an
    independent copy: stepping the copy never changes the original. Stepping a terminal state
    or with an illegal action is an error.
    """

    num_actions: int
    obs_shape: tuple[int, ...]

    def clone(self, state: Any) -> Any:
        """An independent copy of ``state``."""

    def step(self, states: Sequence[Any], actions: np.ndarray) -> SimulatorStep:
        """Advance each of the n ``states`` in place by its action ``actions`` [n] int64; the
        view of the states reached."""

    def observe(self, states: Sequence[Any]) -> SimulatorStep:
        """The view of n states as they are (rewards zero)."""


@runtime_checkable
class Opponent(Protocol):
    """A fixed player of a two-player game (a bot): one move per state."""

    def act(self, states: Sequence[Any], legal: np.ndarray) -> np.ndarray:
        """Moves [n] int64 for n states (each legal: ``legal`` [n, A] bool), where the opponent is
        the player to move. Seeded at construction; may keep no per-game state."""


@runtime_checkable
class SimulatorEnvSpec(EnvSpec, Protocol):
    """An env spec whose vector envs fill :attr:`StepBatch.states` and whose states a
    :class:`Simulator` can step (board games): what simulator-driven search, two-player
    collectors and evaluators need."""

    #: Names :meth:`make_opponent` accepts for this game (e.g. "random", "mcts", "perfect").
    opponents: tuple[str, ...]

    def make_simulator(self) -> Simulator:
        """A simulator for the states this spec's vector envs report."""

    def make_opponent(self, name: str, params: Mapping[str, Any], seed: int) -> Opponent:
        """Opponent ``name`` (one of :attr:`opponents`) with its ``params`` (e.g. ``{"simulations":
        1000}`` for an MCTS bot), seeded with ``seed``; ConfigError for an unknown name or params."""


@runtime_checkable
class TextGameEnvSpec(SimulatorEnvSpec, Protocol):
    """A board game that a person can play in a terminal (``lzkernel play``): its positions as
    text and its moves by name."""

    def state_text(self, state: Any) -> str:
        """The position ``state`` (one of the simulator's states) drawn as text, e.g. a board."""

    def action_text(self, state: Any, action: int) -> str:
        """Move ``action`` of the player to move in ``state``, named as the game writes it."""


@dataclass(frozen=True)
class Symmetry:
    """A map between equivalent positions of a game (a board's rotation or reflection): the
    position reached by the transformed moves has the transformed observation, and the same value.

    With ``o`` an observation and ``p`` a per-action array (a policy, a legal mask)::

        transformed_o.reshape(-1) = o.reshape(-1)[obs_index]
        transformed_p             = p[action_index]      (move b there is move action_index[b] here)
    """

    obs_index: np.ndarray  # [prod(O)] int64
    action_index: np.ndarray  # [A] int64


@runtime_checkable
class SymmetricEnvSpec(EnvSpec, Protocol):
    """An env spec whose game has symmetries (learners may augment their batches with them)."""

    def symmetries(self) -> tuple[Symmetry, ...]:
        """The game's symmetries, the identity first."""


# ---------------------------------------------------------------------------------------------
# Optional capabilities of env specs: image frames, evaluation variants, rendering
# ---------------------------------------------------------------------------------------------


@runtime_checkable
class FrameEnvSpec(EnvSpec, Protocol):
    """An env spec whose observations are image frames [C, H, W] that quantise exactly to uint8:
    every observation equals ``lzkernel.decode_frames(q, frame_scale)`` (``q / frame_scale`` in
    float32) for a uint8 array q. Replay buffers and collectors then keep frames as uint8 (one
    byte per pixel) and decode with the same formula, so the policy sees bit-identical inputs."""

    #: 255.0: observations in [0, 1] (LightZero's scaled frames); 1.0: the raw 0..255 values.
    frame_scale: float


@runtime_checkable
class EvalVariantEnvSpec(EnvSpec, Protocol):
    """An env spec whose evaluation envs differ from its training envs (Atari: episodic life and
    reward clipping only while collecting). Evaluators play on :meth:`eval_variant`."""

    def eval_variant(self) -> EnvSpec:
        """The spec of evaluation envs (same observation shape and actions)."""


#: ``on_frame(frame [H, W, 3] uint8, episode_ended)``: called after every step of env 0 with the
#: picture of the state the step reached (before any auto-reset).
FrameCallback = Callable[["np.ndarray", bool], None]


@runtime_checkable
class RenderableEnvSpec(EnvSpec, Protocol):
    """An env spec whose envs can draw themselves (``lzkernel eval --video``)."""

    #: Frames per second of a real-time video of one env (agent steps per second).
    render_fps: float

    def make_rendering_vector(self, num_envs: int, seed: int, on_frame: FrameCallback) -> VectorEnv:
        """As :meth:`EnvSpec.make_vector`, with env 0 drawing every state its steps reach into
        ``on_frame``; a ConfigError naming the env and what to install when it cannot draw."""
