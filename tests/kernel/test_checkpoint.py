"""Crash-consistent checkpoints: commit protocol, `latest`, rotation, the `best` slot and safe
loading (RELIABILITY.md R2, S1; menu A5-A7, C4, E1)."""
from __future__ import annotations

import errno
import json
import logging
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from lzkernel import CheckpointError  # noqa: E402
from lzkernel.checkpoint import DONE, CheckpointStore, load, verify  # noqa: E402

CONFIG_YAML = "run: {seed: 7}\ntrainer: {name: demo_counter, lr: 0.03}\n"


def _state(step: int) -> dict:
    return {"param": torch.full((3,), float(step)), "step": step, "name": f"s{step}", "nested": {"xs": [1, 2.5, None]}}


def _store(root: Path, keep_last: int = 3) -> CheckpointStore:
    return CheckpointStore(root, keep_last=keep_last, config_yaml=CONFIG_YAML)


def _entries(root: Path) -> list[str]:
    return sorted(p.name for p in root.iterdir())


def _step(step: int) -> str:
    return f"step_{step:012d}"


class Crash(Exception):
    """Stands in for a kill in the middle of a save."""


def _crash(tmp: Path) -> None:
    assert tmp.name.startswith(".") and (tmp / "manifest.json").is_file()  # fully written, not yet renamed
    raise Crash(str(tmp))


# ---------------------------------------------------------------------------------------------
# Layout and round trip
# ---------------------------------------------------------------------------------------------


def test_save_load_round_trip_and_layout(tmp_path: Path) -> None:
    store = _store(tmp_path / "ckpt")
    arrays = {"obs": np.arange(12, dtype=np.float32).reshape(3, 4), "prio": np.ones(3)}
    path = store.save(5, _state(5), arrays, meta={"train_iter": 5})
    assert path == tmp_path / "ckpt" / _step(5)
    assert _entries(path) == sorted(["state.pt", "arrays.npz", "config.yaml", "meta.json", "manifest.json", DONE])
    manifest = json.loads((path / "manifest.json").read_text())
    assert sorted(manifest) == ["arrays.npz", "config.yaml", "meta.json", "state.pt"]
    state, loaded, meta = load(path)
    assert torch.equal(state["param"], torch.full((3,), 5.0))
    assert state["step"] == 5 and state["name"] == "s5" and state["nested"] == {"xs": [1, 2.5, None]}
    assert np.array_equal(loaded["obs"], arrays["obs"]) and loaded["obs"].dtype == np.float32
    assert meta["step"] == 5 and meta["train_iter"] == 5 and meta["format"] == 1
    assert store.latest() == path
    assert _entries(tmp_path / "ckpt") == [_step(5)]  # no temporaries


def test_resolved_config_is_inside_each_checkpoint(tmp_path: Path) -> None:
    store = _store(tmp_path / "ckpt")
    for step in (1, 2):
        path = store.save(step, _state(step))
        assert (path / "config.yaml").read_text() == CONFIG_YAML
    best = store.save(2, _state(2), tag="best")
    assert (best / "config.yaml").read_text() == CONFIG_YAML


def test_latest_is_none_for_an_empty_or_missing_store(tmp_path: Path) -> None:
    assert CheckpointStore(tmp_path / "nothing").latest() is None
    (tmp_path / "empty").mkdir()
    assert CheckpointStore(tmp_path / "empty").latest() is None


# ---------------------------------------------------------------------------------------------
# Interrupted or damaged checkpoints are never `latest`
# ---------------------------------------------------------------------------------------------


def test_crash_before_commit_leaves_previous_latest(tmp_path: Path) -> None:
    store = _store(tmp_path / "ckpt")
    good = store.save(10, _state(10))
    store.before_commit = _crash
    with pytest.raises(Crash):
        store.save(20, _state(20))
    assert store.latest() == good
    assert _entries(tmp_path / "ckpt") == [_step(10)]  # the temporary directory is gone
    state, _, _ = load(store.latest())
    assert state["step"] == 10


