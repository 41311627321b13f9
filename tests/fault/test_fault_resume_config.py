"""Issue 15, item 2: a resume compares the current config with the one stored in the checkpoint
before anything is loaded; incompatible changes exit 2 naming the keys (old → new), changes
declared resume-safe resume."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from fault_helpers import CARTPOLE_REZERO, assert_one_line_error, fault_env, loop_config, lzk, read_metrics

# A fresh interpreter runs lzkernel.cli.main(ARGV) and reports whether torch was ever imported:
# "before anything is loaded" means the refusal comes before torch (and the checkpoint).
_PROBE = """
import sys
from lzkernel.cli import main
rc = main(ARGV)
print("PROBE", rc, "torch" in sys.modules)
"""


@pytest.fixture(scope="module")
def rezero_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run directory holding one committed checkpoint of configs/cartpole_rezero.yaml (its
    state is a stand-in: the config check refuses before any state is read)."""
    import torch

    from lzkernel.checkpoint import CheckpointStore
    from lzkernel.config.loader import load_config
    from lzkernel.pluginmanager import Kernel

    out = tmp_path_factory.mktemp("rezero") / "run"
    config = load_config(CARTPOLE_REZERO, [f"run.out_dir={out}"], Kernel().registry)
    CheckpointStore(out / "ckpt", 3, config.to_yaml()).save(
        5, {"trainer": {}, "rng": {}, "counters": {"train_iter": 5, "env_steps": 50}, "x": torch.zeros(1)})
    return out


def _probe(argv: list[str], cwd: Path) -> tuple[subprocess.CompletedProcess[str], int, bool]:
    code = _PROBE.replace("ARGV", repr(argv))
    proc = subprocess.run([sys.executable, "-c", code], env=fault_env(), cwd=cwd, capture_output=True, text=True,
                          timeout=90)
    line = next(line for line in proc.stdout.splitlines() if line.startswith("PROBE "))
    _, rc, torch_loaded = line.split()
    return proc, int(rc), torch_loaded == "True"


CHANGES = {
    "model shape": (["policy.model.latent_dim=64"], ["policy.model.latent_dim: 128 → 64"]),
    "env id": (["env.id=CartPole-v1"], ["env.id: 'CartPole-v0' → 'CartPole-v1'"]),
    # Acrobot has 3 actions to CartPole's 2 (the action count follows from the env id).
    "action count": (["env.id=Acrobot-v1"], ["env.id: 'CartPole-v0' → 'Acrobot-v1'"]),
    "support": (["policy.model.value_support_range=[-10,11,1]"],
                ["policy.model.value_support_range: [-300, 301, 1] → [-10, 11, 1]"]),
    "trainer": (["trainer.name=muzero", "~trainer.buffer_reanalyze_freq", "~trainer.reuse_search",
                 "~trainer.reanalyze_min_transitions"], ["trainer.name: 'rezero' → 'muzero'"]),
    "policy": (["policy.num_simulations=10", "policy.discount=0.99"],
               ["policy.num_simulations: 25 → 10", "policy.discount: 0.997 → 0.99"]),
    "optimizer": (["policy.optimizer=sgd"], ["policy.optimizer: 'adam' → 'sgd'"]),
    "seed": (["run.seed=3"], ["run.seed: 0 → 3"]),
}


@pytest.mark.parametrize("kind", sorted(CHANGES))
def test_incompatible_change_exits_2_before_loading(kind: str, rezero_checkpoint: Path, tmp_path: Path) -> None:
    overrides, needles = CHANGES[kind]
    before = sorted(p.name for p in rezero_checkpoint.rglob("*"))
    argv = ["run", str(CARTPOLE_REZERO), f"run.out_dir={rezero_checkpoint}", "run.max_env_steps=500",
            "--resume", "auto", *overrides]  # overrides after --resume (item 8), and a budget change
    proc, rc, torch_loaded = _probe(argv, tmp_path)
    assert rc == 2, proc.stderr[-3000:]
    message = assert_one_line_error(proc, "--resume: the config differs from the one checkpoint",
                                    "step_000000000005", *needles, code=0)
    assert f"in {len(needles)} key{'s' if len(needles) > 1 else ''} that" in message, message
    assert "run.max_env_steps" not in message  # a budget is not a difference that matters
    assert not torch_loaded, "torch was imported: the refusal came after something was loaded"
    assert sorted(p.name for p in rezero_checkpoint.rglob("*")) == before  # nothing written


