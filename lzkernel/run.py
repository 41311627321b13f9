"""The run context: run directory, seeding, metric events, checkpoints and the stop flag.

One :class:`RunContext` per process. Trainers receive it as ``run`` and use the attributes
listed in ``docs/architecture.md``. Only rank 0 writes files.

Start-up order (each step may stop the run with a :class:`ConfigError`, exit code 2, before the
next one): an explicit ``--resume PATH`` is verified (nothing is written yet); rank 0 locks
``run.out_dir`` (:mod:`lzkernel.rundir`: the first write); ``--resume auto`` picks the newest
valid checkpoint; the checkpoint's stored config is compared with the current one
(:mod:`lzkernel.config.resume_check`); only then is torch imported, the comm backend built and
anything loaded or written. The lock is released last, on every exit path.
"""
from __future__ import annotations

import json
import logging
import os
import platform
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any, Literal, Mapping, Sequence, get_args

import numpy as np

from lzkernel import rundir
from lzkernel.checkpoint import CheckpointStore, load as load_checkpoint, refuse_fresh_run_into
from lzkernel.config.loader import ResolvedConfig
from lzkernel.config.redact import redact_argv, redact_tree
from lzkernel.component import missing_members, protocol_members
from lzkernel.errors import CheckpointError, ConfigError, LzkernelError, PluginError, name_origin
from lzkernel.memory import retain_freed_memory
from lzkernel.pluginmanager import Kernel
from lzkernel.roles.table import ROLE_SPECS
from lzkernel.seeding import derive_seed, seed_globals
from lzkernel.watchdog import StallWatchdog, progressed

log = logging.getLogger("lzkernel")

#: How the trainer's loop ended, for scripts (``run.stop_kind``, ``summary.json``'s ``stop_kind``);
#: ``run.stop_reason`` says the same in words. ``solved``: an evaluation reached
#: ``evaluator.stop_value``; ``max_train_iters`` / ``max_env_steps`` / ``max_seconds``: that
#: ``run`` budget was reached; ``signal``: this process received SIGINT/SIGTERM; ``peer_signal``: another rank did
#: (this one stopped with it); ``requested``: ``run.stop_requested`` was set without a signal.
StopKind = Literal["solved", "max_train_iters", "max_env_steps", "max_seconds", "signal", "peer_signal", "requested"]
STOP_KINDS: tuple[str, ...] = get_args(StopKind)
#: The kinds that end a run before its own end (``summary.json`` status "stopped", not "finished").
INTERRUPTED_KINDS = frozenset({"signal", "peer_signal", "requested"})


