"""``learn_dtype: auto``: bfloat16 exactly where the device multiplies it natively (the machine's
flags are mocked), float32 elsewhere; the choice reaches the learner and the run directory."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from lzk_common import precision
from lzk_common.precision import cpu_flags, cpuinfo_field, native_bf16, resolve_learn_dtype
from lzk_muzero import plugin
from muzero_helpers import small_policy_cfg

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("flags, expected", [
    ((), "float32"),                                                      # unreadable /proc/cpuinfo
    (("sse4_2", "avx2", "fma"), "float32"),                               # AVX2 only
    (("avx2", "avx512f", "avx512bw", "avx512_vnni"), "float32"),          # AVX-512 without BF16
    (("avx2", "avx512f", "avx512_bf16"), "bfloat16"),                     # Cooper Lake, Zen 4
    (("avx2", "avx512f", "amx_tile", "amx_int8"), "float32"),             # AMX without its bf16 unit
    (("avx2", "avx512f", "avx512_bf16", "amx_tile", "amx_bf16"), "bfloat16"),  # Sapphire Rapids
])
def test_auto_picks_bf16_only_on_native_cpus(flags: tuple[str, ...], expected: str) -> None:
    assert resolve_learn_dtype("auto", "cpu", flags) == expected


def test_explicit_choices_pass_through_and_bad_ones_fail() -> None:
    assert resolve_learn_dtype("float32", "cpu", ("amx_bf16",)) == "float32"
    assert resolve_learn_dtype("bfloat16", "cpu", ()) == "bfloat16"
    with pytest.raises(ValueError, match="learn_dtype"):
        resolve_learn_dtype("float16", "cpu", ())


def test_cuda_asks_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
    assert resolve_learn_dtype("auto", "cuda", ()) == "bfloat16"
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: False)
    assert resolve_learn_dtype("auto", "cuda:0", ("amx_bf16",)) == "float32"  # CPU flags do not count


def test_cpu_flags_reads_the_flags_line(tmp_path: Path) -> None:
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nmodel name\t: X\nflags\t\t: fpu avx2 avx512_bf16\n\nprocessor\t: 1\n"
                    "flags\t\t: fpu\n")
    assert cpu_flags(info) == {"fpu", "avx2", "avx512_bf16"}
    assert native_bf16("cpu", cpu_flags(info))
    assert cpu_flags(tmp_path / "missing") == frozenset()


def test_cpuinfo_field_reads_the_first_cpus_value(tmp_path: Path) -> None:
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nvendor_id\t: AuthenticAMD\n\nprocessor\t: 1\nvendor_id\t: Other\n")
    assert cpuinfo_field("vendor_id", info) == "AuthenticAMD"
    assert cpuinfo_field("flags", info) == "" and cpuinfo_field("vendor_id", tmp_path / "missing") == ""
    assert cpuinfo_field("vendor", info) == ""  # whole keys, not prefixes


@pytest.mark.parametrize("machine_flags, dtype", [(frozenset({"avx2"}), None),
                                                  (frozenset({"amx_bf16"}), torch.bfloat16)])
def test_the_default_reaches_the_learner_and_the_run(monkeypatch: pytest.MonkeyPatch,
                                                     machine_flags: frozenset[str], dtype: torch.dtype | None) -> None:
    monkeypatch.setattr(precision, "cpu_flags", lambda *a: machine_flags)
    cfg = small_policy_cfg()
    assert cfg.learn_dtype == "auto"  # the default
    notes: dict[str, str] = {}
    run = SimpleNamespace(device="cpu", rank=0, world_size=1, seed=lambda *keys: 1, comm=None,
                          note=notes.__setitem__)
    (component,) = plugin.lzkernel_register_policies()
    policy = component.factory(cfg, run, env_spec=SimpleNamespace(obs_shape=(4,), num_actions=2))
    assert policy.learner.autocast_dtype is dtype
    assert notes == {"policy.learn_dtype": "float32" if dtype is None else "bfloat16"}


def test_a_run_records_its_choice_in_resolved_json(tmp_path: Path) -> None:
    out = tmp_path / "run"
    proc = subprocess.run(
        [sys.executable, "-m", "lzkernel", "run", str(ROOT / "configs/cartpole_muzero.yaml"), f"run.out_dir={out}",
         "run.max_env_steps=40", "run.progress=false", "run.threads=1", "policy.num_simulations=2",
         "policy.batch_size=8", "collector.envs=1", "collector.n_episode=1", "evaluator.envs=1",
         "evaluator.episodes=1", "update_schedule.updates_per_collect=1", "policy.model.latent_dim=16"],
        capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    expected = resolve_learn_dtype("auto", "cpu")  # this machine's answer
    resolved = json.loads((out / "resolved.json").read_text())
    assert resolved["policy.learn_dtype"] == expected
    assert resolved["run.retain_freed_memory"] is sys.platform.startswith("linux")  # glibc here


def test_bf16_and_float32_steps_agree_on_a_fixed_batch() -> None:
    """The same weights and batch under bfloat16 autocast and in float32: every loss term within
    3% (relative, or 0.02 absolute for terms near 0), and the priorities within 0.05 + 3%. bf16 keeps 8 bits of mantissa, so
    matmul outputs carry ~0.4% relative error; the terms are means over 32 samples and K + 1 steps.
    (Emulated bf16 is slow but exact enough on any CPU; the check is about numbers, not speed.)"""
    from lzk_muzero.policy import MuZeroPolicy
    from muzero_helpers import make_batch, randomize

    def policy(dtype: str) -> MuZeroPolicy:
        torch.manual_seed(0)
        pol = MuZeroPolicy(small_policy_cfg(learn_dtype=dtype, batch_size=32), (4,), 2, seed=0)
        randomize(pol.model, seed=4, std=0.2)
        pol.learner.update_target()
        return pol

    batch = make_batch(32, 3, 2, (4,), seed=5)
    f32, bf16 = policy("float32"), policy("bfloat16")
    assert f32.learner.autocast_dtype is None and bf16.learner.autocast_dtype is torch.bfloat16
    m32, p32 = f32.learn(batch)
    m16, p16 = bf16.learn(batch)
    for key in ("train/loss_total", "train/loss_value", "train/loss_reward", "train/loss_policy",
                "train/loss_ssl", "train/policy_entropy"):
        assert m16[key] == pytest.approx(m32[key], rel=0.03, abs=0.02), key
    assert abs(m32["train/loss_total"] - m16["train/loss_total"]) > 0  # bf16 really ran: not bit-identical
    assert (abs(p16 - p32) <= 0.05 + 0.03 * abs(p32)).all()
