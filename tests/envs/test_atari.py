"""The Atari env (ale-py, LightZero's preprocessing) on Pong."""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("ale_py")

from lzk_envs.atari import AtariEnv, AtariSettings, _area_taps, warp_frame  # noqa: E402
from lzk_envs.plugin import AtariEnvConfig, make_atari_env  # noqa: E402
from lzkernel import ConfigError, EvalVariantEnvSpec, FrameEnvSpec, RenderableEnvSpec, encode_frames  # noqa: E402


@pytest.fixture(scope="module")
def pong():  # noqa: ANN201
    return make_atari_env(AtariEnvConfig(game="pong"))


def test_spec_declares_frames_actions_and_variants(pong) -> None:  # noqa: ANN001
    assert (pong.id, pong.obs_shape, pong.num_actions) == ("atari/pong", (1, 64, 64), 6)
    assert isinstance(pong, FrameEnvSpec) and pong.frame_scale == 255.0
    assert isinstance(pong, EvalVariantEnvSpec) and isinstance(pong, RenderableEnvSpec) and pong.render_fps == 15.0
    ev = pong.eval_variant()
    assert (ev.settings.episode_life, ev.settings.clip_rewards) == (False, False)
    assert (pong.settings.episode_life, pong.settings.clip_rewards) == (True, True)
    rgb = make_atari_env(AtariEnvConfig(game="pong", gray_scale=False, frame_size=96))
    assert rgb.obs_shape == (3, 96, 96)
    full = make_atari_env(AtariEnvConfig(game="pong", full_action_space=True))
    assert full.num_actions == 18
    with pytest.raises(ConfigError, match="env.game"):
        make_atari_env(AtariEnvConfig(game="no_such_game"))


def test_frames_are_uint8_exact_and_seeding_reproduces_episodes(pong) -> None:  # noqa: ANN001
    runs = []
    for _ in range(2):
        venv = pong.make_vector(2, seed=3)
        obs = [venv.reset().obs]
        rng = np.random.default_rng(0)
        for _ in range(50):
            obs.append(venv.step(rng.integers(0, 6, 2)).obs)
        venv.close()
        runs.append(np.stack(obs))
    np.testing.assert_array_equal(runs[0], runs[1])
    assert not np.array_equal(runs[0][:, 0], runs[0][:, 1])  # env i is seeded seed + i
    o = runs[0]
    assert o.dtype == np.float32 and 0.0 <= o.min() and o.max() <= 1.0
    np.testing.assert_array_equal(encode_frames(o, 255.0).astype(np.float32) / np.float32(255), o)


def test_frame_skip_max_pool_clipping_and_time_limit() -> None:
    env = AtariEnv(AtariSettings(game="pong", noop_max=0, max_episode_steps=30))
    env.reset(seed=0)
    f0 = env.ale.getEpisodeFrameNumber()
    rewards = []
    for t in range(30):
        _, r, term, trunc, _ = env.step(0)
        rewards.append(r)
        assert env.ale.getEpisodeFrameNumber() - f0 == 4 * (t + 1)  # 4 raw frames per agent step
    assert trunc and not term  # the time limit counts agent steps
    assert set(rewards) <= {-1.0, 0.0, 1.0}
    # max-pool of the last two raw frames, then the warp
    env.reset(seed=0)
    screens = []
    for _ in range(4):
        screens.append(env.ale_env.step(0)[0])
    env.reset(seed=0)
    obs = env.step(0)[0]
    np.testing.assert_array_equal(obs, warp_frame(np.maximum(screens[2], screens[3]), 64, True) / np.float32(255))


def test_a_reset_mid_game_starts_a_new_game_without_episodic_life() -> None:
    """Evaluation settings (no episodic life): a reset before game over is a fresh game with every
    life and a no-op start, not the old game resumed; with episodic life only a seedless reset
    continues the game (a lost life), and a seeded one starts anew."""
    for life, seed in ((False, None), (True, 1)):
        env = AtariEnv(AtariSettings(game="breakout", episode_life=life))
        env.reset(seed=0)
        full = env.ale.lives()
        for _ in range(40):  # the game is on (not over) after 160 raw frames
            env.step(1)
        assert env.ale.getEpisodeFrameNumber() > 100 and not env.ale.game_over()
        env.reset(seed=seed)
        assert env.ale.lives() == full and env.ale.getEpisodeFrameNumber() <= 30, (life, seed)
    env = AtariEnv(AtariSettings(game="breakout", episode_life=True))
    env.reset(seed=0)
    while not env.step(1)[2]:  # until the first lost life ends the episode
        pass
    frame = env.ale.getEpisodeFrameNumber()
    env.reset()  # seedless with episodic life: the game goes on (one no-op step)
    assert env.ale.getEpisodeFrameNumber() == frame + 4 and env.ale.lives() == full - 1


