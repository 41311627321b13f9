"""End to end: every shipped config runs through `lzkernel run` with a tiny budget.

Each run is a real subprocess (the console path users take). The budget is shrunk by overrides
(fewer envs, simulations, updates and a small batch) so the file stays within a minute or two.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = sorted((ROOT / "configs").glob("*.yaml"))

TINY = [
    "run.max_env_steps=400", "run.checkpoint_every=10", "run.log_every=5", "run.progress=false",
    "run.threads=1", "policy.num_simulations=4", "policy.batch_size=32",
    "evaluator.envs=2", "evaluator.every_train_iters=10",
    "evaluator.stop_value=1e9",  # spend the budget even if a tiny run happens to solve CartPole
]
POLICY = {
    # eval_num_simulations: tictactoe_muzero evaluates with 200 (41 evaluations took 30 s of 48)
    "muzero": ["policy.model.latent_dim=32", "policy.model.proj_hidden=64", "policy.model.proj_out=64",
               "policy.model.pred_hidden=32", "policy.model.pred_out=64", "policy.eval_num_simulations=4"],
    "efficientzero": ["policy.model.latent_dim=32", "policy.model.lstm_hidden=16", "policy.model.proj_hidden=64",
                      "policy.model.proj_out=64", "policy.model.pred_hidden=32", "policy.model.pred_out=64",
                      "policy.eval_num_simulations=4"],
    "unizero": ["policy.model.embed_dim=16", "policy.eval_num_simulations=4"],
    "alphazero": ["policy.eval_num_simulations=4", "policy.model.channels=8", "policy.model.num_res_blocks=1"],
}
EVALUATOR = {"episodes": ["evaluator.episodes=2"],
             "versus": ["evaluator.games=1", "evaluator.opponents=[{name: random}]"]}
COLLECTOR = {"episode": ["collector.envs=2", "collector.n_episode=2"],
             "segment": ["collector.envs=2", "collector.num_segments=2", "collector.segment_length=20",
                         "buffer.segment_length=20"]}
SCHEDULE = {"fixed": ["update_schedule.updates_per_collect=10"], "replay_ratio": []}
TRAINER = {"rezero": ["trainer.reanalyze_min_transitions=100"], "muzero": ["trainer.reanalyze_ratio=0.25"],
           "unizero_segment": ["trainer.buffer_reanalyze_freq=1", "trainer.reanalyze_min_transitions=100",
                               "buffer.reanalyze_sequences=8", "update_schedule.ratio=0.05"]}

#: Atari: 60-step episodes of 32×32 frames (a Pong game is ~900 steps; 64×64 learner steps cost 0.4 s).
#: Board games: 5–40-move games, so 10 updates per collect of 2 games would be ~3 updates per env
#: step (tictactoe_muzero spent 10 of its 16 s learning); 3 keep the updates near CartPole's count.
ENV = {"atari": ["env.max_episode_steps=60", "env.frame_size=32", "update_schedule.ratio=0.05"],
       "openspiel": ["update_schedule.updates_per_collect=3"]}


def _overrides(config: Path, out_dir: Path) -> list[str]:
    from lzkernel.config.loader import load_tree

    data, _ = load_tree(config)  # with the sections of the config it extends (base:)
    extra = (POLICY.get(data["policy"]["name"], []) + COLLECTOR.get(data["collector"]["name"], [])
             + SCHEDULE.get(data["update_schedule"]["name"], []) + TRAINER.get(data["trainer"]["name"], [])
             + EVALUATOR.get(data["evaluator"]["name"], []) + ENV.get(data["env"]["name"], []))
    return [f"run.out_dir={out_dir}", *TINY, *extra]


def _run(args: list[str], timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "lzkernel", "run", *args],
                          capture_output=True, text=True, timeout=timeout, cwd=ROOT)


@pytest.mark.parametrize("config", CONFIGS, ids=[c.stem for c in CONFIGS])
def test_config_runs_with_a_tiny_budget_and_resumes(config: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    proc = _run([str(config), *_overrides(config, out)])
    assert proc.returncode == 0, proc.stderr[-3000:]
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    events = {r["event"] for r in records}
    assert {"collect", "train", "eval"} <= events
    for r in records:
        assert {"train_iter", "env_steps", "wall_time"} <= set(r)
    train = [r for r in records if r["event"] == "train"]
    assert train[-1]["train_iter"] > 0 and all(k.startswith(("train/", "time/", "buffer/", "reanalyze/", "search/"))
                                                for k in train[-1] if "/" in k)
    assert any("eval/return_mean" in r for r in records)
    last_env = max(r["env_steps"] for r in records)
    assert last_env >= 400  # the budget was spent
    ckpts = sorted((out / "ckpt").glob("step_*"))
    assert ckpts and (ckpts[-1] / "DONE").is_file()

    # Resume with a larger budget: counters continue from the checkpoint, not from zero.
    saved = json.loads((ckpts[-1] / "meta.json").read_text())
    proc = _run([str(config), *_overrides(config, out), "run.max_env_steps=700", "--resume", "auto"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    resumed = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()][len(records):]
    marker, resumed = resumed[0], resumed[1:]  # the resume record names the checkpoint and its counters
    assert marker["event"] == "resume" and marker["checkpoint"] == str(ckpts[-1])
    assert (marker["train_iter"], marker["env_steps"]) == (saved["train_iter"], saved["env_steps"])
    assert resumed and min(r["train_iter"] for r in resumed) >= saved["train_iter"]
    assert min(r["env_steps"] for r in resumed) > saved["env_steps"]
    assert max(r["env_steps"] for r in resumed) >= 700
