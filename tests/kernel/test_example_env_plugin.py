"""The second example of docs/writing-plugins.md: an env plugin written against the Protocols
(tests/fixtures/corridor), loaded with ``-p`` and trained on by the real MuZero policy."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests" / "fixtures" / "corridor"


def test_the_corridor_env_meets_the_vector_env_contract() -> None:
    sys.path.insert(0, str(FIXTURE))
    try:
        import lzkernel_corridor as corridor
    finally:
        sys.path.remove(str(FIXTURE))
    from lzkernel import EnvSpec, VectorEnv

    spec = corridor.make_corridor(corridor.CorridorConfig(length=3, max_steps=4), None)
    assert isinstance(spec, EnvSpec) and spec.obs_shape == (3,) and spec.num_actions == 2
    venv = spec.make_vector(2, seed=0)
    assert isinstance(venv, VectorEnv)
    first = venv.reset()
    assert first.legal[:, 0].tolist() == [False, False]  # no step left out of cell 0
    out = venv.step(np.array([1, 1]))
    out = venv.step(np.array([1, 0]), active=np.array([True, False]))  # env 1 waits
    assert out.terminated.tolist() == [True, False] and out.reward.tolist() == [1.0, 0.0]
    assert out.final_obs[0].tolist() == [0, 0, 1] and out.obs[0].tolist() == [1, 0, 0]  # auto-reset
    assert out.episode_length[0] == 2 and out.obs[1].tolist() == [0, 1, 0]


def test_a_vector_env_that_breaks_the_contract_is_named_where_it_is_made() -> None:
    """A vector env that lacks a VectorEnv member is refused when a player makes it (one line
    naming the spec and the members), and observations of a shape other than the spec's
    obs_shape are refused by the player's frame window, naming the env."""
    import dataclasses

    import pytest

    sys.path.insert(0, str(FIXTURE))
    try:
        import lzkernel_corridor as corridor
    finally:
        sys.path.remove(str(FIXTURE))
    from lzkernel import PluginError, make_checked_vector
    from lzk_workers.rollout import EpisodePlayer

    class Unclosable:  # reset and step, but neither num_envs nor close
        def __init__(self, inner: object) -> None:
            self.reset, self.step = inner.reset, inner.step

    @dataclasses.dataclass
    class BrokenSpec(corridor.CorridorSpec):
        def make_vector(self, num_envs: int, seed: int) -> Unclosable:
            return Unclosable(super().make_vector(num_envs, seed))

    with pytest.raises(PluginError, match=r"env 'corridor-3': .*BrokenSpec\.make_vector returned a Unclosable, which "
                                          r"does not implement VectorEnv: it lacks close, num_envs \(VectorEnv declares"):
        make_checked_vector(BrokenSpec(3, 4), 2, 0)

    @dataclasses.dataclass
    class WiderSpec(corridor.CorridorSpec):  # declares one cell more than its envs observe
        obs_shape = property(lambda self: (self.length + 1,))

    spec = WiderSpec(3, 4)
    player = EpisodePlayer(make_checked_vector(spec, 2, 0), spec, 1, mode="collect", record=True)
    with pytest.raises(ValueError, match=r"env 'corridor-3''s observations have shape \(3,\) where the env spec "
                                         r"declares obs_shape \(4,\)"):
        player.play(None, np.array([1, 1]))


def test_a_muzero_run_on_the_plugin_env(tmp_path: Path) -> None:
    cfg = tmp_path / "corridor.yaml"
    cfg.write_text(
        f"run: {{seed: 0, out_dir: {tmp_path / 'run'}, max_env_steps: 300, threads: 1, progress: false, log_every: 5}}\n"
        "trainer: {name: muzero}\n"
        "env: {name: corridor, length: 4, max_steps: 12}\n"
        "policy: {name: muzero, num_simulations: 4, batch_size: 16, model: {latent_dim: 16, ssl: false}}\n"
        "buffer: {name: game, segment_length: 20}\n"
        "collector: {name: episode, envs: 2, n_episode: 2}\n"
        "evaluator: {name: episodes, envs: 2, episodes: 2, every_train_iters: 10}\n"
        "update_schedule: {name: fixed, updates_per_collect: 5}\n", encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(FIXTURE), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-m", "lzkernel", "run", str(cfg), "-p", "lzkernel_corridor"],
                          capture_output=True, text=True, timeout=300, cwd=ROOT, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert any(r["event"] == "train" for r in records) and any("eval/return_mean" in r for r in records)
    assert max(r["env_steps"] for r in records) >= 300
    # Evaluated without the plugin it was trained with: one line naming the plugin to load.
    proc = subprocess.run([sys.executable, "-m", "lzkernel", "eval", str(tmp_path / "run")],
                          capture_output=True, text=True, timeout=120, cwd=ROOT, env=env)
    assert proc.returncode == 2 and "unknown env 'corridor'" in proc.stderr, proc.stderr[-2000:]
    assert "lzkernel_corridor is not loaded now (add -p lzkernel_corridor); see `lzkernel plugins`" in proc.stderr, proc.stderr[-2000:]