def test_area_resize_matches_a_dense_area_average() -> None:
    rgb = np.random.default_rng(0).integers(0, 256, (210, 160, 3), dtype=np.uint8)

    def dense(n_in: int, n_out: int) -> np.ndarray:
        edges = np.arange(n_out + 1) * (n_in / n_out)
        j = np.arange(n_in)[None, :]
        return np.clip(np.minimum(edges[1:, None], j + 1) - np.maximum(edges[:-1, None], j), 0, None) / (n_in / n_out)

    gray = rgb.astype(np.float64) @ [0.299, 0.587, 0.114]
    for size in (64, 96):
        ref = np.rint(dense(210, size) @ gray @ dense(160, size).T)
        assert np.abs(ref - warp_frame(rgb, size, True)[0]).max() <= 1
        idx, w = _area_taps(210, size)
        assert np.allclose(w.sum(axis=0), 1.0) and idx.max() < 210
    assert warp_frame(rgb, 64, False).shape == (3, 64, 64)


def test_a_saved_vector_env_replays_its_game_on_fresh_envs() -> None:
    """Lives of one game share the emulator, so a restored Atari env replays everything since
    its seeded first reset (episodes end every 15 steps here) and then steps exactly as the
    original."""
    spec = make_atari_env(AtariEnvConfig(game="pong", frame_size=32, max_episode_steps=15))
    venv, rng = spec.make_vector(2, seed=5), np.random.default_rng(1)
    venv.reset()
    for _ in range(40):
        venv.step(rng.integers(0, 6, 2))
    meta, arrays = venv.state_dict()
    assert meta["replay_from"] == "seed" and arrays["lengths"].tolist() == [40, 40]
    fresh = spec.make_vector(2, seed=5)
    np.testing.assert_array_equal(fresh.load_state_dict(meta, arrays).obs, venv._obs)
    for _ in range(20):
        actions = rng.integers(0, 6, 2)
        a, b = venv.step(actions), fresh.step(actions)
        for name in ("obs", "reward", "terminated", "truncated", "final_obs", "episode_return"):
            np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)


def test_evaluation_reports_raw_scores_of_whole_games() -> None:
    """The evaluator plays the eval variant: a lost life does not end the episode and rewards are
    not clipped, so ``eval/return_mean`` is the game score (Space Invaders: 5–30 points per
    alien); collection ends an episode at the first lost life with clipped rewards."""
    from lzkernel import ActResult
    from lzk_workers.evaluator import EpisodeEvaluator, evaluation_seed
    from lzk_workers.rollout import RandomActor

    spec = make_atari_env(AtariEnvConfig(game="space_invaders", frame_size=16))
    actions: list[int] = []

    class Recorder(RandomActor):
        def act(self, *args, **kwargs) -> ActResult:  # noqa: ANN002, ANN003
            result = super().act(*args, **kwargs)
            actions.extend(int(a) for a in result.action)
            return result

    metrics = EpisodeEvaluator(spec, envs=1, episodes=1, seed=0, every_train_iters=1).evaluate(
        Recorder(np.random.default_rng(0)))
    env = AtariEnv(AtariSettings(game="space_invaders", frame_size=16, episode_life=False, clip_rewards=False))
    env.reset(seed=evaluation_seed(0, 0))
    lives, raw = [env.ale.lives()], []
    for a in actions:
        raw.append(env.step(a)[1])
        lives.append(env.ale.lives())
    assert env.ale.game_over() and lives[0] > 1 and lives[-1] == 0  # one whole game, every life
    assert metrics["eval/episode_length_mean"] == len(actions)
    assert metrics["eval/return_mean"] == sum(raw) > sum(np.sign(raw))  # raw score, not clipped

    venv, rng = spec.make_vector(1, seed=0), np.random.default_rng(0)
    venv.reset()
    while not (b := venv.step(rng.integers(0, spec.num_actions, 1))).terminated[0]:
        assert abs(b.reward[0]) <= 1.0  # collection: clipped
    assert b.episode_length[0] < len(actions)  # collection: the first lost life ends the episode
