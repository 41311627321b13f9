"""Env restarts (RELIABILITY R5, menu A1): a gymnasium env that raises in reset or step is closed and
made anew up to ``max_restarts`` times in a row, its running episode dropped; past that the error
ends the run naming the env id, index, seed and step."""
from __future__ import annotations

import logging
from typing import Any

import gymnasium
import numpy as np
import pytest

from lzk_envs.gym import EnvError, GymEnvSpec, GymVectorEnv
from lzk_envs.vector import MAX_BACKOFF_S, EnvRestarts
from lzk_workers.rollout import EpisodePlayer

EPISODE = 5  # steps per episode of the flaky env


class FlakyEnv(gymnasium.Env):
    """Obs ``[x, t]``: x drawn from the env's seeded RNG at each reset, t the step of the episode;
    episodes last :data:`EPISODE` steps. Raises in ``step`` at the steps (counted over this env
    object's life, from 1) listed in ``fail_steps``, and in ``reset`` at the resets in ``fail_resets``."""

    observation_space = gymnasium.spaces.Box(-np.inf, np.inf, (2,), np.float32)
    action_space = gymnasium.spaces.Discrete(2)

    def __init__(self, fail_steps: set[int], fail_resets: set[int]) -> None:
        self.fail_steps, self.fail_resets = fail_steps, fail_resets
        self.steps = self.resets = 0
        self.x, self.t = 0.0, 0
        self.closed = False

    def reset(self, *, seed: int | None = None, options: Any = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self.resets += 1
        if self.resets in self.fail_resets:
            raise OSError("injected reset failure")
        self.x, self.t = float(self.np_random.uniform()), 0
        return np.array([self.x, 0.0], np.float32), {}

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict]:
        self.steps += 1
        if self.steps in self.fail_steps:
            raise RuntimeError("injected step failure")
        self.t += 1
        return np.array([self.x, self.t], np.float32), 1.0, self.t == EPISODE, False, {}

    def close(self) -> None:
        self.closed = True


class Maker:
    """``make_env(i)`` for :class:`GymVectorEnv`: env i's n-th object (from 0) gets
    ``plan[(i, n)] = (fail_steps, fail_resets)``; ``broken``: (i, n) whose construction raises."""

    def __init__(self, plan: dict[tuple[int, int], tuple[set[int], set[int]]] | None = None,
                 broken: set[tuple[int, int]] = frozenset()) -> None:  # type: ignore[assignment]
        self.plan, self.broken = plan or {}, broken
        self.made: dict[int, list[FlakyEnv]] = {}

    def __call__(self, i: int) -> FlakyEnv:
        n = len(self.made.setdefault(i, []))
        if (i, n) in self.broken:
            self.made[i].append(None)  # type: ignore[arg-type]
            raise ConnectionError("injected construction failure")
        env = FlakyEnv(*self.plan.get((i, n), (set(), set())))
        self.made[i].append(env)
        return env


def _venv(maker: Maker, max_restarts: int, num_envs: int = 3, seed: int = 10) -> GymVectorEnv:
    return GymVectorEnv("flaky", maker, num_envs, seed, (2,), 2, restarts=EnvRestarts(max_restarts, 0.0))


def _seeded_x(seed: int) -> float:
    env = FlakyEnv(set(), set())
    return float(env.reset(seed=seed)[0][0])


