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
from lzk_envs.restarts import MAX_BACKOFF_S, EnvRestarts, pause
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
    assert batch.restarted is not None and batch.restarted.tolist() == [0, 1, 0]
    assert venv.book.failures == 1 and len(maker.made[1]) == 2 and maker.made[1][0].closed
    # Row 1 is the new env's first state, from a seed that is not the original seed + 1.
    assert batch.obs[1, 1] == 0.0 and batch.reward[1] == 0.0
    assert not batch.terminated[1] and not batch.truncated[1]
    assert np.array_equal(batch.final_obs[1], batch.obs[1])
    assert batch.obs[1, 0] != first.obs[1, 0]
    # The other rows stepped on.
    assert batch.obs[0, 1] == 3.0 and batch.obs[2, 1] == 3.0 and batch.reward[0] == 1.0
    message = " ".join(r.getMessage() for r in caplog.records)
    assert "'flaky' (env index 1, seed 11, step 3 of its episode) raised RuntimeError" in message, message
    assert "recreating the env (restart 1 of at most 1 in a row, waiting 0.0 s first)" in message, message
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
    assert meta["env_seed"][0] != 10 and meta["restarts"]["restarts_of"] == [1, 0, 0]
    assert ba.obs[0, 0] == np.float32(_seeded_x(meta["env_seed"][0]))


def test_restarts_in_a_row_are_bounded_and_the_error_names_env_index_seed_and_step() -> None:
    # Env 0 raises at the first step of its first and of its second object: two in a row.
    maker = Maker({(0, 0): ({1}, set()), (0, 1): ({1}, set())})
    venv = _venv(maker, max_restarts=1, num_envs=1)
    venv.reset()
    assert venv.step(np.zeros(1, np.int64)).restarted.tolist() == [1]
    seed = venv.state_dict()[0]["env_seed"][0]
    with pytest.raises(EnvError) as err:
        venv.step(np.zeros(1, np.int64))
    text = str(err.value)
    assert f"'flaky' (env index 0, seed {seed}, step 1 of its episode) raised RuntimeError in step(0)" in text, text
    assert "1 restart in a row did not help (env.max_restarts); the first failure: gymnasium env 'flaky' (env " \
        "index 0, seed 10, step 1 of its episode) raised RuntimeError" in text, text
    assert isinstance(err.value.__cause__, RuntimeError)


def test_the_count_in_a_row_starts_again_when_an_episode_ends() -> None:
    # Each env object fails once mid-episode, after its predecessor finished an episode: restarts
    # are never two in a row, so max_restarts=1 carries the env through three failures.
    plan = {(0, n): ({EPISODE + 2}, set()) for n in range(3)}
    venv = _venv(Maker(plan), max_restarts=1, num_envs=1)
    venv.reset()
    restarts = sum(bool(venv.step(np.zeros(1, np.int64)).restarted is not None) for _ in range(3 * (EPISODE + 2)))
    assert restarts == 3 and venv.book.failures == 3


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
    assert batch.restarted.tolist() == [1]  # counted; the row ended its episode, so nothing was lost
    assert venv.book.failures == 1 and batch.obs[0, 1] == 0.0


def test_a_failure_while_recreating_counts_as_one_more_in_a_row() -> None:
    maker = Maker({(0, 0): ({1}, set())}, broken={(0, 1)})
    venv = _venv(maker, max_restarts=2, num_envs=1)
    venv.reset()
    assert venv.step(np.zeros(1, np.int64)).restarted.tolist() == [2]
    assert venv.book.failures == 2 and len(maker.made[0]) == 3
    # With one restart allowed, the construction failure is the second in a row: the run ends.
    venv = _venv(Maker({(0, 0): ({1}, set())}, broken={(0, 1)}), max_restarts=1, num_envs=1)
    venv.reset()
    with pytest.raises(EnvError, match=r"\(env index 0, seed \d+, a new env\) raised ConnectionError while being made "
                                        "or reset.*1 restart "
                                        "in a row did not help.*the first failure: .*step 1 of its episode"):
        venv.step(np.zeros(1, np.int64))


