"""Issue 15, item 8: the smaller bad inputs. Each ends with one line naming the file, key, plugin
or path, exit code 2, and no traceback unless ``--traceback`` (or ``LZKERNEL_TRACEBACK=1``)."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fault_helpers import (CARTPOLE_REZERO, TRACEBACK, assert_one_line_error, fault_env, loop_config, lzk,
                           read_metrics, rehash_manifest)

# -- plugins ---------------------------------------------------------------------------------------


@pytest.fixture
def exit_plugin(tmp_path: Path) -> Path:
    """A "distribution" lzk-exit-plugin 1.0 whose entry point ``exiter`` (module ``lzk_exit_mod``)
    writes ``$LZK_SENTINEL`` and calls ``sys.exit(0)`` at import: a directory to put on
    PYTHONPATH (importlib.metadata reads its ``*.dist-info`` as an installed distribution's)."""
    site = tmp_path / "site"
    info = site / "lzk_exit_plugin-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: lzk-exit-plugin\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[lzkernel]\nexiter = lzk_exit_mod\n")
    (site / "lzk_exit_mod.py").write_text(
        "import os, pathlib, sys\npathlib.Path(os.environ['LZK_SENTINEL']).write_text('imported')\nsys.exit(0)\n")
    return site


def test_a_plugin_calling_sys_exit_at_import_is_exit_2(exit_plugin: Path, tmp_path: Path) -> None:
    sentinel = tmp_path / "SENTINEL"
    env = fault_env(exit_plugin, LZK_SENTINEL=str(sentinel))
    cfg = loop_config(tmp_path / "c.yaml", tmp_path / "out")
    for command in (["run", cfg, "-p", "lzk_fault_plugin"], ["config", cfg, "-p", "lzk_fault_plugin"]):
        proc = lzk(command, tmp_path, env)
        assert_one_line_error(proc, "plugin 'exiter' (distribution lzk-exit-plugin 1.0) failed to load",
                              "sys.exit(0)")
        assert sentinel.exists()  # the control: it really was imported (and exited)
    assert not (tmp_path / "out").exists()
    listed = lzk(["plugins"], tmp_path, env)
    assert listed.returncode == 2 and "ERROR plugin 'exiter'" in listed.stdout and TRACEBACK not in listed.stdout
    listed = lzk(["plugins", "--traceback"], tmp_path, env)
    assert listed.returncode == 2 and TRACEBACK in listed.stdout and "SystemExit: 0" in listed.stdout

    # --traceback (or the env variable) adds the traceback; the last line stays the same.
    for extra, more_env in ((["--traceback"], {}), ([], {"LZKERNEL_TRACEBACK": "1"})):
        proc = lzk(["config", cfg, "-p", "lzk_fault_plugin", *extra], tmp_path, {**env, **more_env})
        assert proc.returncode == 2 and TRACEBACK in proc.stderr and "SystemExit: 0" in proc.stderr, proc.stderr
        assert proc.stderr.strip().splitlines()[-1].startswith("lzkernel: error: plugin 'exiter'")


@pytest.mark.parametrize("how", ["-p no:lzk_exit_mod", "-p no:lzk-exit-plugin", "env=True", "env=true", "env=yes",
                                 "env=1", "env=0"])
def test_blocking_by_module_or_distribution_and_the_autoload_switch(how: str, exit_plugin: Path,
                                                                    tmp_path: Path) -> None:
    """`-p no:MODULE` / `-p no:DIST` block the entry point before import; the autoload switch
    accepts True/true/yes like 1 (and 0 leaves autoload on: the control)."""
    sentinel = tmp_path / "SENTINEL"
    env = fault_env(exit_plugin, LZK_SENTINEL=str(sentinel))
    args = ["plugins", "--json"]
    if how.startswith("-p"):
        args += how.split()
    else:
        env["LZKERNEL_DISABLE_PLUGIN_AUTOLOAD"] = how[4:]
    proc = lzk(args, tmp_path, env)
    assert proc.returncode == (2 if how == "env=0" else 0), proc.stderr  # 2: a plugin failed to load
    listed = json.loads(proc.stdout)
    if how == "env=0":
        assert sentinel.exists() and [e["name"] for e in listed["errors"]] == ["exiter"]
        return
    assert not sentinel.exists(), "the blocked plugin was imported"
    assert listed["errors"] == [] and "exiter" not in {e["name"] for e in listed["plugins"]}
    assert listed["autoload"] is how.startswith("-p")


# -- config files ----------------------------------------------------------------------------------