def test_a_raising_step_recreates_the_env_and_marks_its_row(caplog: pytest.LogCaptureFixture) -> None:
    maker = Maker({(1, 0): ({3}, set())})
    venv = _venv(maker, max_restarts=1)
    first = venv.reset()
    assert first.restarted is None
    acts = np.zeros(3, np.int64)
    venv.step(acts), venv.step(acts)
    with caplog.at_level(logging.WARNING, logger="lzkernel"):
        batch = venv.step(acts)  # env 1's third step raises
    assert batch.restarted is not None and batch.restarted.tolist() == [False, True, False]
    assert venv.failures == 1 and len(maker.made[1]) == 2 and maker.made[1][0].closed
    # Row 1 is the new env's first state, from a seed that is not the original seed + 1.
    assert batch.obs[1, 1] == 0.0 and batch.reward[1] == 0.0
    assert not batch.terminated[1] and not batch.truncated[1]
    assert np.array_equal(batch.final_obs[1], batch.obs[1])
    assert batch.obs[1, 0] != first.obs[1, 0]
    # The other rows stepped on.
    assert batch.obs[0, 1] == 3.0 and batch.obs[2, 1] == 3.0 and batch.reward[0] == 1.0
    message = " ".join(r.getMessage() for r in caplog.records)
    assert "'flaky' (env index 1, seed 11, step 3 of its episode) raised RuntimeError" in message, message
    assert "restart 1 of at most 1 in a row" in message and "episode is dropped" in message, message
    # The recreated env steps on normally and ends its episode after EPISODE steps.
    for _ in range(EPISODE - 1):
        assert venv.step(acts).restarted is None
    assert venv.step(acts).terminated[1]


def test_restart_seeds_are_reproducible_and_a_saved_state_replays_from_them() -> None:
    plan = {(0, 0): ({2}, set())}
    a, b = _venv(Maker(plan), 1), _venv(Maker(plan), 1)
    acts = np.zeros(3, np.int64)
    a.reset(), b.reset()
    for _ in range(3):
        ba, bb = a.step(acts), b.step(acts)
        assert np.array_equal(ba.obs, bb.obs)
    meta, arrays = a.state_dict()
    restored = _venv(Maker(), 1).load_state_dict(meta, arrays)  # checks it reaches the saved rows
    assert np.array_equal(restored.obs, ba.obs)
    assert meta["env_seed"][0] != 10 and meta["restarts_of"] == [1, 0, 0]
    assert ba.obs[0, 0] == np.float32(_seeded_x(meta["env_seed"][0]))


def test_restarts_in_a_row_are_bounded_and_the_error_names_env_index_seed_and_step() -> None:
    # Env 0 raises at the first step of its first and of its second object: two in a row.
    maker = Maker({(0, 0): ({1}, set()), (0, 1): ({1}, set())})
    venv = _venv(maker, max_restarts=1, num_envs=1)
    venv.reset()
    assert venv.step(np.zeros(1, np.int64)).restarted.tolist() == [True]
    seed = venv.state_dict()[0]["env_seed"][0]
    with pytest.raises(EnvError) as err:
        venv.step(np.zeros(1, np.int64))
    text = str(err.value)
    assert f"'flaky' (env index 0, seed {seed}, step 1 of its episode) raised RuntimeError in step(0)" in text, text
    assert text.endswith("1 restart in a row did not help (env.max_restarts)"), text
    assert isinstance(err.value.__cause__, RuntimeError)


def test_the_count_in_a_row_starts_again_when_an_episode_ends() -> None:
    # Each env object fails once mid-episode, after its predecessor finished an episode: restarts
    # are never two in a row, so max_restarts=1 carries the env through three failures.
    plan = {(0, n): ({EPISODE + 2}, set()) for n in range(3)}
    venv = _venv(Maker(plan), max_restarts=1, num_envs=1)
    venv.reset()
    restarts = sum(bool(venv.step(np.zeros(1, np.int64)).restarted is not None) for _ in range(3 * (EPISODE + 2)))
    assert restarts == 3 and venv.failures == 3


def test_without_restarts_the_first_error_ends_the_run_as_before() -> None:
    venv = _venv(Maker({(2, 0): ({1}, set())}), max_restarts=0)
    venv.reset()
    with pytest.raises(EnvError) as err:
        venv.step(np.zeros(3, np.int64))
    assert "(env index 2, seed 12, step 1 of its episode)" in str(err.value)
    assert "restart" not in str(err.value)


def test_a_raising_auto_reset_recreates_the_env_and_keeps_the_finished_episode() -> None:
    maker = Maker({(0, 0): (set(), {2})})  # the reset after the first episode raises
    venv = _venv(maker, max_restarts=1, num_envs=1)
    venv.reset()
    for _ in range(EPISODE - 1):
        venv.step(np.zeros(1, np.int64))
    batch = venv.step(np.zeros(1, np.int64))
    assert batch.terminated[0] and batch.episode_length[0] == EPISODE and batch.episode_return[0] == EPISODE
    assert batch.restarted is None  # nothing of a running episode was lost
    assert venv.failures == 1 and batch.obs[0, 1] == 0.0