def test_the_wait_doubles_with_each_restart_in_a_row_up_to_the_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    waits: list[float] = []
    monkeypatch.setattr("lzk_envs.restarts.pause", waits.append)
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


class _LosesEnv1:
    """A vector env over ``venv`` whose env 1 is recreated right before its ``at``-th step call,
    acting or not (as when the env worker holding it is lost, lzk_envs.workers)."""

    def __init__(self, venv: GymVectorEnv, at: int) -> None:
        self.venv, self.at, self.calls, self.num_envs = venv, at, 0, venv.num_envs

    def reset(self) -> Any:
        return self.venv.reset()

    def step(self, actions: np.ndarray, active: np.ndarray | None = None) -> Any:
        self.calls += 1
        if self.calls == self.at:
            self.venv._recreate(1, RuntimeError("lost"), "env 1 lost with its worker")
        return self.venv.step(actions, active)

    def close(self) -> None:
        self.venv.close()


def test_the_player_restarts_an_unstepped_row_that_was_recreated() -> None:
    """Env 1 met its quota and waits while env 0 plays on; then it is recreated: its waiting
    piece is dropped, the policy resets it, and its next episode starts at the new env's state."""
    maker = Maker()
    spec = GymEnvSpec(id="flaky", obs_shape=(2,), num_actions=2)
    venv = _LosesEnv1(_venv(maker, 1, num_envs=2), at=EPISODE + 2)
    player = EpisodePlayer(venv, spec, 1, mode="collect", record=True)
    policy = _Policy()
    result = player.play(policy, np.array([3, 1]))  # env 1 idles from step EPISODE on
    assert result.env_failures == 1 and [1] in policy.resets[1:]
    assert result.env_steps == 4 * EPISODE  # the unstepped row took no step
    new_x = maker.made[1][1].x  # the first state of env 1's new env
    again = player.play(policy, np.array([0, 1]))
    (piece,) = again.pieces
    assert piece.obs[0][0] == np.float32(new_x) and [o[1] for o in piece.obs] == list(range(EPISODE + 1))


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


def test_no_recursion_however_many_restarts_are_allowed() -> None:
    """An env that can never come back, with 3,000 restarts allowed: the loop spends them and ends
    with the env's error, not a RecursionError (Python's default limit is 1,000 frames)."""
    plan = {(0, n): ({1}, set()) if n == 0 else (set(), {1}) for n in range(3002)}  # then every reset raises
    venv = _venv(Maker(plan), max_restarts=3000, num_envs=1)
    venv.reset()
    with pytest.raises(EnvError, match="3000 restarts in a row did not help"):
        venv.step(np.zeros(1, np.int64))
    assert venv.book.failures == 3000


def test_the_backoff_tells_the_stall_watchdog_that_the_run_is_alive(monkeypatch: pytest.MonkeyPatch) -> None:
    from lzk_envs.restarts import PAUSE_SLICE_S

    ticks: list[str] = []
    now = [0.0]

    def sleep(seconds: float) -> None:
        ticks.append(f"sleep {seconds:.2f}")
        now[0] += seconds

    monkeypatch.setattr("lzk_envs.restarts.progressed", lambda: ticks.append("progress"))
    monkeypatch.setattr("lzk_envs.restarts.time.sleep", sleep)
    monkeypatch.setattr("lzk_envs.restarts.time.monotonic", lambda: now[0])
    pause(0.6)
    assert PAUSE_SLICE_S == 0.25
    assert ticks == ["progress", "sleep 0.25", "progress", "sleep 0.25", "progress", "sleep 0.10", "progress"]


