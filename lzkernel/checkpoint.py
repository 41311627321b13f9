"""Crash-consistent checkpoints.

Layout: ``<run>/ckpt/step_<train_iter:012d>/`` holding ``state.pt`` (tensors and plain values,
loaded with ``torch.load(weights_only=True)``), optional ``arrays.npz`` (numpy arrays such as
the replay buffer, loaded with ``allow_pickle=False``), ``config.yaml`` (the resolved config),
``meta.json`` and ``manifest.json`` (sha256 of every file), then ``DONE``.

Commit protocol: write everything into a hidden temporary directory, fsync each file, fsync the
directory, rename it to its final name, fsync the parent, then write and fsync ``DONE``. A
directory without ``DONE`` or whose hashes do not match is never picked as ``latest``. Rotation
(``keep_last``) runs only after the new checkpoint has committed. ``best`` is a separate slot,
replaced atomically and never rotated.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import shutil
import time
from pathlib import Path
from typing import Any, Callable, Mapping

from lzkernel.errors import CheckpointError

log = logging.getLogger("lzkernel.checkpoint")

STEP_RE = re.compile(r"^step_(\d{12})$")
DONE = "DONE"
FORMAT_VERSION = 1


def _fsync_file(path: Path) -> None:
    with open(path, "rb") as f:
        os.fsync(f.fileno())


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # some filesystems do not allow opening directories
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


class CheckpointStore:
    """Atomic save, verified load, ``latest`` discovery and rotation under ``root``."""

    def __init__(self, root: str | Path, keep_last: int = 3, config_yaml: str = "") -> None:
        self.root = Path(root)
        self.keep_last = keep_last
        self.config_yaml = config_yaml
        #: Test seam: called with the temporary directory just before it is renamed.
        self.before_commit: Callable[[Path], None] | None = None

    # -- saving ------------------------------------------------------------------------------

    def save(
        self,
        step: int,
        state: Mapping[str, Any],
        arrays: Mapping[str, Any] | None = None,
        meta: Mapping[str, Any] | None = None,
        tag: str | None = None,
    ) -> Path:
        """Commit a checkpoint for ``step`` (or the named slot ``tag``, e.g. ``"best"``)."""
        import numpy as np
        import torch

        self.root.mkdir(parents=True, exist_ok=True)
        self._clean_temporaries()
        final = self.root / (tag if tag else f"step_{step:012d}")
        tmp = self.root / f".{final.name}.tmp-{os.getpid()}"
        if tmp.exists():
            shutil.rmtree(tmp)
        tmp.mkdir()
        old: Path | None = None
        try:
            torch.save(dict(state), tmp / "state.pt")
            _check_loadable(torch, tmp / "state.pt")
            if arrays:
                for key, value in arrays.items():
                    if getattr(value, "dtype", None) is not None and value.dtype == object:
                        raise CheckpointError(f"array '{key}' has dtype object; only plain arrays are stored")
                with open(tmp / "arrays.npz", "wb") as f:
                    np.savez(f, **{k: np.asarray(v) for k, v in arrays.items()})
            (tmp / "config.yaml").write_text(self.config_yaml, encoding="utf-8")
            info = {"format": FORMAT_VERSION, "step": step, "tag": tag, "time": time.time(), **(meta or {})}
            (tmp / "meta.json").write_text(json.dumps(info, indent=1, default=str), encoding="utf-8")
            files = sorted(p.name for p in tmp.iterdir())
            manifest = {name: _sha256(tmp / name) for name in files}
            (tmp / "manifest.json").write_text(json.dumps(manifest, indent=1), encoding="utf-8")
            for p in tmp.iterdir():
                _fsync_file(p)
            _fsync_dir(tmp)
            if self.before_commit is not None:
                self.before_commit(tmp)
            if final.exists():  # re-saving a slot ("best", or the same step): swap atomically
                old = self.root / f".{final.name}.old-{os.getpid()}"
                os.replace(final, old)
            os.replace(tmp, final)
            _fsync_dir(self.root)
            with open(final / DONE, "w", encoding="utf-8") as f:
                f.write("ok\n")
                f.flush()
                os.fsync(f.fileno())
            _fsync_dir(final)
            if old is not None:
                shutil.rmtree(old, ignore_errors=True)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            if old is not None and old.exists():  # the swap did not commit: put the previous one back
                shutil.rmtree(final, ignore_errors=True)
                os.replace(old, final)
            raise
        if tag is None:
            self._rotate()
        return final

    def _clean_temporaries(self) -> None:
        for p in self.root.glob(".*.tmp-*"):
            shutil.rmtree(p, ignore_errors=True)
        # A swap killed between its renames leaves the previous checkpoint at ``.NAME.old-PID``:
        # restore it if ``NAME`` did not commit, else it is garbage.
        for p in self.root.glob(".*.old-*"):
            target = self.root / p.name[1:].rsplit(".old-", 1)[0]
            if (p / DONE).is_file() and not (target / DONE).is_file():
                shutil.rmtree(target, ignore_errors=True)
                os.replace(p, target)
            else:
                shutil.rmtree(p, ignore_errors=True)

    def _rotate(self) -> None:
        complete = self.complete_steps()
        for step_dir in complete[: max(0, len(complete) - self.keep_last)]:
            shutil.rmtree(step_dir, ignore_errors=True)
        # Incomplete step directories older than the newest complete one are garbage.
        if complete:
            newest = complete[-1].name
            for p in self.root.iterdir():
                if STEP_RE.match(p.name) and p.name < newest and not (p / DONE).exists():
                    shutil.rmtree(p, ignore_errors=True)

    # -- finding and loading -----------------------------------------------------------------

    def complete_steps(self) -> list[Path]:
        """Step directories carrying ``DONE``, oldest first (hashes not checked)."""
        if not self.root.is_dir():
            return []
        dirs = [p for p in self.root.iterdir() if STEP_RE.match(p.name) and (p / DONE).is_file()]
        return sorted(dirs, key=lambda p: p.name)

    def latest(self) -> Path | None:
        """The newest complete checkpoint whose files match its manifest."""
        for path in reversed(self.complete_steps()):
            try:
                verify(path)
            except CheckpointError as exc:
                log.warning("skipping checkpoint %s: %s", path, exc)
                continue
            return path
        return None


def _check_loadable(torch: Any, path: Path) -> None:
    """Refuse (before commit) a state that ``torch.load(weights_only=True)`` would not load."""
    finder = getattr(torch.serialization, "get_unsafe_globals_in_checkpoint", None)
    if finder is not None:
        unsafe = finder(str(path))
        reason = f"it holds objects of types {', '.join(unsafe)}" if unsafe else ""
    else:  # pragma: no cover - older torch
        try:
            torch.load(path, map_location="cpu", weights_only=True)
            reason = ""
        except Exception as exc:  # noqa: BLE001
            reason = str(exc)
    if reason:
        raise CheckpointError(
            f"state cannot be loaded back with torch.load(weights_only=True): {reason}; a state holds "
            "tensors, numbers, strings, lists and dicts (numpy arrays go in `arrays`)"
        )


def verify(path: str | Path) -> dict[str, Any]:
    """Check ``DONE`` and every hash; return the meta."""
    p = Path(path)
    if not p.is_dir():
        raise CheckpointError(f"{p} is not a checkpoint directory")
    if not (p / DONE).is_file():
        raise CheckpointError(f"{p} is incomplete (no {DONE} marker): it was interrupted while being written")
    try:
        manifest = json.loads((p / "manifest.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise CheckpointError(f"{p}: unreadable manifest.json ({exc})") from None
    for name, digest in manifest.items():
        f = p / name
        if not f.is_file():
            raise CheckpointError(f"{p}: missing file {name}")
        if _sha256(f) != digest:
            raise CheckpointError(f"{p}: {name} does not match its hash (corrupt)")
    try:
        return json.loads((p / "meta.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise CheckpointError(f"{p}: unreadable meta.json ({exc})") from None


def load(path: str | Path, map_location: str = "cpu") -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """``(state, arrays, meta)`` of a verified checkpoint; nothing in it can execute code."""
    import numpy as np
    import torch

    p = Path(path)
    meta = verify(p)
    try:
        state = torch.load(p / "state.pt", map_location=map_location, weights_only=True)
    except Exception as exc:  # noqa: BLE001 - unpickling errors come in many types
        raise CheckpointError(f"{p}/state.pt cannot be loaded safely: {exc}") from None
    arrays: dict[str, Any] = {}
    if (p / "arrays.npz").is_file():
        with np.load(p / "arrays.npz", allow_pickle=False) as data:
            arrays = {k: data[k] for k in data.files}
    return state, arrays, meta