def test_a_failure_while_recreating_counts_as_one_more_in_a_row() -> None:
    maker = Maker({(0, 0): ({1}, set())}, broken={(0, 1)})
    venv = _venv(maker, max_restarts=2, num_envs=1)
    venv.reset()
    assert venv.step(np.zeros(1, np.int64)).restarted.tolist() == [True]
    assert venv.failures == 2 and len(maker.made[0]) == 3
    # With one restart allowed, the construction failure is the second in a row: the run ends.
    venv = _venv(Maker({(0, 0): ({1}, set())}, broken={(0, 1)}), max_restarts=1, num_envs=1)
    venv.reset()
    with pytest.raises(EnvError, match="ConnectionError while being recreated.*1 restart in a row"):
        venv.step(np.zeros(1, np.int64))


def test_the_wait_doubles_with_each_restart_in_a_row_up_to_the_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    waits: list[float] = []
    monkeypatch.setattr("lzk_envs.gym.time.sleep", waits.append)
    plan = {(0, n): ({1}, set()) for n in range(9)}
    venv = GymVectorEnv("flaky", Maker(plan), 1, 0, (2,), 2, restarts=EnvRestarts(8, 1.5))
    venv.reset()
    for _ in range(8):
        venv.step(np.zeros(1, np.int64))
    assert waits == [min(1.5 * 2 ** k, MAX_BACKOFF_S) for k in range(8)]
    assert waits[-1] == MAX_BACKOFF_S


class _Policy:
    """First action always; records ``reset_envs``."""

    def __init__(self) -> None:
        self.resets: list[list[int]] = []

    def act(self, obs: np.ndarray, legal: np.ndarray, to_play: np.ndarray, **_: Any) -> Any:
        from lzkernel import ActResult

        b = len(obs)
        return ActResult(np.zeros(b, np.int64), np.tile(np.float32([1, 0]), (b, 1)), np.zeros(b, np.float32),
                         np.zeros(b, np.float32), None)

    def reset_envs(self, env_ids: list[int], mode: str) -> None:
        self.resets.append(list(env_ids))


def test_the_player_drops_the_abandoned_episode_and_plays_whole_ones() -> None:
    maker = Maker({(1, 0): ({3}, set())})
    spec = GymEnvSpec(id="flaky", obs_shape=(2,), num_actions=2)
    player = EpisodePlayer(_venv(maker, 1, num_envs=2), spec, 1, mode="collect", record=True)
    policy = _Policy()
    result = player.play(policy, np.array([2, 2]))
    assert result.env_failures == 1
    assert [1] in policy.resets  # the recreated env's search state starts afresh
    assert len(result.episodes) == len(result.pieces) == 4
    for piece in result.pieces:  # every piece is one whole episode from its first state
        assert piece.ended and len(piece.actions) == EPISODE
        assert piece.obs[0][1] == 0.0 and [o[1] for o in piece.obs] == list(range(EPISODE + 1))
    # env steps: 4 whole episodes plus the two steps of the dropped one; the step that raised took none
    assert result.env_steps == 4 * EPISODE + 2


@pytest.mark.parametrize("name, section", [
    ("gymnasium", {"id": "CartPole-v1"}),
    ("atari", {"game": "pong"}),
])
def test_the_config_keys_reach_the_vector_env(name: str, section: dict[str, Any]) -> None:
    """``env.max_restarts`` and ``env.restart_backoff_s`` of both env components that use
    :class:`GymVectorEnv` reach the vector env their spec makes."""
    if name == "atari":
        pytest.importorskip("ale_py")
    from lzkernel.pluginmanager import Kernel

    component = Kernel().registry.get("env", name)
    cfg = component.config(**section, max_restarts=4, restart_backoff_s=0.5)
    venv = component.factory(cfg, None).make_vector(2, 0)
    try:
        assert venv.restarts == EnvRestarts(4, 0.5)
    finally:
        venv.close()
