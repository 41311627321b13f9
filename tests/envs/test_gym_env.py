"""The gymnasium adapter: spec, seeding, same-step auto-reset, masks and error messages."""
from __future__ import annotations

import gymnasium
import numpy as np
import pytest

from lzkernel import ConfigError, EnvSpec, VectorEnv
from lzkernel.config.schema import validate
from lzk_envs.gym import EnvError, GymEnvSpec
from lzk_envs.plugin import GymEnvConfig, make_gym_env


class MaskedToyEnv(gymnasium.Env):
    """Obs [t, 0]; action t % 3 is illegal at step t (``info["action_mask"]``); episodes end at
    step 4. ``bad`` = "obs" / "reward" puts a NaN there at step 2."""

    def __init__(self, bad: str = "") -> None:
        self.observation_space = gymnasium.spaces.Box(-10, 10, (2,), np.float64)
        self.action_space = gymnasium.spaces.Discrete(3)
        self.bad = bad
        self.t = 0

    def _info(self) -> dict:
        mask = np.ones(3, np.int8)
        mask[self.t % 3] = 0
        return {"action_mask": mask}

    def _obs(self) -> np.ndarray:
        return np.array([np.nan if self.bad == "obs" and self.t == 2 else self.t, 0.0])

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self._obs(), self._info()

    def step(self, action):
        self.t += 1
        reward = np.nan if self.bad == "reward" and self.t == 2 else 1.0
        return self._obs(), reward, self.t == 4, False, self._info()


gymnasium.register("LzkTest/MaskedToy-v0", entry_point=MaskedToyEnv, disable_env_checker=True)


@pytest.fixture(scope="module")
def cartpole() -> GymEnvSpec:
    return make_gym_env(GymEnvConfig(id="CartPole-v0"), None)


def test_cartpole_spec(cartpole: GymEnvSpec) -> None:
    assert isinstance(cartpole, EnvSpec)
    assert (cartpole.id, cartpole.obs_shape, cartpole.num_actions) == ("CartPole-v0", (4,), 2)
    assert not cartpole.two_player and cartpole.truncation_as_terminal
    venv = cartpole.make_vector(2, seed=3)
    assert isinstance(venv, VectorEnv) and venv.num_envs == 2
    b = venv.reset()
    assert b.obs.shape == (2, 4) and b.obs.dtype == np.float32 and b.legal.all()
    assert b.legal.shape == (2, 2) and (b.to_play == -1).all() and not b.terminated.any()
    venv.close()


def play(spec: GymEnvSpec, seed: int, actions: np.ndarray) -> list[np.ndarray]:
    venv = spec.make_vector(3, seed)
    out = [venv.reset().obs]
    for a in actions:
        b = venv.step(a)
        out += [b.obs, b.final_obs, b.reward, b.terminated]
    venv.close()
    return out


def test_seeding_is_reproducible_and_per_env(cartpole: GymEnvSpec) -> None:
    actions = np.random.default_rng(0).integers(0, 2, size=(60, 3))
    first, again, other = play(cartpole, 7, actions), play(cartpole, 7, actions), play(cartpole, 8, actions)
    assert all((x == y).all() for x, y in zip(first, again))
    assert not (first[0] == other[0]).all()
    assert not (first[0][0] == first[0][1]).all()  # env i gets seed + i: the envs differ
    # env 1 of seed 7 is seeded like env 0 of seed 8
    assert (first[0][1] == other[0][0]).all()
    # only the first reset is seeded: the next episode of an env starts elsewhere
    venv = cartpole.make_vector(1, seed=7)
    assert not (venv.reset().obs == venv.reset().obs).all()


def test_same_step_autoreset_and_truncation(cartpole: GymEnvSpec) -> None:
    """Balance CartPole-v0 for its 200-step limit: the truncation comes with the final obs and
    the episode's return and length, and the row already holds the next episode."""
    venv = cartpole.make_vector(1, seed=0)
    b = venv.reset()
    for step in range(1, 201):
        obs = b.obs
        a = np.array([int(obs[0, 2] + 0.5 * obs[0, 3] > 0)])  # a pole-balancing controller
        b = venv.step(a)
        if step < 200:
            assert not (b.terminated | b.truncated).any(), f"fell at step {step}"
            assert (b.final_obs == b.obs).all() and b.episode_return[0] == 0
    assert b.truncated[0] and not b.terminated[0]
    assert b.episode_return[0] == 200.0 and b.episode_length[0] == 200
    assert not (b.final_obs == b.obs).all()
    assert np.abs(b.obs).max() <= 0.05  # CartPole's reset state: the next episode started
    b = venv.step(np.array([0]))
    assert b.episode_return[0] == 0 and b.reward[0] == 1.0
    venv.close()