def test_declared_resume_safe_keys_of_the_shipped_components() -> None:
    """Evaluator cadence and episodes, the update schedule, budgets and logging are safe;
    the rest of the same sections is not."""
    from lzkernel.config.loader import load_config
    from lzkernel.config.resume_check import incompatible_changes
    from lzkernel.pluginmanager import Kernel

    registry = Kernel().registry
    base = load_config(CARTPOLE_REZERO, [], registry).to_dict()

    def safe(role: str, name: str) -> tuple[str, ...]:
        return registry.get(role, name).resume_safe

    changed = load_config(CARTPOLE_REZERO, [
        "evaluator.every_train_iters=50", "evaluator.episodes=3", "evaluator.stop_value=100", "evaluator.envs=3",
        "update_schedule.updates_per_collect=10", "run.max_env_steps=5", "run.log_every=7", "run.out_dir=elsewhere",
        "run.threads=1", "run.checkpoint_every=9", "run.keep_last=1", "run.progress=false", "run.device=auto",
        "run.save_buffer=false", "comm.name=gloo", "comm.timeout_s=9", "env.max_restarts=3",
        "env.restart_backoff_s=0"], registry).to_dict()
    assert incompatible_changes(base, changed, safe) == []
    # A checkpoint written before the env's restart options existed resumes with them.
    older = {**base, "env": {k: v for k, v in base["env"].items() if k not in ("max_restarts", "restart_backoff_s")}}
    assert incompatible_changes(older, changed, safe) == []
    unsafe = load_config(CARTPOLE_REZERO, ["collector.envs=3", "buffer.capacity=5000", "run.seed=1"],
                         registry).to_dict()
    assert [k for k, _, _ in incompatible_changes(base, unsafe, safe)] == ["buffer.capacity", "collector.envs",
                                                                            "run.seed"]


def test_budget_and_declared_safe_changes_resume(tmp_path: Path) -> None:
    """A run of 5 iterations resumed with other budgets, logging, cadence and a key its trainer
    declares safe, overrides after `--resume auto`: it continues from iteration 5."""
    out = tmp_path / "out"
    cfg = loop_config(tmp_path / "c.yaml", out, run={"max_train_iters": 5})
    proc = lzk(["run", cfg, "-p", "lzk_fault_plugin"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    proc = lzk(["run", cfg, "-p", "lzk_fault_plugin", "--resume", "auto", "run.max_train_iters=9", "run.log_every=2",
                "run.checkpoint_every=3", "run.keep_last=2", "run.progress=true", "trainer.sleep_s=0.01"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "resumed from" in proc.stderr and "step_000000000005" in proc.stderr
    # What the resume changed is listed, so that leaving out the first run's overrides shows.
    assert "resumed with 6 settings changed from the checkpoint's config: run.checkpoint_every: " in proc.stderr
    assert "run.max_train_iters: 5 → 9" in proc.stderr and "trainer.sleep_s: " in proc.stderr
    collects = [r["train_iter"] for r in read_metrics(out) if r["event"] == "collect"]
    assert collects == [1, 2, 3, 4, 5, 6, 7, 8, 9]
    state = json.loads((out / "ckpt" / "step_000000000009" / "meta.json").read_text())
    assert state["train_iter"] == 9

    # ... and the same resume with a key the trainer did not declare safe is refused.
    proc = lzk(["run", cfg, "-p", "lzk_fault_plugin", "--resume", "auto", "run.max_train_iters=12",
                "trainer.lr=0.5"], tmp_path)
    assert_one_line_error(proc, "trainer.lr: 0.1 → 0.5")