def test_killed_save_leaves_tmp_dir_that_is_ignored_and_cleaned(tmp_path: Path) -> None:
    """A kill -9 leaves ``.step_X.tmp-PID`` behind (no exception handler runs)."""
    store = _store(tmp_path / "ckpt")
    good = store.save(10, _state(10))
    partial = tmp_path / "ckpt" / f".{_step(20)}.tmp-99999"
    shutil.copytree(good, partial)
    (partial / DONE).unlink()
    (partial / "state.pt").write_bytes((partial / "state.pt").read_bytes()[:50])  # torn write
    assert store.latest() == good
    store.save(11, _state(11))
    assert _entries(tmp_path / "ckpt") == [_step(10), _step(11)]  # cleaned on the next save


def test_step_dir_without_done_is_never_latest(tmp_path: Path) -> None:
    """A kill after the rename but before DONE: the directory has every file but no marker."""
    store = _store(tmp_path / "ckpt")
    good = store.save(10, _state(10))
    killed = tmp_path / "ckpt" / _step(20)
    shutil.copytree(good, killed)
    (killed / DONE).unlink()
    assert store.complete_steps() == [good]
    assert store.latest() == good
    with pytest.raises(CheckpointError, match="incomplete"):
        load(killed)
    # the next save garbage-collects the incomplete directory once a newer one commits
    store.save(30, _state(30))
    assert _entries(tmp_path / "ckpt") == [_step(10), _step(30)]