def test_termination_reports_episode(cartpole: GymEnvSpec) -> None:
    venv = cartpole.make_vector(2, seed=1)
    venv.reset()
    steps = 0
    while True:
        b = venv.step(np.array([0, 0]))  # always push left: falls within a few dozen steps
        steps += 1
        if b.terminated.any():
            break
    i = int(np.flatnonzero(b.terminated)[0])
    assert b.episode_length[i] == steps and b.episode_return[i] == steps
    assert abs(b.final_obs[i, 2]) > 0.2095 or abs(b.final_obs[i, 0]) > 2.4
    venv.close()


def test_max_episode_steps_override_and_bootstrap_flag() -> None:
    spec = make_gym_env(GymEnvConfig(id="CartPole-v1", max_episode_steps=3, truncation_as_terminal=False), None)
    assert not spec.truncation_as_terminal
    venv = spec.make_vector(1, seed=0)
    venv.reset()
    flags = [venv.step(np.array([i % 2])).truncated[0] for i in range(3)]
    assert flags == [False, False, True]


@pytest.mark.parametrize("env_id, space", [("Pendulum-v1", "Box"), ("MountainCarContinuous-v0", "Box")])
def test_continuous_action_space_is_a_config_error(env_id: str, space: str) -> None:
    with pytest.raises(ConfigError, match=f"{env_id}.*action space {space}"):
        make_gym_env(GymEnvConfig(id=env_id), None)


def test_unknown_id_and_bad_kwargs_are_config_errors() -> None:
    with pytest.raises(ConfigError, match="CartPol-v0"):
        make_gym_env(GymEnvConfig(id="CartPol-v0"), None)
    with pytest.raises(ConfigError, match="bogus"):
        make_gym_env(GymEnvConfig(id="CartPole-v1", kwargs={"bogus": 1}), None)
    with pytest.raises(ConfigError, match="observation space Discrete"):
        make_gym_env(GymEnvConfig(id="FrozenLake-v1"), None)


def test_config_schema() -> None:
    cfg, problems = validate(GymEnvConfig, {"id": "CartPole-v0"}, "env")
    assert problems == [] and cfg.kwargs == {} and cfg.truncation_as_terminal and cfg.max_episode_steps is None
    _, problems = validate(GymEnvConfig, {"max_episode_steps": 0}, "env")
    assert any("env.id" in p for p in problems) and any("max_episode_steps" in p for p in problems)


def test_action_mask_from_info_and_illegal_actions() -> None:
    spec = make_gym_env(GymEnvConfig(id="LzkTest/MaskedToy-v0"), None)
    venv = spec.make_vector(2, seed=0)
    b = venv.reset()
    assert b.obs.dtype == np.float32
    assert b.legal.tolist() == [[False, True, True]] * 2
    b = venv.step(np.array([1, 2]))
    assert b.legal.tolist() == [[True, False, True]] * 2
    with pytest.raises(ValueError, match=r"MaskedToy-v0.*env index 1.*action 1 is not legal"):
        venv.step(np.array([0, 1]))
    with pytest.raises(ValueError, match=r"env index 0.*action 3"):
        venv.step(np.array([3, 0]))
    with pytest.raises(ValueError, match="shape"):
        venv.step(np.array([0]))
    venv.close()


def test_inactive_rows_are_not_stepped() -> None:
    venv = make_gym_env(GymEnvConfig(id="LzkTest/MaskedToy-v0"), None).make_vector(2, seed=0)
    venv.reset()
    b = venv.step(np.array([1, 1]), active=np.array([True, False]))
    assert b.obs[:, 0].tolist() == [1, 0] and b.reward.tolist() == [1, 0]
    for _ in range(3):  # env 0 finishes its 4-step episode, env 1 stays put
        b = venv.step(np.array([2, 1]) if b.obs[0, 0] % 3 == 1 else np.array([1, 1]),
                      active=np.array([True, False]))
    assert b.terminated.tolist() == [True, False] and b.episode_length.tolist() == [4, 0]
    assert b.final_obs[:, 0].tolist() == [4, 0] and b.obs[:, 0].tolist() == [0, 0]


@pytest.mark.parametrize("bad", ["obs", "reward"])
def test_non_finite_values_name_env_and_index(bad: str) -> None:
    venv = make_gym_env(GymEnvConfig(id="LzkTest/MaskedToy-v0", kwargs={"bad": bad}), None).make_vector(2, seed=0)
    venv.reset()
    venv.step(np.array([1, 1]))
    with pytest.raises(EnvError, match=rf"LzkTest/MaskedToy-v0.*env index 0.*non-finite {bad}"):
        venv.step(np.array([2, 2]))


def test_step_before_reset() -> None:
    venv = make_gym_env(GymEnvConfig(id="LzkTest/MaskedToy-v0"), None).make_vector(1, seed=0)
    with pytest.raises(RuntimeError, match="before reset"):
        venv.step(np.array([1]))


# ---------------------------------------------------------------------------------------------
# ResumableVectorEnv: a saved state continues exactly on fresh envs
# ---------------------------------------------------------------------------------------------


