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

Temporary directories are named after the writing process (``.NAME.tmp-PID``). Cleaning them
up removes only this process's and those of processes that no longer exist: a temporary
directory of a live process is its checkpoint in progress (one run per directory is enforced by
:mod:`lzkernel.rundir`; this is the second line of defence).

A checkpoint is *damaged* when its manifest does not list the files every checkpoint has, lists
files that are missing or differ from their hash, or when a listed file cannot be read back;
every such case is a :class:`CheckpointError` that starts with ``checkpoint PATH is damaged``.
"""
from __future__ import annotations

import contextlib
import hashlib
import io
import json
import logging
import os
import re
import shutil
import time
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping

from lzkernel.errors import CheckpointError, ConfigError
from lzkernel.rundir import abandoned_dir

log = logging.getLogger("lzkernel.checkpoint")

STEP_RE = re.compile(r"^step_(\d{12})$")
DONE = "DONE"
FORMAT_VERSION = 1
#: Files every committed checkpoint lists in its manifest.
REQUIRED_FILES = ("state.pt", "config.yaml", "meta.json")
_TEMP_RE = re.compile(r"^\..+\.(tmp|old)-(\d+)$")


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` exists on this machine (a zombie counts as gone)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, owned by someone else
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[-1].split()[0] != b"Z"
    except OSError:
        return True


def _foreign_live(p: Path) -> bool:
    """True for a temporary (``.tmp-PID``/``.old-PID``) directory of another live process."""
    m = _TEMP_RE.match(p.name)
    if m is None:
        return False
    pid = int(m.group(2))
    return pid != os.getpid() and pid_alive(pid)


def _fsync_file(path: Path) -> None:
    with open(path, "rb") as f:
        os.fsync(f.fileno())


def write_bytes_atomic(path: Path, data: bytes) -> None:
    """Replace ``path`` by ``data`` atomically and durably: a crash leaves the old file or the new
    one, never half of one (a temporary beside it, a dot name that no reader takes for the file,
    fsynced, renamed over it, the directory fsynced); the temporary is removed if the write
    fails, and an OSError names ``path``."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with _naming(path):
        try:
            with open(tmp, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
    _fsync_dir(path.parent)


def write_text_atomic(path: Path, text: str) -> None:
    """:func:`write_bytes_atomic` of ``text`` in UTF-8."""
    write_bytes_atomic(path, text.encode("utf-8"))


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


@contextlib.contextmanager
def _naming(path: Path) -> Iterator[None]:
    """An OSError inside names ``path`` (a buffered write or flush that fails, e.g. with ENOSPC,
    carries no file name, and the one-line error must say which file)."""
    try:
        yield
    except OSError as exc:
        if exc.filename is None:
            exc.filename = str(path)
        raise


def _write_bytes(path: Path, data: Any, *, sync: bool = False) -> None:
    """Write ``data`` to a new file ``path`` (and fsync it with ``sync``); an OSError names ``path``."""
    with _naming(path), open(path, "wb") as f:
        f.write(data)
        if sync:
            f.flush()
            os.fsync(f.fileno())


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
            # Serialised in memory, then written with plain file I/O: a full disk is then an
            # OSError naming the file (torch's own writer says only "file write failed").
            buf = io.BytesIO()
            torch.save(dict(state), buf)
            _write_bytes(tmp / "state.pt", buf.getbuffer())
            del buf
            _check_loadable(torch, tmp / "state.pt")
            if arrays:
                for key, value in arrays.items():
                    if getattr(value, "dtype", None) is not None and value.dtype == object:
                        raise CheckpointError(f"array '{key}' has dtype object; only plain arrays are stored")
                with _naming(tmp / "arrays.npz"), open(tmp / "arrays.npz", "wb") as f:
                    np.savez(f, **{k: np.asarray(v) for k, v in arrays.items()})
            _write_bytes(tmp / "config.yaml", self.config_yaml.encode("utf-8"))
            # The array names go into meta.json so that a checkpoint whose arrays vanished (with
            # the manifest rewritten to match) is still recognised as damaged.
            info = {"format": FORMAT_VERSION, "step": step, "tag": tag, "time": time.time(),
                    "arrays": sorted(arrays) if arrays else [], **(meta or {})}
            _write_bytes(tmp / "meta.json", json.dumps(info, indent=1, default=str).encode("utf-8"))
            files = sorted(p.name for p in tmp.iterdir())
            manifest = {name: _sha256(tmp / name) for name in files}
            _write_bytes(tmp / "manifest.json", json.dumps(manifest, indent=1).encode("utf-8"))
            for p in tmp.iterdir():
                with _naming(p):
                    _fsync_file(p)
            _fsync_dir(tmp)
            if self.before_commit is not None:
                self.before_commit(tmp)
            if final.exists():  # re-saving a slot ("best", or the same step): swap atomically
                old = self.root / f".{final.name}.old-{os.getpid()}"
                os.replace(final, old)
            os.replace(tmp, final)
            _fsync_dir(self.root)
            _write_bytes(final / DONE, b"ok\n", sync=True)
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
            if not _foreign_live(p):  # never another live process's checkpoint in progress
                shutil.rmtree(p, ignore_errors=True)
        # A swap killed between its renames leaves the previous checkpoint at ``.NAME.old-PID``:
        # restore it if ``NAME`` did not commit, else it is garbage.
        for p in self.root.glob(".*.old-*"):
            if _foreign_live(p):  # a live process is between its two renames
                continue
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

    def set_aside_newer(self, step: int) -> tuple[Path | None, list[str]]:
        """Move every step directory later than ``step`` into ``abandoned-<time>-<pid>/`` under the
        store and return that directory and their names (oldest first; ``(None, [])`` if none). A run resumed from an older checkpoint
        starts a new history: ``--resume auto`` and the rotation go by step number, so the old
        history's later steps would otherwise pass for this run's. Nothing is deleted."""
        if not self.root.is_dir():
            return None, []
        newer = sorted(p for p in self.root.iterdir() if (m := STEP_RE.match(p.name)) and int(m.group(1)) > step)
        if not newer:
            return None, []
        dest = abandoned_dir(self.root)
        for p in newer:
            os.replace(p, dest / p.name)
        _fsync_dir(self.root)
        return dest, [p.name for p in newer]

    # -- finding and loading -----------------------------------------------------------------

    def complete_steps(self) -> list[Path]:
        """Step directories carrying ``DONE``, oldest first (hashes not checked). A symbolic link
        is not one of this store's checkpoints (it may point anywhere): never resumed by
        ``--resume auto`` nor rotated; an explicit ``--resume PATH`` may still name it."""
        if not self.root.is_dir():
            return []
        dirs = [p for p in self.root.iterdir()
                if STEP_RE.match(p.name) and not p.is_symlink() and (p / DONE).is_file()]
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


def _damaged(p: Path, detail: str) -> CheckpointError:
    return CheckpointError(f"checkpoint {p} is damaged: {detail}")


def _where_checkpoints_are(p: Path) -> str:
    """A hint for a path given as a checkpoint that is a run directory or its ``ckpt/``."""
    steps = sorted(p.glob("step_*"))
    if steps:
        return f"; its checkpoints are step directories such as {steps[-1]}"
    if (p / "ckpt").is_dir():
        return f"; a run directory: resume it with --resume auto and run.out_dir={p}, or name a step under {p / 'ckpt'}"
    return ""


def verify(path: str | Path) -> dict[str, Any]:
    """Check ``DONE``, the manifest (it lists every required file and every file present) and
    every hash; return the meta."""
    p = Path(path)
    if not p.is_dir():
        raise CheckpointError(f"{p} is not a checkpoint directory")
    if not (p / DONE).is_file():
        hint = _where_checkpoints_are(p)
        if hint or not any((p / name).exists() for name in ("state.pt", "meta.json", "manifest.json")):
            # A run directory, its ckpt/, or none of a checkpoint's files: say what was given,
            # not "interrupted" (a run directory holds a config.yaml too).
            raise CheckpointError(f"{p} is not a checkpoint directory (no {DONE}, {', '.join(REQUIRED_FILES)})"
                                  + hint)
        raise CheckpointError(f"{p} is incomplete (no {DONE} marker): it was interrupted while being written")
    try:
        manifest = json.loads((p / "manifest.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise _damaged(p, f"unreadable manifest.json ({exc})") from None
    if not isinstance(manifest, dict) or not all(isinstance(v, str) for v in manifest.values()):
        raise _damaged(p, "manifest.json is not a mapping of file names to hashes")
    missing = [name for name in REQUIRED_FILES if name not in manifest]
    if missing:
        raise _damaged(p, f"manifest.json does not list {', '.join(missing)}")
    unlisted = sorted(q.name for q in p.iterdir() if q.name not in manifest and q.name not in (DONE, "manifest.json"))
    if unlisted:
        raise _damaged(p, f"files not in its manifest: {', '.join(unlisted)}")
    for name, digest in manifest.items():
        f = p / name
        if "/" in name or "\\" in name or name in ("", ".", "..") or f.is_symlink():
            raise _damaged(p, f"manifest entry {name!r} is not a plain file of the checkpoint")
        if not f.is_file():
            raise _damaged(p, f"missing file {name}")
        if _sha256(f) != digest:
            raise _damaged(p, f"{name} does not match its hash (corrupt)")
    try:
        meta = json.loads((p / "meta.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise _damaged(p, f"unreadable meta.json ({exc})") from None
    if not isinstance(meta, dict):
        raise _damaged(p, "meta.json is not a mapping")
    if meta.get("arrays") and "arrays.npz" not in manifest:
        raise _damaged(p, f"meta.json lists arrays ({', '.join(map(str, meta['arrays']))}) but there is no arrays.npz")
    return meta


def stored_config(path: str | Path) -> dict[str, Any] | None:
    """The resolved config a checkpoint was written with (None when it stores an empty one);
    read without importing torch, before anything is loaded."""
    from lzkernel.config.strict_yaml import parse

    p = Path(path)
    try:
        data = parse((p / "config.yaml").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:  # UnicodeDecodeError is a ValueError
        raise _damaged(p, f"unreadable config.yaml ({exc})") from None
    except Exception as exc:  # noqa: BLE001 - any YAML problem: the file is not what we wrote
        raise _damaged(p, f"config.yaml is not valid YAML ({' '.join(str(exc).split())})") from None
    if data is None:
        return None
    if not isinstance(data, dict):
        raise _damaged(p, "config.yaml is not a mapping of sections")
    return data


def _first_line(exc: BaseException) -> str:
    """The gist of an error message in one line. torch's weights_only errors run to a page of
    advice (including re-running with ``weights_only=False``, which is exactly what must not be
    done with a checkpoint one does not trust): keep only what the unpickler refused."""
    text = str(exc)
    if "WeightsUnpickler error:" in text:
        gist = " ".join(text.split("WeightsUnpickler error:", 1)[1].split())
        gist = gist.split(" Please use ", 1)[0].split(" Check the documentation", 1)[0]
        return f"the unpickler refused it ({gist[:200]})"
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[0][:300] if lines else type(exc).__name__


#: torch versions whose ``weights_only`` loader is the safe default (2.6) and has had the
#: unpickler fixes PyTorch's security notes recommend for untrusted files (2.10).
SAFE_LOAD_TORCH, RECOMMENDED_LOAD_TORCH = (2, 6), (2, 10)
_load_guard_done = False


def _torch_version(version: str) -> tuple[int, int]:
    major, minor = version.split("+")[0].split(".")[:2]
    return int(major), int("".join(c for c in minor if c.isdigit()) or 0)


def check_safe_loading(torch_version: str, env: Mapping[str, str]) -> None:
    """The guards of a checkpoint load (RELIABILITY.md E5): torch older than 2.6 is refused
    (CheckpointError: its restricted unpickler is not safe to rely on); older than 2.10 and
    ``TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD`` set are warned about once per process (lzkernel passes
    ``weights_only=True`` explicitly, which the switch does not override, but a checkpoint from
    an untrusted source still deserves a recent torch)."""
    global _load_guard_done
    version = _torch_version(torch_version)
    if version < SAFE_LOAD_TORCH:
        raise CheckpointError(f"torch {torch_version} is older than 2.6: lzkernel does not load checkpoints with it "
                              "(its weights_only unpickler is not safe to rely on); install torch >= 2.6")
    if _load_guard_done:
        return
    _load_guard_done = True
    if version < RECOMMENDED_LOAD_TORCH:
        log.warning("torch %s: loading checkpoints from untrusted sources is unsafe before torch 2.10", torch_version)
    if env.get("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", "").strip() not in ("", "0"):
        log.warning("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD is set: lzkernel still loads checkpoints with "
                    "weights_only=True (no code can run from them); other torch.load calls in this process "
                    "would not be restricted")


def load(path: str | Path, map_location: str = "cpu") -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """``(state, arrays, meta)`` of a verified checkpoint; nothing in it can execute code."""
    import numpy as np
    import torch

    check_safe_loading(torch.__version__, os.environ)
    p = Path(path)
    meta = verify(p)
    try:
        state = torch.load(p / "state.pt", map_location=map_location, weights_only=True)
    except Exception as exc:  # noqa: BLE001 - unpickling errors come in many types
        raise _damaged(p, f"state.pt cannot be loaded safely (weights_only=True): {_first_line(exc)}") from None
    if not isinstance(state, dict):
        raise _damaged(p, f"state.pt holds a {type(state).__name__}, not a mapping")
    arrays: dict[str, Any] = {}
    if (p / "arrays.npz").is_file():
        try:
            with np.load(p / "arrays.npz", allow_pickle=False) as data:
                arrays = {k: data[k] for k in data.files}
        except Exception as exc:  # noqa: BLE001 - BadZipFile, ValueError (pickled arrays), OSError
            raise _damaged(p, f"arrays.npz cannot be read: {_first_line(exc)}") from None
    listed = meta.get("arrays")
    if isinstance(listed, list) and sorted(arrays) != sorted(map(str, listed)):
        lacking = sorted(set(map(str, listed)) - set(arrays))
        extra = sorted(set(arrays) - set(map(str, listed)))
        raise _damaged(p, f"arrays.npz lacks {', '.join(lacking)}" if lacking
                       else f"arrays.npz holds arrays meta.json does not list: {', '.join(extra)}")
    return state, arrays, meta


def refuse_fresh_run_into(run_dir: Path) -> None:
    """A fresh run (no ``--resume``) must not write into a directory that holds checkpoints:
    ConfigError saying how to resume it. Asked by the run and, once before any rank starts, by
    ``lzkernel launch``."""
    root = Path(run_dir) / "ckpt"
    linked = root.is_dir() and any(p.is_symlink() and STEP_RE.match(p.name) for p in root.iterdir())
    if linked or CheckpointStore(root).complete_steps():  # a linked step: the run's saves would move it
        raise ConfigError(f"run.out_dir '{run_dir}' already holds checkpoints; resume it with --resume auto "
                          f"or choose another directory (run.out_dir=...)")
