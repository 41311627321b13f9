"""RELIABILITY.md test-menu items that no other test proved, part 2: what a checkpoint may hold
and where it may point (E1, E2, E5, E6), disk use (C4), a rank failing in its save (D1). Part 1
(test_fault_menu_gaps.py) holds the env, signal and input items."""
from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import time
from pathlib import Path

import numpy as np
import pytest

from fault_helpers import REPO, assert_one_line_error, fault_env, loop_config, lzk, popen, rehash_manifest


# ---------------------------------------------------------------------------------------------
# E1 / E5: pickles in a checkpoint never run, whatever torch's override switch says
# ---------------------------------------------------------------------------------------------


class _Payload:
    """Unpickling this runs ``touch PATH``."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self) -> tuple:
        return (os.system, (f"touch {self.path}",))


@pytest.mark.parametrize("where", ["arrays.npz object array", "state.pt, TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1"])
def test_e1_a_pickle_payload_in_a_rehashed_checkpoint_never_runs(where: str, finished_copy: tuple[Path, Path, Path],
                                                                  tmp_path: Path) -> None:
    import torch

    cfg, out, step = finished_copy
    sentinel = tmp_path / "SENTINEL"
    env = fault_env()
    if where.startswith("arrays"):
        payload = np.empty(1, dtype=object)
        payload[0] = _Payload(sentinel)
        np.savez(step / "arrays.npz", trace=payload)  # numpy pickles object arrays
        detail = "arrays.npz"
    else:
        torch.save({"trainer": {"param": _Payload(sentinel)}}, step / "state.pt")
        env["TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD"] = "1"  # torch's switch back to full unpickling
        detail = "state.pt cannot be loaded safely (weights_only=True)"
    rehash_manifest(step)  # an attacker who writes the files writes the manifest too
    proc = lzk(["run", cfg, f"run.out_dir={out}", "run.max_train_iters=12", "-p", "lzk_fault_plugin",
                "--resume", str(step)], tmp_path, env)
    assert_one_line_error(proc, f"checkpoint {step} is damaged", detail)
    assert not sentinel.exists()
    # the control: an unrestricted load would have run it
    if where.startswith("arrays"):
        with np.load(step / "arrays.npz", allow_pickle=True) as data:
            data["trace"]
    else:
        torch.load(step / "state.pt", weights_only=False)
    assert sentinel.exists()


def test_e5_no_unsafe_loader_in_the_product_code() -> None:
    """A TOR102-like lint: every torch.load passes weights_only=True, every np.load
    allow_pickle=False; yaml.load only in the audited strict loader; no pickle/marshal loads."""
    bad: list[str] = []
    files = [*(REPO / "lzkernel").rglob("*.py"), *(REPO / "plugins").rglob("*.py")]
    assert len(files) > 50
    for path in files:
        text = path.read_text(encoding="utf-8")
        rel = path.relative_to(REPO)
        for m in re.finditer(r"\b(torch\.load|np\.load|numpy\.load|yaml\.load|yaml\.unsafe_load|pickle\.loads?|"
                             r"marshal\.loads?|dill\.loads?|cloudpickle\.loads?)\(", text):
            call = text[m.start():text.find(")", m.end()) + 1]
            line = text.count("\n", 0, m.start()) + 1
            if text[max(0, m.start() - 2):m.start()].endswith("``"):
                continue  # a docstring naming the call
            fn = m.group(1)
            if fn == "torch.load" and "weights_only=True" in call:
                continue
            if fn in ("np.load", "numpy.load") and "allow_pickle=False" in call:
                continue
            if fn == "yaml.load" and str(rel) == "lzkernel/config/strict_yaml.py" and "StrictLoader" in call:
                continue
            bad.append(f"{rel}:{line}: {call}")
    assert not bad, "\n".join(bad)


# ---------------------------------------------------------------------------------------------
# E2: YAML tags other than python's (an !include) are refused too
# ---------------------------------------------------------------------------------------------


def test_e2_an_include_tag_is_refused_with_file_line_column(tmp_path: Path) -> None:
    from lzkernel import ConfigError
    from lzkernel.config.loader import load_yaml

    other = tmp_path / "other.yaml"
    other.write_text("seed: 1\n")
    p = tmp_path / "cfg.yaml"
    p.write_text("run: !include other.yaml\ntrainer: {name: fault_loop}\n")
    with pytest.raises(ConfigError) as info:
        load_yaml(p)
    assert f"{p}:1:6:" in str(info.value) and "'!include'" in str(info.value)


# ---------------------------------------------------------------------------------------------
# E6: manifest path safety
# ---------------------------------------------------------------------------------------------


def _store_with_one(root: Path):  # noqa: ANN202
    import torch

    from lzkernel.checkpoint import CheckpointStore

    store = CheckpointStore(root, keep_last=3, config_yaml="run: {seed: 1}\n")
    return store, store.save(1, {"p": torch.zeros(2)}), store.save(2, {"p": torch.ones(2)})


@pytest.mark.parametrize("entry", ["../../../outside.txt", "ABSOLUTE", "symlink"])
def test_e6_a_manifest_naming_a_file_outside_or_a_symlink_is_refused(entry: str, tmp_path: Path) -> None:
    """Each case is a checkpoint whose hashes all match: only the path rule refuses it."""
    from lzkernel import CheckpointError
    from lzkernel.checkpoint import load, verify

    store, good, step = _store_with_one(tmp_path / "run" / "ckpt")
    outside = tmp_path / "outside.txt"
    outside.write_text("secret\n")
    manifest = json.loads((step / "manifest.json").read_text())
    if entry == "symlink":
        outside.write_bytes((step / "state.pt").read_bytes())  # same bytes: the hash matches
        (step / "state.pt").unlink()
        (step / "state.pt").symlink_to(outside)
    else:
        name = str(outside) if entry == "ABSOLUTE" else entry
        assert (step / name).resolve() == outside.resolve()
        manifest[name] = hashlib.sha256(outside.read_bytes()).hexdigest()
        (step / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(CheckpointError, match="is not a plain file of the checkpoint"):
        verify(step)
    with pytest.raises(CheckpointError):
        load(step)
    assert store.latest() == good


def test_e6_a_symlinked_step_directory_is_refused(tmp_path: Path) -> None:
    from lzkernel.checkpoint import CheckpointStore

    store, _, good = _store_with_one(tmp_path / "run" / "ckpt")
    _, _, elsewhere = _store_with_one(tmp_path / "elsewhere" / "ckpt")
    (store.root / "step_000000000099").symlink_to(elsewhere)
    assert CheckpointStore(store.root).latest() == good


# ---------------------------------------------------------------------------------------------
# C4: disk use of a real run that checkpoints every iteration
# ---------------------------------------------------------------------------------------------


def test_c4_a_checkpoint_every_iteration_keeps_last_3_and_no_temporaries(tmp_path: Path) -> None:
    out = tmp_path / "out"
    cfg = loop_config(tmp_path / "c.yaml", out, run={"max_train_iters": 60, "checkpoint_every": 1, "keep_last": 3,
                                                     "log_every": 60})
    proc = lzk(["run", cfg, "-p", "lzk_fault_plugin"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    names = sorted(p.name for p in (out / "ckpt").iterdir())
    assert names == [f"step_{i:012d}" for i in (58, 59, 60)], names
    assert all((out / "ckpt" / n / "DONE").is_file() for n in names)
    size = sum(f.stat().st_size for f in (out / "ckpt").rglob("*") if f.is_file())
    one = sum(f.stat().st_size for f in (out / "ckpt" / names[-1]).rglob("*") if f.is_file())
    assert size <= 3 * one + 4096, (size, one)


# ---------------------------------------------------------------------------------------------
# D1: rank 0 raises inside the checkpoint save while rank 1 goes on to the next collective
# ---------------------------------------------------------------------------------------------

_SAVE_RAISE = '''
from lzkernel import Component, hookimpl
from lzk_fault_plugin import FaultLoop, FaultLoopConfig


class SaveRaise(FaultLoop):
    """fault_loop whose rank 0 raises inside its save of iteration 4."""

    def __init__(self, cfg, run):
        super().__init__(cfg, run)
        save = run.save_checkpoint

        def failing_save(*args, **kwargs):
            if run.rank == 0 and run.train_iter == 4:
                raise RuntimeError("injected fault inside the checkpoint save of rank 0")
            return save(*args, **kwargs)

        run.save_checkpoint = failing_save


@hookimpl
def lzkernel_register_trainers():
    return [Component("fault_save_raise", factory=SaveRaise, config=FaultLoopConfig, doc="test only")]
'''


@pytest.mark.distributed
def test_d1_a_rank_raising_inside_the_checkpoint_save_is_named_and_nothing_is_left(tmp_path: Path) -> None:
    import torch

    from fault_helpers import alive, process_tree

    if not (torch.distributed.is_available() and torch.distributed.is_gloo_available()):
        pytest.skip("torch.distributed with gloo is not available")
    mods = tmp_path / "mods"
    mods.mkdir()
    (mods / "lzk_gap_save_raise.py").write_text(_SAVE_RAISE, encoding="utf-8")
    timeout_s = 30.0
    cfg = loop_config(tmp_path / "c.yaml", tmp_path / "out", run={"max_train_iters": 30, "checkpoint_every": 2},
                      trainer={"name": "fault_save_raise"}, comm={"name": "gloo", "timeout_s": timeout_s})
    t0 = time.monotonic()
    proc = popen(["launch", "--nproc", "2", cfg, "-p", "lzk_fault_plugin", "-p", "lzk_gap_save_raise"], tmp_path,
                 fault_env(mods), start_new_session=True)
    pids: set[int] = set()
    try:
        while proc.poll() is None and time.monotonic() - t0 < timeout_s + 30:
            pids.update(process_tree(proc.pid))
            time.sleep(0.1)
        _, err = proc.communicate(timeout=timeout_s + 30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
    seconds = time.monotonic() - t0
    assert proc.returncode == 1, err[-4000:]
    assert seconds < timeout_s + 10, seconds
    last = err.strip().splitlines()[-1]
    assert last.startswith("lzkernel launch: rank 0 exited with code 1") and \
        "injected fault inside the checkpoint save of rank 0" in last, err[-4000:]
    assert len(pids) >= 3 and not alive(sorted(pids))