def _step_both(a, b, rng: np.random.Generator, steps: int) -> None:  # noqa: ANN001 - two vector envs
    """Step ``a`` and ``b`` with the same random legal actions (some rows inactive); every field
    of every batch must agree bit for bit."""
    for _ in range(steps):
        legal = a._legal
        actions = np.array([rng.choice(np.flatnonzero(row)) for row in legal], np.int64)
        active = rng.random(a.num_envs) < 0.8
        ba, bb = a.step(actions, active), b.step(actions, active)
        for name in ("obs", "legal", "reward", "terminated", "truncated", "final_obs", "episode_return",
                     "episode_length"):
            np.testing.assert_array_equal(getattr(ba, name), getattr(bb, name), err_msg=name)


@pytest.mark.parametrize("replay_from", ["episode", "seed"])
def test_vector_env_state_continues_exactly_on_fresh_envs(replay_from: str) -> None:
    import json

    from lzkernel import ResumableVectorEnv
    from lzk_envs.gym import GymVectorEnv

    def make() -> GymVectorEnv:
        return GymVectorEnv("CartPole-v1", lambda i: gymnasium.make("CartPole-v1"), 3, 7, (4,), 2,
                            replay_from=replay_from)

    rng = np.random.default_rng(0)
    env = make()
    assert isinstance(env, ResumableVectorEnv)
    env.reset()
    for _ in range(60):  # several episodes per env (auto-reset), so replays start mid-stream
        env.step(np.array([rng.integers(2) for _ in range(3)]), rng.random(3) < 0.8)
    meta, arrays = env.state_dict()
    meta = json.loads(json.dumps(meta))  # plain values only
    fresh = make()
    batch = fresh.load_state_dict(meta, {k: v.copy() for k, v in arrays.items()})
    np.testing.assert_array_equal(batch.obs, env._obs)
    assert not batch.terminated.any() and not batch.reward.any()
    _step_both(env, fresh, rng, 200)
    with pytest.raises(ValueError, match="does not fit"):
        GymVectorEnv("CartPole-v1", lambda i: gymnasium.make("CartPole-v1"), 3, 8, (4,), 2,
                     replay_from=replay_from).load_state_dict(meta, arrays)


class GlobalRngEnv(MaskedToyEnv):
    """Draws its start from numpy's global RNG, not ``np_random``: replaying cannot restore it."""

    def reset(self, *, seed=None, options=None):
        obs, info = super().reset(seed=seed, options=options)
        obs[1] = np.random.random()
        return obs, info


def test_an_env_that_does_not_come_back_is_named_on_restore() -> None:
    from lzk_envs.gym import GymVectorEnv

    env = GymVectorEnv("toy", lambda i: GlobalRngEnv(), 2, 0, (2,), 3)
    env.reset()
    meta, arrays = env.state_dict()
    with pytest.raises(ValueError, match="toy.*did not reproduce the saved obs.*not deterministic"):
        GymVectorEnv("toy", lambda i: GlobalRngEnv(), 2, 0, (2,), 3).load_state_dict(meta, arrays)


class WarningToyEnv(MaskedToyEnv):
    """MaskedToyEnv whose constructor warns (a warning of the env's own, not gymnasium's notice)."""

    def __init__(self) -> None:
        import warnings

        warnings.warn("toy env: deprecated keyword", UserWarning)
        super().__init__()


gymnasium.register("LzkTest/WarningToy-v0", entry_point=WarningToyEnv, disable_env_checker=True)


def test_an_outdated_id_is_one_log_line_and_other_warnings_pass(monkeypatch: pytest.MonkeyPatch,
                                                                 caplog: pytest.LogCaptureFixture) -> None:
    """CartPole-v0 (used on purpose) makes gymnasium warn that v1 exists at every env made: it
    becomes one log line per id and process; an env's own warnings still reach the caller."""
    import logging
    import warnings

    from lzk_envs import gym as gym_adapter

    monkeypatch.setattr(gym_adapter, "_OUTDATED_NOTED", set())
    caplog.set_level(logging.INFO, logger="lzkernel")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        spec = make_gym_env(GymEnvConfig(id="CartPole-v0"), None)
        spec.make_vector(2, seed=0).close()
        spec.make_vector(1, seed=1).close()
        make_gym_env(GymEnvConfig(id="LzkTest/WarningToy-v0"), None)
    assert [str(w.message) for w in caught if "out of date" in str(w.message)] == []
    assert [str(w.message) for w in caught if issubclass(w.category, UserWarning)] == ["toy env: deprecated keyword"]
    notes = [r.getMessage() for r in caplog.records if "newer version" in r.getMessage()]
    assert notes == ["env.id CartPole-v0: gymnasium has a newer version of this env (v1); using CartPole-v0 as configured"]
    # The caller's filters still decide about every other warning: "ignore" hides the env's own.
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        warnings.filterwarnings("ignore", message="toy env")
        make_gym_env(GymEnvConfig(id="LzkTest/WarningToy-v0"), None)
    assert [str(w.message) for w in caught if "toy env" in str(w.message)] == []