@pytest.mark.parametrize("damage", ["flip-byte", "truncate", "delete-file", "delete-manifest", "garbage-manifest"])
def test_corrupt_checkpoint_is_skipped_with_a_warning(tmp_path: Path, damage: str,
                                                      caplog: pytest.LogCaptureFixture) -> None:
    store = _store(tmp_path / "ckpt")
    good = store.save(10, _state(10))
    bad = store.save(20, _state(20), {"a": np.zeros(100)})
    if damage == "flip-byte":
        data = bytearray((bad / "state.pt").read_bytes())
        data[len(data) // 2] ^= 0xFF
        (bad / "state.pt").write_bytes(bytes(data))
    elif damage == "truncate":
        (bad / "arrays.npz").write_bytes((bad / "arrays.npz").read_bytes()[:100])
    elif damage == "delete-file":
        (bad / "state.pt").unlink()
    elif damage == "delete-manifest":
        (bad / "manifest.json").unlink()
    else:
        (bad / "manifest.json").write_text("{not json")
    assert store.complete_steps() == [good, bad]  # it still has DONE ...
    with caplog.at_level(logging.WARNING, logger="lzkernel.checkpoint"):
        assert store.latest() == good  # ... but fails its check
    assert any("skipping checkpoint" in r.getMessage() and bad.name in r.getMessage() for r in caplog.records)
    with pytest.raises(CheckpointError):
        verify(bad)
    with pytest.raises(CheckpointError):
        load(bad)
    state, _, _ = load(store.latest())
    assert state["step"] == 10


def test_no_checkpoint_loads_when_all_are_damaged(tmp_path: Path) -> None:
    store = _store(tmp_path / "ckpt")
    path = store.save(1, _state(1))
    (path / "meta.json").write_text("{}")
    assert store.latest() is None
    with pytest.raises(CheckpointError, match="meta.json does not match its hash"):
        load(path)
    with pytest.raises(CheckpointError, match="not a checkpoint directory"):
        verify(tmp_path / "missing")


# ---------------------------------------------------------------------------------------------
# Rotation
# ---------------------------------------------------------------------------------------------


def test_keep_last_rotation(tmp_path: Path) -> None:
    root = tmp_path / "ckpt"
    store = _store(root, keep_last=3)
    for step in range(1, 21):
        store.save(step, _state(step))
        assert len(store.complete_steps()) == min(step, 3)
    assert _entries(root) == [_step(18), _step(19), _step(20)]  # exactly 3, no temporaries
    assert all((root / _step(s) / DONE).is_file() for s in (18, 19, 20))
    assert store.latest() == root / _step(20)
    assert load(store.latest())[0]["step"] == 20


def test_rotation_never_deletes_when_the_new_save_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "ckpt"
    store = _store(root, keep_last=3)
    for step in (1, 2, 3):
        store.save(step, _state(step))
    before = _entries(root)
    store.before_commit = _crash
    with pytest.raises(Crash):
        store.save(4, _state(4))
    assert _entries(root) == before
    store.before_commit = None

    # a disk-full error while writing a file (A7)
    real_save = torch.save

    def full_disk(obj, f, *a, **k):  # noqa: ANN001, ANN002, ANN003, ANN202
        real_save(obj, f, *a, **k)
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(torch, "save", full_disk)
    with pytest.raises(OSError, match="No space left"):
        store.save(5, _state(5))
    monkeypatch.undo()
    assert _entries(root) == before
    assert [load(root / name)[0]["step"] for name in before] == [1, 2, 3]


def test_rotation_keeps_more_when_asked(tmp_path: Path) -> None:
    store = _store(tmp_path / "ckpt", keep_last=5)
    for step in range(0, 40, 5):
        store.save(step, _state(step))
    assert [p.name for p in store.complete_steps()] == [_step(s) for s in (15, 20, 25, 30, 35)]


# ---------------------------------------------------------------------------------------------
# The `best` slot
# ---------------------------------------------------------------------------------------------


def test_best_slot_is_replaced_and_survives_rotation(tmp_path: Path) -> None:
    root = tmp_path / "ckpt"
    store = _store(root, keep_last=2)
    store.save(1, _state(1))
    best = store.save(1, _state(1), tag="best")
    assert best == root / "best"
    for step in range(2, 8):
        store.save(step, _state(step))
        if step == 4:
            store.save(4, _state(4), tag="best")
    assert _entries(root) == ["best", _step(6), _step(7)]  # no `.best.old-*` left behind
    state, _, meta = load(root / "best")
    assert state["step"] == 4 and meta["tag"] == "best"
    assert store.latest() == root / _step(7)  # `best` is never a step


def test_failed_best_replacement_keeps_the_old_best(tmp_path: Path) -> None:
    root = tmp_path / "ckpt"
    store = _store(root)
    store.save(1, _state(1), tag="best")
    store.before_commit = _crash
    with pytest.raises(Crash):
        store.save(2, _state(2), tag="best")
    assert _entries(root) == ["best"]
    assert load(root / "best")[0]["step"] == 1


@pytest.mark.parametrize("fail_at", ["rename", "done"])
def test_best_survives_a_failure_in_the_middle_of_the_swap(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                           fail_at: str) -> None:
    """The swap is two renames plus DONE; an I/O error between them must not lose the old best."""
    import lzkernel.checkpoint as ckpt

    root = tmp_path / "ckpt"
    store = _store(root)
    store.save(1, _state(1), tag="best")
    real_replace, real_open = os.replace, open
    calls = []

    def flaky_replace(src, dst):  # noqa: ANN001, ANN202
        calls.append((Path(src).name, Path(dst).name))
        if fail_at == "rename" and Path(src).name.startswith(".best.tmp-"):
            raise OSError(errno.EIO, "I/O error")
        return real_replace(src, dst)

    def flaky_open(file, mode="r", *a, **k):  # noqa: ANN001, ANN002, ANN003, ANN202
        if fail_at == "done" and Path(file).name == DONE and "w" in mode:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_open(file, mode, *a, **k)

    monkeypatch.setattr(ckpt.os, "replace", flaky_replace)
    monkeypatch.setattr(ckpt, "open", flaky_open, raising=False)
    with pytest.raises(OSError):
        store.save(2, _state(2), tag="best")
    monkeypatch.undo()
    assert calls[0][0] == "best" and calls[0][1].startswith(".best.old-")  # the swap had begun
    assert _entries(root) == ["best"]
    assert load(root / "best")[0]["step"] == 1


def test_best_swap_killed_between_renames_is_recovered(tmp_path: Path) -> None:
    """After a kill -9 between `best -> .best.old-PID` and the rename of the new one, the next
    save restores the committed previous slot instead of losing it."""
    root = tmp_path / "ckpt"
    store = _store(root)
    store.save(1, _state(1), tag="best")
    os.replace(root / "best", root / ".best.old-424242")  # what the killed process left behind
    store.save(2, _state(2))
    assert _entries(root) == ["best", _step(2)]
    assert load(root / "best")[0]["step"] == 1


# ---------------------------------------------------------------------------------------------
# Only torch.load(weights_only=True): nothing in a checkpoint can execute code
# ---------------------------------------------------------------------------------------------

SENTINEL_ENV = "LZK_TEST_SENTINEL"


def _touch_sentinel() -> None:
    Path(os.environ[SENTINEL_ENV]).write_text("code ran")


class Payload:
    """Unpickling this runs code (writes a sentinel)."""

    def __reduce__(self):  # noqa: ANN204
        return (_touch_sentinel, ())


def test_state_with_arbitrary_python_object_is_refused_at_save(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sentinel = tmp_path / "SENTINEL"
    monkeypatch.setenv(SENTINEL_ENV, str(sentinel))
    root = tmp_path / "ckpt"
    store = _store(root, keep_last=1)
    good = store.save(1, _state(1))
    for bad in ({"obj": Payload()}, {"scalar": np.float32(1.0)}, {"arr": np.zeros(3)}):
        with pytest.raises(CheckpointError, match=r"weights_only=True"):
            store.save(2, {**_state(2), **bad})
        assert _entries(root) == [_step(1)]  # nothing committed, nothing rotated away
    assert store.latest() == good and not sentinel.exists()


def test_malicious_pickle_in_a_committed_checkpoint_never_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A checkpoint whose state.pt was replaced (and its manifest updated to match) by a payload:
    `load` refuses it through torch.load(weights_only=True); the payload never runs."""
    import hashlib

    sentinel = tmp_path / "SENTINEL"
    monkeypatch.setenv(SENTINEL_ENV, str(sentinel))
    path = _store(tmp_path / "ckpt").save(1, _state(1))
    torch.save({"param": Payload()}, path / "state.pt")
    manifest = json.loads((path / "manifest.json").read_text())
    manifest["state.pt"] = hashlib.sha256((path / "state.pt").read_bytes()).hexdigest()
    (path / "manifest.json").write_text(json.dumps(manifest))
    verify(path)  # the hashes are consistent ...
    with pytest.raises(CheckpointError, match="cannot be loaded safely"):
        load(path)  # ... but the content is refused
    assert not sentinel.exists()
    # the control: an unrestricted unpickler would have run it
    torch.load(path / "state.pt", weights_only=False)
    assert sentinel.exists()


def test_object_arrays_are_refused(tmp_path: Path) -> None:
    root = tmp_path / "ckpt"
    with pytest.raises(CheckpointError, match="dtype object"):
        _store(root).save(1, _state(1), {"bad": np.array([{"a": 1}], dtype=object)})
    assert _entries(root) == []


def test_unpicklable_state_fails_to_save_and_commits_nothing(tmp_path: Path) -> None:
    root = tmp_path / "ckpt"
    with pytest.raises(Exception):  # noqa: B017, PT011 - pickling errors vary by Python version
        _store(root).save(1, {"fn": lambda: 1})
    assert _entries(root) == []


def test_loading_guards_on_the_torch_version_and_the_force_switch(monkeypatch: pytest.MonkeyPatch,
                                                                  caplog: pytest.LogCaptureFixture) -> None:
    """RELIABILITY.md E5: torch < 2.6 is refused; < 2.10 and TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD warn."""
    from lzkernel import checkpoint as ck
    from lzkernel.errors import CheckpointError

    with pytest.raises(CheckpointError, match=r"torch 2.5.1\+cpu is older than 2.6"):
        ck.check_safe_loading("2.5.1+cpu", {})
    cases = [("2.13.0+cpu", {}, []), ("2.9.1", {}, ["unsafe before torch 2.10"]),
             ("2.13.0", {"TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD": "1"}, ["TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD is set"]),
             ("2.13.0", {"TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD": "0"}, [])]
    for version, env, expected in cases:
        monkeypatch.setattr(ck, "_load_guard_done", False)
        caplog.clear()
        with caplog.at_level("WARNING", logger="lzkernel.checkpoint"):
            ck.check_safe_loading(version, env)
            ck.check_safe_loading(version, env)  # once per process
        assert len(caplog.records) == len(expected), (version, env, caplog.text)
        assert all(e in r.getMessage() for e, r in zip(expected, caplog.records))


def test_a_fresh_run_refuses_a_directory_with_a_linked_step(tmp_path: Path) -> None:
    """A ``ckpt/step_X`` symlink is not resumed by --resume auto, and a fresh run does not write
    over it either (its save would move the link): the directory counts as holding checkpoints."""
    from lzkernel.checkpoint import refuse_fresh_run_into
    from lzkernel.errors import ConfigError

    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "run" / "ckpt").mkdir(parents=True)
    refuse_fresh_run_into(tmp_path / "run")  # empty: fine
    (tmp_path / "run" / "ckpt" / "step_000000000005").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(ConfigError, match="already holds checkpoints"):
        refuse_fresh_run_into(tmp_path / "run")