BOMB = "\n".join(["a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
                 + [f"{c}: &{c} [{', '.join([f'*{p}'] * 9)}]" for p, c in zip("abcdefgh", "bcdefghi")]) + "\n"


@pytest.mark.parametrize("kind", ["binary", "latin-1", "duplicate run", "duplicate nested", "alias bomb",
                                  "recursive alias"])
def test_bad_config_files(kind: str, tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    if kind == "binary":
        path.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
        needles = [f"{path}: not a UTF-8 text file (byte 0"]
    elif kind == "latin-1":
        path.write_bytes("run: {out_dir: caf\xe9}\n".encode("latin-1"))
        needles = [f"{path}: not a UTF-8 text file (byte 18"]
    elif kind == "duplicate run":
        path.write_text("run:\n  seed: 1\ntrainer: {name: fault_loop}\nrun:\n  seed: 2\n")
        needles = [f"{path}:4:1: duplicate key 'run' (first given at line 1)"]
    elif kind == "duplicate nested":
        path.write_text("run:\n  seed: 1\n  max_train_iters: 3\n  seed: 2\ntrainer: {name: fault_loop}\n")
        needles = [f"{path}:4:3: duplicate key 'seed' (first given at line 2)"]
    elif kind == "alias bomb":
        assert len(BOMB) < 500
        path.write_text(BOMB)
        needles = [f"{path}: the document expands to more than 100,000 values"]
    else:
        path.write_text("run: &r {seed: [*r]}\n")
        needles = [f"{path}: the document contains itself through an alias"]
    t0 = time.monotonic()
    proc = lzk(["config", path, "-p", "lzk_fault_plugin"], tmp_path)
    assert time.monotonic() - t0 < 20
    assert_one_line_error(proc, *needles)
    if kind == "duplicate run":  # `lzkernel run` too, and nothing is created
        proc = lzk(["run", path, "-p", "lzk_fault_plugin"], tmp_path)
        assert_one_line_error(proc, *needles)


def test_merge_keys_may_override_what_they_merge() -> None:
    """Not a duplicate: `<<: *base` then a key of base (the control of the duplicate check)."""
    from lzkernel.config.strict_yaml import parse

    assert parse("base: &b {x: 1, y: 2}\nrun:\n  <<: *b\n  x: 3\n")["run"] == {"x": 3, "y": 2}


# -- checkpoints -----------------------------------------------------------------------------------


@pytest.mark.parametrize("damage", ["empty manifest", "arrays missing", "arrays missing, manifest rehashed",
                                    "state replaced, manifest rehashed", "arrays not a zip, manifest rehashed"])
def test_a_damaged_committed_checkpoint_is_one_line(damage: str, finished_copy: tuple[Path, Path, Path],
                                                    tmp_path: Path) -> None:
    cfg, out, step = finished_copy
    if damage == "empty manifest":
        (step / "manifest.json").write_text("{}")
        detail = "manifest.json does not list state.pt, config.yaml, meta.json"
    elif damage == "arrays missing":
        (step / "arrays.npz").unlink()
        detail = "missing file arrays.npz"
    elif damage == "arrays missing, manifest rehashed":
        (step / "arrays.npz").unlink()
        rehash_manifest(step)
        detail = "meta.json lists arrays (trace) but there is no arrays.npz"
    elif damage == "state replaced, manifest rehashed":
        import torch

        torch.save({"trainer": {"param": refused_object()}}, step / "state.pt")
        rehash_manifest(step)
        detail = "state.pt cannot be loaded safely (weights_only=True): the unpickler refused it"
    else:
        (step / "arrays.npz").write_bytes(b"PK\x03\x04 not really a zip")
        rehash_manifest(step)
        detail = "arrays.npz cannot be read"
    proc = lzk(["run", cfg, f"run.out_dir={out}", "run.max_train_iters=12", "-p", "lzk_fault_plugin",
                "--resume", str(step)], tmp_path)
    message = assert_one_line_error(proc, f"checkpoint {step} is damaged", detail)
    assert "weights_only=False" not in proc.stderr and "Re-running" not in message
    # --resume auto skips it (with a warning naming it) and resumes from the previous one.
    proc = lzk(["run", cfg, f"run.out_dir={out}", "run.max_train_iters=12", "-p", "lzk_fault_plugin",
                "--resume", "auto"], tmp_path)
    if damage in ("empty manifest", "arrays missing", "arrays missing, manifest rehashed"):
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert "skipping checkpoint" in proc.stderr and "step_000000000005" in proc.stderr
    else:  # the hashes match, so auto picks it: then loading it is the one-line error
        assert_one_line_error(proc, f"checkpoint {step} is damaged", detail)


def refused_object() -> object:
    """An object torch.load(weights_only=True) refuses (not a tensor or plain value)."""
    import fractions

    return fractions.Fraction(1, 3)


# -- run directories that cannot be written, a full disk -------------------------------------------


def _can_mount_tmpfs() -> bool:
    if shutil.which("unshare") is None:
        return False
    probe = subprocess.run(["unshare", "-rm", "sh", "-c", "mount -t tmpfs -o size=64k tmpfs /mnt && touch /mnt/x"],
                           capture_output=True, timeout=30)
    return probe.returncode == 0


TMPFS = pytest.mark.skipif(not _can_mount_tmpfs(), reason="no user+mount namespaces (unshare -rm) here")


def _in_tmpfs(mount: Path, options: str, args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """``lzkernel ARGS`` in a private mount namespace with a tmpfs (``options``) on ``mount``."""
    script = f'mount -t tmpfs -o {options} tmpfs "{mount}" && exec "$@"'
    return subprocess.run(["unshare", "-rm", "sh", "-c", script, "sh", sys.executable, "-m", "lzkernel", *args],
                          env=fault_env(), cwd=str(cwd), capture_output=True, text=True, timeout=120)


@TMPFS
def test_a_read_only_filesystem_is_one_line(tmp_path: Path) -> None:
    mount = tmp_path / "mnt"
    mount.mkdir()
    cfg = loop_config(tmp_path / "c.yaml", mount / "out")
    proc = _in_tmpfs(mount, "ro,size=64k", ["run", str(cfg), "-p", "lzk_fault_plugin"], tmp_path)
    assert_one_line_error(proc, f"run.out_dir '{mount / 'out'}'", "Read-only file system")


@TMPFS
def test_a_full_disk_is_one_line_naming_the_path(tmp_path: Path) -> None:
    """A 96 KiB filesystem fills during the run: whichever file hits ENOSPC first (a checkpoint,
    metrics.jsonl, the TensorBoard events), one line names it; no writer thread crashes."""
    mount = tmp_path / "mnt"
    mount.mkdir()
    cfg = loop_config(tmp_path / "c.yaml", mount / "out", run={"max_train_iters": 100_000, "checkpoint_every": 1,
                                                                "keep_last": 50})
    proc = _in_tmpfs(mount, "size=96k", ["run", str(cfg), "-p", "lzk_fault_plugin"], tmp_path)
    message = assert_one_line_error(proc, "No space left on device", f"run.out_dir '{mount / 'out'}'")
    assert f"cannot write {mount / 'out'}/" in message, message


def test_metrics_on_a_full_device_is_one_line(tmp_path: Path) -> None:
    """metrics.jsonl on /dev/full (every write fails with ENOSPC): needs no privileges."""
    out = tmp_path / "out"
    out.mkdir()
    (out / "metrics.jsonl").symlink_to("/dev/full")
    cfg = loop_config(tmp_path / "c.yaml", out)
    proc = lzk(["run", cfg, "-p", "lzk_fault_plugin"], tmp_path)
    assert_one_line_error(proc, f"cannot write {out / 'metrics.jsonl'}: No space left on device")
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "failed" and summary["exit_code"] == proc.returncode == 2


def test_tensorboard_write_errors_name_the_file_in_the_calling_thread(tmp_path: Path) -> None:
    """The sink writes synchronously: an I/O error is raised by the hook call, naming the file;
    no writer thread exists to crash (or to block the run once its queue is full)."""
    import threading

    from lzk_sinks.tensorboard import EventFile

    before = threading.active_count()
    writer = EventFile(tmp_path / "tb")
    assert threading.active_count() == before
    writer._writer._py_recordio_writer._writer = open("/dev/full", "wb")  # noqa: SIM115 - closed by close()
    writer.scalar("train/loss", 1.0, 1)
    with pytest.raises(OSError) as info:
        writer.flush()
    assert info.value.filename == writer.path and str(tmp_path / "tb") in writer.path


# -- envs ------------------------------------------------------------------------------------------


def test_an_env_whose_observations_are_strings_is_named(tmp_path: Path) -> None:
    proc = lzk(["run", CARTPOLE_REZERO, f"run.out_dir={tmp_path / 'out'}", "env.id=lzk_fault_envs:StringObs-v0",
                "run.threads=1", "run.progress=false", "policy.num_simulations=2", "policy.batch_size=8",
                "policy.model.latent_dim=16", "collector.envs=2", "collector.n_episode=2", "evaluator.envs=1",
                "evaluator.episodes=1"], tmp_path)
    assert_one_line_error(proc, "env.id: gymnasium env 'lzk_fault_envs:StringObs-v0' (env index 0) returned an "
                                "observation of type str", "'abcd'", "numeric arrays of shape (4,)")


def test_a_model_the_env_cannot_feed_is_one_line(tmp_path: Path) -> None:
    """A conv model on CartPole's vector observations fails where the policy builds it: exit 2,
    the key and what was expected, no traceback."""
    proc = lzk(["run", CARTPOLE_REZERO, f"run.out_dir={tmp_path / 'out'}", "policy.model.type=conv",
                "run.progress=false"], tmp_path)
    assert_one_line_error(proc, "policy.model:", "the conv model needs [C, H, W] observations, got (4,)")


def test_a_good_run_still_succeeds_with_every_check_in_place(tmp_path: Path) -> None:
    """The control for this file: the same small config runs, writes, and exits 0."""
    out = tmp_path / "out"
    proc = lzk(["run", loop_config(tmp_path / "c.yaml", out), "-p", "lzk_fault_plugin"], tmp_path)
    assert proc.returncode == 0 and TRACEBACK not in proc.stderr, proc.stderr[-2000:]
    assert [r["train_iter"] for r in read_metrics(out) if r["event"] == "collect"] == list(range(1, 11))
    assert os.path.isdir(out / "tb") and not (out / ".lock").exists()