def test_a_resumed_run_restarts_where_the_uninterrupted_one_would() -> None:
    """Restart seeds and the count in a row continue across state_dict/load_state_dict: with one
    restart allowed and two failures in a row around the save, both runs end with the error."""
    plan = {(0, 0): ({2}, set()), (0, 1): ({2}, set())}
    straight = _venv(Maker(plan), 1, num_envs=1)
    straight.reset()
    acts = np.zeros(1, np.int64)
    straight.step(acts), straight.step(acts)  # the second step raises: restart 1
    meta, arrays = straight.state_dict()
    resumed = _venv(Maker({(0, 0): ({2}, set())}), 1, num_envs=1)  # the restored env fails as the straight one's
    resumed.load_state_dict(meta, arrays)
    assert resumed.book.state() == straight.book.state()
    for venv in (straight, resumed):
        venv.step(acts)
        with pytest.raises(EnvError, match="1 restart in a row did not help"):
            venv.step(acts)
    # A restart after the resume takes the seed the uninterrupted run took.
    again = {(0, 0): ({2}, set()), (0, 1): ({7}, set())}
    a = _venv(Maker(again), 2, num_envs=1)
    a.reset(), a.step(acts), a.step(acts)
    meta, arrays = a.state_dict()
    b = _venv(Maker({(0, 0): ({7}, set())}), 2, num_envs=1)
    b.load_state_dict(meta, arrays)
    for _ in range(EPISODE + 3):
        assert np.array_equal(a.step(acts).obs, b.step(acts).obs)
    assert a.book.restarts_of == b.book.restarts_of == [2]


def test_the_player_counts_restarts_in_resets_too() -> None:
    """A first reset and an auto-reset that raise are counted in env_failures, and lose no episode."""
    maker = Maker({(0, 0): (set(), {1}), (1, 0): (set(), {2})})  # env 0's first reset, env 1's second
    spec = GymEnvSpec(id="flaky", obs_shape=(2,), num_actions=2)
    player = EpisodePlayer(_venv(maker, 1, num_envs=2), spec, 1, mode="collect", record=True)
    result = player.play(_Policy(), np.array([1, 1]))
    assert result.env_failures == 2
    assert len(result.episodes) == 2 and [len(p.actions) for p in result.pieces] == [EPISODE, EPISODE]
    assert result.env_steps == 2 * EPISODE
    assert player.play(_Policy(), np.array([1, 1])).env_failures == 0  # reported once


def test_segment_play_drops_only_the_running_piece() -> None:
    """play_segments (UniZero's collector): the pieces of the abandoned episode handed out before
    the failure stay handed out (the segment buffer closes them as a truncated episode); the
    piece running at the failure is dropped, and the next starts at the new env's timestep 0."""
    maker = Maker({(0, 0): ({4}, set())})
    spec = GymEnvSpec(id="flaky", obs_shape=(2,), num_actions=2)
    player = EpisodePlayer(_venv(maker, 1, num_envs=1), spec, 1, mode="collect", record=True)
    result = player.play_segments(_Policy(), 2, n_episode=1)
    starts = [(float(p.obs[0][1]), len(p.actions), p.ended) for p in result.pieces]
    # t 0-2 handed out; t 2-3 dropped at the failing 4th step; then the new env's whole episode.
    assert starts == [(0.0, 2, False), (0.0, 2, False), (2.0, 2, False), (4.0, 1, True)], starts
    assert result.env_failures == 1


def test_openings_count_only_the_moves_made_and_reopen_a_recreated_env() -> None:
    from lzk_workers.openings import RandomOpenings

    maker = Maker({(0, 0): ({1}, set())})  # env 0's first opening move raises
    venv = RandomOpenings(_venv(maker, 1, num_envs=2), 3, np.random.default_rng(0))
    batch = venv.reset()
    assert batch.restarted is not None and batch.restarted.tolist() == [1, 0]
    made = sum(env.steps for envs in maker.made.values() for env in envs)
    assert venv.opening_steps == made - 1  # the move that raised was not made
    # Each row sits after its opening: row 0's in the new env (its timestep t = opening moves made there).
    assert batch.obs[0, 1] == maker.made[0][1].steps


def test_video_envs_are_never_restarted() -> None:
    spec = GymEnvSpec.probe("CartPole-v1", restarts=EnvRestarts(3, 0.0))
    assert spec.make_vector(1, 0).restarts == EnvRestarts(3, 0.0)
    video = spec.make_rendering_vector(1, 0, lambda frame, done: None)
    try:
        assert video.restarts == EnvRestarts()  # a recreated env 0 would leave a half episode in the video
    finally:
        video.close()
