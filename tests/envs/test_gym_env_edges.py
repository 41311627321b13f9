"""The gymnasium adapter at its edges: final states without legal actions, envs that raise, and
env ids of the ``module:Id`` form (gymnasium imports the module, which registers the id)."""
from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import gymnasium
import numpy as np
import pytest

from lzkernel import ConfigError
from lzk_envs.gym import EnvError
from lzk_envs.plugin import GymEnvConfig, make_gym_env


class EndMaskEnv(gymnasium.Env):
    """Obs [t, t]; episodes end at step 3, where no action is legal (``info["action_mask"]`` all
    zeros, as games often report a finished position); every action is legal before."""

    observation_space = gymnasium.spaces.Box(-10, 10, (2,), np.float32)
    action_space = gymnasium.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(2, np.float32), {"action_mask": np.array([1, 0], np.int8)}

    def step(self, action):
        self.t += 1
        done = self.t == 3
        mask = np.zeros(2, np.int8) if done else np.ones(2, np.int8)
        return np.full(2, self.t, np.float32), 1.0, done, False, {"action_mask": mask}


class RaisingEnv(gymnasium.Env):
    """Raises ``RuntimeError`` in ``step`` (``where="step"``) or in every unseeded ``reset``
    (``where="reset"``: the auto-reset after its one-step episode)."""

    observation_space = gymnasium.spaces.Box(-10, 10, (2,), np.float32)
    action_space = gymnasium.spaces.Discrete(2)

    def __init__(self, where: str = "step") -> None:
        self.where = where

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        if self.where == "reset" and seed is None:
            raise RuntimeError("physics blew up")
        return np.zeros(2, np.float32), {}

    def step(self, action):
        if self.where == "step":
            raise RuntimeError("physics blew up")
        return np.zeros(2, np.float32), 1.0, True, False, {}


gymnasium.register("LzkTest/EndMask-v0", entry_point=EndMaskEnv, disable_env_checker=True)
gymnasium.register("LzkTest/Raising-v0", entry_point=RaisingEnv, disable_env_checker=True)


def test_a_final_state_may_have_no_legal_action() -> None:
    """The final state's mask is never used (the row already holds the next episode), so an
    all-False one there is no error; the row's mask is the next episode's first one."""
    venv = make_gym_env(GymEnvConfig(id="LzkTest/EndMask-v0"), None).make_vector(2, seed=0)
    assert venv.reset().legal.tolist() == [[True, False]] * 2
    for _ in range(2):
        b = venv.step(np.array([0, 0]))
    assert b.legal.all() and not b.terminated.any()
    b = venv.step(np.array([1, 1]))
    assert b.terminated.all() and b.episode_length.tolist() == [3, 3]
    assert b.final_obs[:, 0].tolist() == [3, 3] and b.legal.tolist() == [[True, False]] * 2
    venv.close()


@pytest.mark.parametrize("where, call", [("step", r", seed 1, step 1 of its episode\) raised RuntimeError in step\(1\)"),
                                         ("reset", r", seed 1, reset after step 1 of its episode\) raised RuntimeError in "
                                                       r"reset\(seed=None\)")])
def test_an_exception_from_the_env_names_the_env_and_its_index(where: str, call: str) -> None:
    venv = make_gym_env(GymEnvConfig(id="LzkTest/Raising-v0", kwargs={"where": where}), None).make_vector(2, seed=0)
    venv.reset()
    with pytest.raises(EnvError, match=rf"'LzkTest/Raising-v0' \(env index 1{call}: physics blew up") as info:
        venv.step(np.array([0, 1]), active=np.array([False, True]))
    assert isinstance(info.value.__cause__, RuntimeError)  # the original, with its traceback
    venv.close()


def test_module_prefixed_ids(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``module:Id`` imports ``module`` (which registers ``Id``) and passes kwargs and the time
    limit through; a module that cannot be imported is a config error naming the id."""
    (tmp_path / "lzk_test_custom_envs.py").write_text(textwrap.dedent("""
        import gymnasium
        import numpy as np

        class Counter(gymnasium.Env):
            observation_space = gymnasium.spaces.Box(-100, 100, (3,), np.float64)
            action_space = gymnasium.spaces.Discrete(4)

            def __init__(self, size=3):
                self.size = size

            def reset(self, *, seed=None, options=None):
                super().reset(seed=seed)
                self.t = 0
                return np.zeros(3), {}

            def step(self, action):
                self.t += 1
                return np.full(3, float(self.t)), 0.5, self.t >= self.size, False, {}

        gymnasium.register("LzkTest/Counter-v0", entry_point=Counter, disable_env_checker=True)
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "lzk_test_custom_envs", raising=False)
    env_id = "lzk_test_custom_envs:LzkTest/Counter-v0"
    spec = make_gym_env(GymEnvConfig(id=env_id, kwargs={"size": 5}), None)
    assert (spec.obs_shape, spec.num_actions) == ((3,), 4)
    venv = spec.make_vector(1, seed=0)
    assert venv.reset().obs.dtype == np.float32
    ends = [venv.step(np.array([3])) for _ in range(5)]
    assert ends[-1].terminated[0] and ends[-1].episode_length[0] == 5 and ends[-1].episode_return[0] == 2.5
    venv = make_gym_env(GymEnvConfig(id=env_id, kwargs={"size": 5}, max_episode_steps=2), None).make_vector(1, 0)
    venv.reset()
    assert [bool(venv.step(np.array([0])).truncated[0]) for _ in range(2)] == [False, True]
    with pytest.raises(ConfigError, match=r"env.id: cannot make gymnasium env 'lzk_no_such_module:Foo-v0'.*"
                                          "lzk_no_such_module"):
        make_gym_env(GymEnvConfig(id="lzk_no_such_module:Foo-v0"), None)


class HugeObsEnv(gymnasium.Env):
    """A finite float64 observation beyond float32's range."""

    observation_space = gymnasium.spaces.Box(-np.inf, np.inf, (2,), np.float64)
    action_space = gymnasium.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.array([1e300, 0.0]), {}

    def step(self, action):
        return np.array([1e300, 0.0]), 0.0, True, False, {}


gymnasium.register("LzkTest/HugeObs-v0", entry_point=HugeObsEnv, disable_env_checker=True)


@pytest.mark.filterwarnings("ignore:overflow encountered in cast:RuntimeWarning")
def test_a_finite_observation_beyond_float32_is_named_as_such() -> None:
    venv = make_gym_env(GymEnvConfig(id="LzkTest/HugeObs-v0"), None).make_vector(1, seed=0)
    with pytest.raises(EnvError, match=r"HugeObs-v0' \(env index 0\) returned a float32-overflowing .*1\.e\+300"):
        venv.reset()
