"""Components that cannot work together are refused before anything is built: ``lzkernel config``
and ``lzkernel run`` exit 2 with one line per problem naming both components."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "configs"


def _cli(command: str, config: str, *overrides: str, tmp: Path | None = None) -> subprocess.CompletedProcess[str]:
    extra = [f"run.out_dir={tmp / 'run'}"] if tmp is not None else []
    return subprocess.run([sys.executable, "-m", "lzkernel", command, str(CONFIGS / config), *extra, *overrides],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)


@pytest.mark.parametrize(("config", "overrides", "needles"), [
    ("cartpole_unizero.yaml", ["buffer.name=game"],
     ["buffer 'game' needs a policy that provides ObservationValues", "policy 'unizero' provides SequenceValues"]),
    ("cartpole_rezero.yaml", ["buffer.name=unizero", "~buffer.reuse_chain"],
     ["buffer 'unizero' needs a policy that provides SequenceValues", "policy 'muzero' provides ObservationValues"]),
    ("cartpole_rezero.yaml", ["policy.name=unizero", "~policy.model", "~policy.optimizer", "~policy.lr",
                              "~policy.ssl_loss_weight", "~policy.target_update_freq", "~policy.collect_with_pure_policy",
                              "~policy.entropy_loss_weight"],
     ["trainer 'rezero' needs a policy that provides ObservationValues"]),
    ("cartpole_unizero.yaml", ["policy.name=muzero", "~policy.model", "~policy.target_update_theta",
                               "~policy.eval_num_simulations"],
     ["trainer 'unizero_segment' needs a policy that provides SequenceValues"]),
    ("cartpole_rezero.yaml", ["buffer.capacity=100"],
     ["buffer.capacity (100) is smaller than the policy's batch size (256)"]),
    ("cartpole_unizero.yaml", ["collector.segment_length=20"],
     ["collector.segment_length (20) must equal buffer.segment_length (50)"]),
    ("cartpole_rezero.yaml", ["trainer.train_start_transitions=2000000"],
     ["trainer.train_start_transitions (2000000) must be below buffer.capacity (1000000)"]),
    ("cartpole_muzero.yaml", ["~buffer", "~evaluator"],  # every missing section at once, not one per run
     ["trainer 'muzero': missing sections buffer, evaluator: the trainer builds one component of each of"]),
])
def test_incompatible_components_exit_2_naming_both(config: str, overrides: list[str], needles: list[str]) -> None:
    proc = _cli("config", config, *overrides)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "incompatible components" in proc.stderr and "Traceback" not in proc.stderr
    for needle in needles:
        assert needle in proc.stderr, proc.stderr


def test_run_refuses_before_building_anything(tmp_path: Path) -> None:
    proc = _cli("run", "cartpole_unizero.yaml", "buffer.name=game", tmp=tmp_path)
    assert proc.returncode == 2 and "needs a policy that provides ObservationValues" in proc.stderr
    assert not (tmp_path / "run").exists()  # refused before the run directory was made


def test_every_shipped_config_is_compatible() -> None:
    for config in sorted(CONFIGS.glob("*.yaml")):
        proc = _cli("config", config.name)
        assert proc.returncode == 0, (config.name, proc.stderr)