class RunContext:
    """What every component of one run shares."""

    def __init__(
        self,
        kernel: Kernel,
        config: ResolvedConfig,
        *,
        resume: str | None = None,
        overrides: Sequence[str] = (),
        argv: Sequence[str] | None = None,
        embedded: bool = False,
    ) -> None:
        """``embedded``: the run is a library call in a process that lives on (:mod:`lzkernel.api`):
        a second signal raises KeyboardInterrupt and the stall watchdog
        :class:`lzkernel.watchdog.Stalled` in the run's thread instead of ending the process."""
        self.kernel = kernel
        self.embedded = embedded
        self.config = config
        self.cfg = config.run
        self.overrides = list(overrides)
        self.argv = list(argv if argv is not None else getattr(sys, "orig_argv", sys.argv))
        self.resume = resume
        self.train_iter = 0
        self.env_steps = 0
        self.stop_requested = False
        self.stop_signal: int | None = None
        #: Why the trainer's loop ended, in words ("solved: ...", "train_iter 500 has reached
        #: run.max_train_iters=500", ...), and its kind (:data:`StopKind`); both set together by
        #: the trainer (:meth:`set_stop`), both None while it runs. A third-party trainer may set
        #: ``stop_reason`` alone: ``stop_kind`` then stays None.
        self.stop_reason: str | None = None
        self.stop_kind: StopKind | None = None
        self.status_text = ""
        self.derived_seeds: dict[str, int] = {}
        self.notes: dict[str, Any] = {}
        self._start = time.monotonic()
        self._signals_seen = 0
        self._old_handlers: dict[int, Any] = {}
        self._resume_path: Path | None = None
        self._resume_meta: dict[str, Any] | None = None
        self._watchdog: StallWatchdog | None = None
        self._lock: rundir.RunDirLock | None = None
        self.comm: Any = None
        self.dir: Path | None = None
        self.checkpoints: CheckpointStore | None = None
        self.last_checkpoint: Path | None = None  # the newest periodic checkpoint this process saved
        self.device = "cpu"
        self.retained_freed_memory = False  # whether run.retain_freed_memory took effect (start)

    # -- lifecycle ---------------------------------------------------------------------------

    def __enter__(self) -> RunContext:
        try:
            self.start()
        except BaseException:
            # __exit__ will not run: release what start() acquired (the process group included).
            self._restore_signal_handlers()
            try:
                if self.comm is not None:
                    self.comm.close()
            finally:
                rundir.release(self._lock)
                self._lock = None
            raise
        return self

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        self.close(exc)

    def start(self) -> None:
        """Verify the resume source, lock the run dir, check the resume config, then bring up
        comm, seed, write the run files and fire run_start (order: the module docstring)."""
        run_dir = Path(self.cfg.out_dir)
        explicit = self._explicit_resume()
        if rundir.rank_hint() == 0:  # before anything is written, and before torch is imported
            self._lock = rundir.acquire(run_dir)
        self._resume_path = explicit[0] if explicit is not None else self._auto_resume(run_dir)
        if self._resume_path is not None:
            self._check_resume_config(self._resume_path)
        if self.cfg.deterministic:
            # MKL picks its code path by the data's alignment and may shrink its thread team: fix
            # both (read when MKL loads, i.e. on torch's first import in this process).
            os.environ.setdefault("MKL_CBWR", "AUTO,STRICT")
            os.environ.setdefault("MKL_DYNAMIC", "FALSE")
        # Before torch loads, so that its allocations are served under the new thresholds too.
        self.retained_freed_memory = self.cfg.retain_freed_memory and retain_freed_memory()

        import torch

        self.device = self._resolve_device(torch)
        if self.cfg.threads:
            torch.set_num_threads(self.cfg.threads)
        if self.cfg.deterministic:
            torch.use_deterministic_algorithms(True)
        self.comm = self.build("comm")
        seed_globals(self.cfg.seed, self.rank)
        if self.is_main:
            if self._lock is None:  # RANK said otherwise, but this process is rank 0: lock now
                self._lock = rundir.acquire(run_dir)
            store_root = run_dir / "ckpt"
            if self._resume_path is None:
                refuse_fresh_run_into(run_dir)
                rundir.set_aside_earlier_start(run_dir)
            self.dir = run_dir
            self.checkpoints = CheckpointStore(store_root, self.cfg.keep_last, self.config.to_yaml())
            if explicit is not None:
                self._set_aside_later_steps(*explicit)
            self._write_run_files(torch)
        self._install_signal_handlers()
        self._watchdog = StallWatchdog(self.cfg.stall_timeout_s, embedded=self.embedded,
                                       thread=threading.get_ident()).start()
        self.fire("lzkernel_run_start", run=self)

    def close(self, error: BaseException | None = None) -> None:
        """Fire run_end, write seeds.json, close comm, release the run-dir lock (always last)."""
        try:
            try:
                self.hooks.lzkernel_run_end(run=self, error=error)
            finally:
                if self.dir is not None:
                    try:
                        self._write_json("seeds.json", {"root": self.cfg.seed, **self.derived_seeds})
                    except OSError as exc:
                        if error is None:
                            raise
                        log.warning("could not write seeds.json: %s", exc)  # never mask the first error
                self._restore_signal_handlers()
                if self._watchdog is not None:
                    self._watchdog.stop()
                    self._watchdog = None
                if error is not None and self.world_size > 1:
                    self._ignore_teardown_sigterm()
                if self.comm is not None:
                    self.comm.close()
        finally:
            rundir.release(self._lock)
            self._lock = None

    # -- components --------------------------------------------------------------------------

    @property
    def hooks(self) -> Any:
        return self.kernel.hook

    def section(self, role: str) -> Any:
        """The validated options of ``role``'s section (None when the section is absent)."""
        return self.config.section(role)

    def build(self, role: str, **kwargs: Any) -> Any:
        """Build the component the config names for ``role``: ``factory(options, run, **kwargs)``,
        where ``kwargs`` must be exactly the role table's keyword arguments for ``role``
        (:data:`lzkernel.ROLE_TABLE`): a trainer that passes others is a bug, named here."""
        spec = ROLE_SPECS[role]
        if set(kwargs) != spec.kwarg_names:
            raise TypeError(f"run.build({role!r}) got keyword arguments {sorted(kwargs)}; the role table says "
                            f"{spec.call_signature()}")
        name = self.config.name(role)
        if name is None:
            trainer = self.config.name("trainer")
            raise ConfigError(f"{self.config.source}: missing section '{role}' (trainer '{trainer}' needs one)")
        component = self.kernel.registry.get(role, name)
        try:
            built = component.factory(self.config.section(role), self, **kwargs)
        except LzkernelError:
            raise
        except Exception as exc:
            name_origin(exc, f"{role} '{name}' (plugin '{component.plugin}') while being built")
            raise
        # A plugin's object that lacks what its role's Protocol (or its own `provides`) declares
        # would fail later, deep in a trainer's loop, with an AttributeError: name it here.
        for proto in (spec.protocol, *component.provides):
            missing = missing_members(built, proto)
            if missing:
                raise PluginError(
                    f"{role} '{name}' (plugin '{component.plugin}') built a {type(built).__name__}, which does not "
                    f"implement {proto.__name__}: it lacks {', '.join(missing)} ({proto.__name__} declares "
                    f"{', '.join(protocol_members(proto))})")
        return built

    @property
    def rank(self) -> int:
        return int(self.comm.rank) if self.comm is not None else 0

    @property
    def world_size(self) -> int:
        return int(self.comm.world_size) if self.comm is not None else 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    # -- seeding -----------------------------------------------------------------------------

    def seed(self, *keys: str | int) -> int:
        """The seed of the stream named by ``keys``, derived from ``run.seed``."""
        value = derive_seed(self.cfg.seed, *keys)
        self.derived_seeds["/".join(map(str, keys))] = value
        return value

    def rng(self, *keys: str | int) -> np.random.Generator:
        return np.random.default_rng(self.seed(*keys))

    # -- metrics -----------------------------------------------------------------------------

    @property
    def wall_time(self) -> float:
        """Seconds of the run: since it started, plus, after a resume, the resumed checkpoint's
        wall time (the time between that checkpoint and the interruption is not counted)."""
        return time.monotonic() - self._start

    def record(self, metrics: Mapping[str, float]) -> dict[str, Any]:
        """A metrics record with the x-axes: what sinks write."""
        return {"train_iter": self.train_iter, "env_steps": self.env_steps,
                "wall_time": round(self.wall_time, 3), **metrics}

    def fire(self, hook: str, **kwargs: Any) -> Any:
        """Call the plugins' implementations of ``hook``; an exception one raises carries a note
        naming that plugin (found by its implementation's frame in the traceback)."""
        caller = getattr(self.hooks, hook)
        try:
            return caller(**kwargs)
        except LzkernelError:
            raise
        except Exception as exc:
            plugins = {getattr(impl.function, "__code__", None): impl.plugin_name for impl in caller.get_hookimpls()}
            raised_in = None  # the innermost implementation's frame: a wrapper's frames enclose the one that raised
            tb = exc.__traceback__
            while tb is not None:
                raised_in = plugins.get(tb.tb_frame.f_code, raised_in)
                tb = tb.tb_next
            if raised_in is not None:
                name_origin(exc, f"plugin '{raised_in}' in its {hook} hook")
            raise

    def emit_collect(self, metrics: Mapping[str, float]) -> None:
        progressed()
        if self.is_main:
            self.fire("lzkernel_after_collect", run=self, metrics=dict(metrics))

    def emit_train(self, metrics: Mapping[str, float]) -> None:
        progressed()
        if self.is_main:
            self.fire("lzkernel_after_train", run=self, metrics=dict(metrics))

    def emit_eval(self, metrics: Mapping[str, float]) -> None:
        progressed()
        if self.is_main:
            self.fire("lzkernel_after_eval", run=self, metrics=dict(metrics))

    def note(self, key: str, value: Any) -> None:
        """Record a choice a component made when built (``policy.learn_dtype`` → 'float32') in
        ``self.notes`` and, on the main rank, in the run dir's ``resolved.json``."""
        self.notes[key] = value
        if self.dir is not None:
            self._write_json("resolved.json", self.notes)

    def set_stop(self, kind: StopKind, reason: str) -> None:
        """Record why the loop ended: ``kind`` (one of :data:`STOP_KINDS`) and ``reason`` in words."""
        if kind not in STOP_KINDS:
            raise ValueError(f"stop kind {kind!r} is not one of {', '.join(STOP_KINDS)}")
        self.stop_kind, self.stop_reason = kind, reason

    def progress(self, text: str) -> None:
        """Extra text for the console progress line (e.g. the last eval return)."""
        self.status_text = text

    # -- checkpoints -------------------------------------------------------------------------

    def save_checkpoint(
        self, state: Mapping[str, Any], arrays: Mapping[str, Any] | None = None, tag: str | None = None
    ) -> Path | None:
        """Commit a checkpoint at ``train_iter`` (rank 0 only; other ranks return None)."""
        from lzkernel.seeding import rng_state

        if not self.is_main or self.checkpoints is None:
            return None
        full = {"trainer": dict(state), "rng": rng_state(),
                "counters": {"train_iter": self.train_iter, "env_steps": self.env_steps}}
        # wall_time in the meta (not the state): a resumed run's clock continues from it, and the
        # state stays comparable bit for bit between a straight and a resumed run.
        meta = {"train_iter": self.train_iter, "env_steps": self.env_steps, "trainer": self.config.name("trainer"),
                "wall_time": round(self.wall_time, 3), "versions": self.versions()}
        path = self.checkpoints.save(self.train_iter, full, arrays, meta, tag=tag)
        if tag is None:
            self.last_checkpoint = path
        progressed()
        self.fire("lzkernel_checkpoint_saved", run=self, path=path)
        return path

    def resume_state(self) -> tuple[dict[str, Any], dict[str, Any]] | None:
        """``(trainer_state, arrays)`` to resume from, restoring counters and RNGs; None if fresh.

        A checkpoint that passed its integrity check but cannot be read back (a manifest that
        hides missing files, a state of the wrong shape) is a :class:`ConfigError` naming it."""
        from lzkernel.seeding import set_rng_state

        if self._resume_path is None:
            return None
        try:
            state, arrays, meta = load_checkpoint(self._resume_path)
            counters, rng, trainer = state["counters"], state["rng"], state["trainer"]
            train_iter, env_steps = int(counters["train_iter"]), int(counters["env_steps"])
            elapsed = float(meta.get("wall_time", 0.0))  # absent in checkpoints before 2026-12-07
        except CheckpointError as exc:
            raise ConfigError(f"--resume: {exc}") from None
        except (KeyError, TypeError, ValueError) as exc:
            raise ConfigError(f"--resume: checkpoint {self._resume_path} is damaged: its state lacks "
                              f"{exc} (not written by lzkernel's RunContext?)") from None
        self.train_iter, self.env_steps = train_iter, env_steps
        self._start = time.monotonic() - elapsed  # wall_time goes on from the checkpoint's
        set_rng_state(rng)
        log.info("resumed from %s (train_iter %d, env_steps %d)", self._resume_path, self.train_iter, self.env_steps)
        return trainer, arrays

    @property
    def resume_path(self) -> Path | None:
        return self._resume_path

    @property
    def resume_meta(self) -> dict[str, Any]:
        """The resumed checkpoint's ``meta.json`` (``step``, ``time`` it was saved, ``train_iter``,
        ``env_steps``, ``wall_time``, ...), read once for every sink that needs it; ``{}`` for a
        fresh run or a meta that cannot be read. Checkpoints of older lzkernels lack some keys
        (``wall_time`` before 2026-12-07): readers check each key."""
        if self._resume_meta is None:
            meta: Any = {}
            if self._resume_path is not None:
                try:
                    meta = json.loads((self._resume_path / "meta.json").read_text(encoding="utf-8"))
                except (OSError, ValueError):
                    meta = {}
            self._resume_meta = meta if isinstance(meta, dict) else {}
        return self._resume_meta

    def _explicit_resume(self) -> tuple[Path, int] | None:
        """``--resume PATH``, verified (no writes: a bad path leaves no run directory behind), and
        the step it was saved at."""
        if self.resume is None or self.resume == "auto":
            return None
        path = Path(self.resume)
        if not path.exists():
            raise ConfigError(f"--resume {self.resume}: no such checkpoint")
        try:
            from lzkernel.checkpoint import verify

            meta = verify(path)
        except CheckpointError as exc:
            raise ConfigError(f"--resume {self.resume}: {exc}") from None
        return path, int(meta["step"])

    def _set_aside_later_steps(self, path: Path, step: int) -> None:
        """``--resume PATH`` to an earlier step than this run dir's newest: move the later steps
        aside (:meth:`CheckpointStore.set_aside_newer`), so that they are neither resumed by a
        later ``--resume auto`` nor counted by the rotation as this history's."""
        dest, moved = self.checkpoints.set_aside_newer(step)
        if moved:
            log.warning("--resume %s: this run continues from step %d; the %d later checkpoint(s) of %s (%s ... %s) "
                        "were moved into %s", path, step, len(moved), self.checkpoints.root, moved[0], moved[-1], dest)

    def _auto_resume(self, run_dir: Path) -> Path | None:
        """``--resume auto``: the newest checkpoint that passes its integrity check, or None."""
        if self.resume != "auto":
            return None
        store = CheckpointStore(run_dir / "ckpt")
        path = store.latest()
        if path is None and store.complete_steps():
            raise ConfigError(
                f"--resume auto: no checkpoint in {run_dir / 'ckpt'} passes its integrity check (see the "
                "warnings above); move them away or choose another directory (run.out_dir=...)"
            )
        if path is None:
            log.info("--resume auto: no checkpoint in %s, starting fresh", run_dir / "ckpt")
        return path

    def _check_resume_config(self, path: Path) -> None:
        """Refuse (exit 2) a resume whose config differs from the checkpoint's in a key that is
        not resume-safe (:mod:`lzkernel.config.resume_check`); nothing has been loaded yet."""
        from lzkernel.checkpoint import stored_config
        from lzkernel.config.resume_check import (MAX_LISTED, change_text, config_changes, describe_changes,
                                                  incompatible_changes)

        try:
            old = stored_config(path)
        except CheckpointError as exc:
            raise ConfigError(f"--resume: {exc}") from None
        if old is None:
            log.warning("checkpoint %s stores no config: the resume cannot check that the config matches", path)
            return
        registry = self.kernel.registry

        def component_safe(role: str, name: str) -> tuple[str, ...]:
            try:
                return tuple(registry.get(role, name).resume_safe)
            except (ConfigError, KeyError):
                return ()

        old, new = redact_tree(old), redact_tree(self.config.to_dict())
        changes = incompatible_changes(old, new, component_safe)
        if changes:
            raise ConfigError(describe_changes(changes, str(path)), [c[0] for c in changes])
        allowed = config_changes(old, new)
        if allowed and self.is_main:  # a resume without the first run's overrides changes these: say so
            more = f"; and {len(allowed) - MAX_LISTED} more" if len(allowed) > MAX_LISTED else ""
            log.info("resumed with %d setting%s changed from the checkpoint's config: %s%s", len(allowed),
                     "s" if len(allowed) != 1 else "",
                     "; ".join(change_text(*change) for change in allowed[:MAX_LISTED]), more)

    # -- internals ---------------------------------------------------------------------------

    def _resolve_device(self, torch: Any) -> str:
        d = self.cfg.device
        if d == "auto":
            return "cuda" if torch.cuda.is_available() else "cpu"
        if d.startswith("cuda") and not torch.cuda.is_available():
            raise ConfigError(f"run.device: '{d}' requested but CUDA is not available; use run.device=cpu")
        return d

    def versions(self) -> dict[str, Any]:
        import torch

        from lzkernel import __version__

        return {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "numpy": np.__version__,
            "lzkernel": __version__,
            "plugins": {n: {"dist": i.dist, "version": i.version, "module": i.module}
                        for n, i in sorted(self.kernel.infos.items())},
        }

    def _write_json(self, name: str, data: Any) -> None:
        assert self.dir is not None
        (self.dir / name).write_text(json.dumps(data, indent=1, default=str) + "\n", encoding="utf-8")

    def _write_run_files(self, torch: Any) -> None:
        assert self.dir is not None
        (self.dir / "config.yaml").write_text(self.config.to_yaml(), encoding="utf-8")
        # Provenance survives a resume into the same directory: overrides.txt keeps the first
        # invocation's overrides, and command.txt gains one line per invocation.
        overrides = self.dir / "overrides.txt"
        if not overrides.exists():
            overrides.write_text("".join(o + "\n" for o in redact_argv(self.overrides)), encoding="utf-8")
        with open(self.dir / "command.txt", "a", encoding="utf-8") as f:
            f.write(" ".join(redact_argv(self.argv)) + "\n")
        self._write_json("versions.json", {**self.versions(), "device": self.device, "world_size": self.world_size})
        self.note("run.retain_freed_memory", self.retained_freed_memory)

    def _install_signal_handlers(self) -> None:
        import threading

        if threading.current_thread() is not threading.main_thread():
            return
        for sig in (signal.SIGINT, signal.SIGTERM):
            self._old_handlers[sig] = signal.signal(sig, self._on_signal)

    def _restore_signal_handlers(self) -> None:
        for sig, handler in self._old_handlers.items():
            signal.signal(sig, handler)
        self._old_handlers.clear()

    @staticmethod
    def _ignore_teardown_sigterm() -> None:
        """A rank failing with its own error is on its way out. Closing its connection releases
        its peers (PeerFailed), and a multi-rank launcher SIGTERMs every rank as soon as one of
        them exits; a SIGTERM from then on would turn this rank's exit code 1 into "killed by
        SIGTERM", before or after it printed its error line, and hide the root cause. So SIGTERM
        is ignored for the rest of the process (the launcher's SIGKILL still ends a hung one)."""
        import threading

        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, signal.SIG_IGN)

    def _on_signal(self, signum: int, frame: Any) -> None:
        """First signal: ask the trainer to save and stop at its next safe boundary. Second: leave
        now (checkpoints are committed atomically, so none is damaged)."""
        self._signals_seen += 1
        if self._signals_seen > 1:
            if self.embedded:  # the caller's process lives on: interrupt the run where it is
                raise KeyboardInterrupt(f"a second {signal.Signals(signum).name}")
            os._exit(128 + signum)
        self.stop_requested = True
        self.stop_signal = signum
        print(f"\nlzkernel: received {signal.Signals(signum).name}; saving a checkpoint and stopping "
              "(send it again to stop at once)", file=sys.stderr, flush=True)
