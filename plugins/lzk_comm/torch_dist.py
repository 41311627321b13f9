"""The ``gloo`` and ``nccl`` comm backends over ``torch.distributed``.

Initialised from torchrun's environment (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``,
``MASTER_ADDR``/``MASTER_PORT``; ``init_method="env://"``), with a timeout in seconds
(``comm.timeout_s``, default 120) instead of torch's 30 minutes. Collective tensors are moved to
the device the transport needs — CPU for gloo, ``cuda:LOCAL_RANK`` for NCCL — and the result is
copied back into the caller's tensor, so callers pass tensors from wherever they live.

Single-node gloo runs (``LOCAL_WORLD_SIZE == WORLD_SIZE``) bind gloo's sockets to the loopback
interface (``GLOO_SOCKET_IFNAME``, unless already set). The rendezvous store is the launcher's:
``lzkernel launch`` keeps it on 127.0.0.1; torchrun's listens on every interface whatever its
options (see ``docs/distributed.md``). ``close()`` (called by the run context on every exit
path, and at interpreter exit as a fallback) destroys the process group.

Every rank initialised from the environment publishes a heartbeat through the rendezvous store
(:mod:`lzkernel.heartbeat`). When a collective fails (a timeout, a peer gone), the error is a
:class:`~lzkernel.heartbeat.CollectiveFailed` that names the rank(s) that never reached it, and
the backend stays failed: every later collective raises the same error at once instead of
waiting another ``timeout_s``.
"""
from __future__ import annotations

import atexit
import os
import socket
import struct
import time
from datetime import timedelta
from typing import Any, Iterable

import torch

from lzk_comm.common import CommTimer, TimedCommMixin, average_gradients, decode_object, encode_object
from lzk_comm.local import check_plain, check_src, check_tensor
from lzkernel import ConfigError
from lzkernel.heartbeat import CollectiveFailed, Heartbeat, PeerFailed
from lzkernel.launch import nccl_error, nccl_unavailable_reason

#: torchrun's variables an ``env://`` initialisation needs.
ENV_VARS = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
LAUNCH_HINT = "lzkernel launch --nproc N CONFIG comm.name=gloo"
#: broadcast_object sends one fixed-size frame (8-byte length + payload); longer payloads a second one.
_FRAME = 512


def _loopback_interface() -> str | None:
    try:
        names = [name for _, name in socket.if_nameindex()]
    except (OSError, AttributeError):
        return None
    for name in ("lo", "lo0"):
        if name in names:
            return name
    return None


class TorchDistComm(TimedCommMixin):
    """:class:`lzkernel.CommBackend` over a ``torch.distributed`` process group.

    Args:
        backend: ``"gloo"`` or ``"nccl"``.
        timeout_s: deadline of the rendezvous and of every collective.
        env: where to read torchrun's variables (default ``os.environ``).
        store, rank, world_size: initialise from an explicit ``torch.distributed.Store`` instead
            of the environment (tests).
    """

    def __init__(self, backend: str, *, timeout_s: float = 120.0, env: dict[str, str] | None = None,
                 store: Any = None, rank: int | None = None, world_size: int | None = None) -> None:
        import torch.distributed as dist

        if backend not in ("gloo", "nccl"):
            raise ValueError(f"backend must be 'gloo' or 'nccl', got {backend!r}")
        self.backend = backend
        self.timeout_s = float(timeout_s)
        self.timer = CommTimer()
        self._owned = False
        self._heartbeat: Heartbeat | None = None
        self._failed: str | None = None  # set by the first failed collective: the group is dead
        env = dict(os.environ if env is None else env)
        if not dist.is_available():
            raise ConfigError(f"comm.name={backend}: this torch build has no torch.distributed")
        local_rank = int(env.get("LOCAL_RANK", "0") or 0)
        if backend == "nccl":
            reason = nccl_unavailable_reason(local_rank)
            if reason is not None:
                raise nccl_error(reason)
        elif not dist.is_gloo_available():
            raise ConfigError(f"comm.name=gloo: this torch build ({torch.__version__}) has no gloo")

        if dist.is_initialized():
            # Someone (a launcher, a test harness) already made the default group: use it, leave it.
            if dist.get_backend() != backend:
                raise ConfigError(f"comm.name={backend}: a '{dist.get_backend()}' process group is already "
                                  "initialised in this process")
        else:
            kwargs: dict[str, Any] = {"timeout": timedelta(seconds=self.timeout_s)}
            if store is not None:
                if rank is None or world_size is None:
                    raise ValueError("store= needs rank= and world_size=")
                kwargs.update(store=store, rank=int(rank), world_size=int(world_size))
            else:
                missing = [v for v in ENV_VARS if not env.get(v)]
                if missing:
                    raise ConfigError(
                        f"comm.name={backend} initialises from torchrun's environment, but "
                        f"{', '.join(missing)} {'is' if len(missing) == 1 else 'are'} not set; launch with: "
                        f"{LAUNCH_HINT}")
                kwargs["init_method"] = "env://"
                if backend == "gloo" and "GLOO_SOCKET_IFNAME" not in os.environ and self._single_node(env):
                    lo = _loopback_interface()
                    if lo is not None:
                        os.environ["GLOO_SOCKET_IFNAME"] = lo  # keep gloo's pairs on loopback
            if backend == "nccl":
                torch.cuda.set_device(local_rank)
                kwargs["device_id"] = torch.device("cuda", local_rank)
            try:
                dist.init_process_group(backend, **kwargs)
            except (RuntimeError, ValueError, OSError) as exc:  # DistNetworkError, DistStoreError: RuntimeError
                raise RuntimeError(f"comm.name={backend}: process group initialisation failed within "
                                   f"{self.timeout_s:g} s: {type(exc).__name__}: {exc}") from exc
            self._owned = True
            atexit.register(self.close)
        self.rank = int(dist.get_rank())
        self.world_size = int(dist.get_world_size())
        self.local_rank = local_rank
        self.device = torch.device("cuda", local_rank) if backend == "nccl" else torch.device("cpu")
        self._dist = dist
        if store is None and self.world_size > 1 and env.get("MASTER_ADDR") and env.get("MASTER_PORT"):
            self._heartbeat = Heartbeat(self._store_client(env), self.rank, self.world_size, self.timeout_s).start()

    def _store_client(self, env: dict[str, str]) -> Any:
        """A factory of clients of the rendezvous store (the heartbeat thread owns one)."""
        host, port = env["MASTER_ADDR"], int(env["MASTER_PORT"])
        dist = self._dist

        def connect() -> Any:
            return dist.TCPStore(host, port, is_master=False, wait_for_workers=False,
                                 timeout=timedelta(seconds=min(10.0, self.timeout_s)))

        return connect

    def _call(self, name: str, fn: Any, /, *args: Any, **kwargs: Any) -> Any:
        """Run one ``torch.distributed`` collective under the heartbeat; a failure becomes a
        :class:`CollectiveFailed` naming the rank(s) that never reached it."""
        if self._failed is not None:  # the group is dead: fail at once, the same way
            raise CollectiveFailed(self._failed)
        hb = self._heartbeat
        seq = hb.enter(name) if hb is not None else 0
        t0 = time.monotonic()
        try:
            return fn(*args, **kwargs)
        except RuntimeError as exc:  # DistBackendError, DistNetworkError, DistStoreError
            waited = time.monotonic() - t0
            cause = " ".join(str(exc).split())[:300]
            what = f"{name} (collective #{seq}) on rank {self.rank} failed after {waited:.1f} s: {cause}"
            # Only a deadline that expired is a rank not responding; a connection closed early
            # means a peer failed or left, and that peer's own error is the root cause.
            timed_out = waited >= 0.9 * self.timeout_s or "timed out" in cause.lower()
            blamed, verdict = hb.diagnose(name, seq, waited) if (hb is not None and timed_out) else ([], "")
            if blamed:
                self._failed = f"{verdict} ({what})"
            elif timed_out:
                self._failed = what + (f" {verdict}" if verdict else "")
            else:
                self._failed = f"{what} (another rank failed or left first: its error is the root cause)"
                raise PeerFailed(self._failed) from exc
            raise CollectiveFailed(self._failed) from exc
        finally:
            if hb is not None:
                hb.leave()

    @staticmethod
    def _single_node(env: dict[str, str]) -> bool:
        lws, ws = env.get("LOCAL_WORLD_SIZE"), env.get("WORLD_SIZE")
        if lws and ws:
            return lws == ws
        return env.get("MASTER_ADDR", "") in ("localhost", "127.0.0.1", "::1")

    # -- transport helpers ---------------------------------------------------------------------
    def _to_transport(self, tensor: torch.Tensor) -> torch.Tensor:
        if tensor.device == self.device and tensor.is_contiguous():
            return tensor
        return tensor.detach().to(self.device).contiguous()

    @staticmethod
    def _back(tensor: torch.Tensor, moved: torch.Tensor) -> torch.Tensor:
        if moved is not tensor:
            with torch.no_grad():
                tensor.copy_(moved)
        return tensor

    # -- collectives ---------------------------------------------------------------------------
    def barrier(self) -> None:
        with self.timer.timed():
            if self.backend == "nccl":
                self._call("barrier", self._dist.barrier, device_ids=[self.local_rank])
            else:
                self._call("barrier", self._dist.barrier)

    def all_reduce_sum(self, tensor: torch.Tensor) -> torch.Tensor:
        check_tensor(tensor, "all_reduce_sum")
        with self.timer.timed():
            t = self._to_transport(tensor)
            self._call("all_reduce_sum", self._dist.all_reduce, t, op=self._dist.ReduceOp.SUM)
            return self._back(tensor, t)

    def broadcast(self, tensor: torch.Tensor, src: int = 0) -> torch.Tensor:
        check_tensor(tensor, "broadcast")
        check_src(src, self.world_size, "broadcast")
        with self.timer.timed():
            t = self._to_transport(tensor)
            self._call("broadcast", self._dist.broadcast, t, src=src)
            return self._back(tensor, t)

    def broadcast_object(self, obj: Any, src: int = 0) -> Any:
        """``src``'s plain value as JSON bytes: one fixed-size frame, a second for long payloads.
        No pickle crosses the wire."""
        check_src(src, self.world_size, "broadcast_object")
        with self.timer.timed():
            frame = torch.zeros(_FRAME, dtype=torch.uint8)
            data = b""
            if self.rank == src:
                data = encode_object(obj)
                head = struct.pack("<q", len(data)) + data[:_FRAME - 8]
                frame[:len(head)] = torch.frombuffer(bytearray(head), dtype=torch.uint8)
            t = self._to_transport(frame)
            self._call("broadcast_object", self._dist.broadcast, t, src=src)
            raw = t.cpu().numpy().tobytes()
            (length,) = struct.unpack("<q", raw[:8])
            if length > _FRAME - 8:
                rest = torch.zeros(length - (_FRAME - 8), dtype=torch.uint8)
                if self.rank == src:
                    rest.copy_(torch.frombuffer(bytearray(data[_FRAME - 8:]), dtype=torch.uint8))
                r = self._to_transport(rest)
                self._call("broadcast_object", self._dist.broadcast, r, src=src)
                payload = raw[8:] + r.cpu().numpy().tobytes()
            else:
                payload = raw[8:8 + length]
        return obj if self.rank == src else decode_object(payload)

    def gather(self, tensor: torch.Tensor, dst: int = 0) -> list[torch.Tensor] | None:
        """Every rank's ``tensor`` (same shape and dtype everywhere) on ``dst``; None elsewhere."""
        check_tensor(tensor, "gather")
        check_src(dst, self.world_size, "gather")
        with self.timer.timed():
            t = self._to_transport(tensor)
            out = [torch.empty_like(t) for _ in range(self.world_size)] if self.rank == dst else None
            self._call("gather", self._dist.gather, t, gather_list=out, dst=dst)
            return [o.to(tensor.device) for o in out] if out is not None else None

    def gather_object(self, obj: Any, dst: int = 0) -> list[Any] | None:
        """Every rank's plain value on ``dst`` (as JSON; lengths first, then padded payloads)."""
        check_src(dst, self.world_size, "gather_object")
        check_plain(obj)
        data = encode_object(obj)
        with self.timer.timed():
            lengths = torch.zeros(self.world_size, dtype=torch.int64)
            lengths[self.rank] = len(data)
            self.all_reduce_sum(lengths)
            width = int(lengths.max())
            buf = torch.zeros(width, dtype=torch.uint8)
            if data:
                buf[:len(data)] = torch.frombuffer(bytearray(data), dtype=torch.uint8)
            parts = self.gather(buf, dst=dst)
        if parts is None:
            return None
        return [decode_object(p[:int(lengths[r])].cpu().numpy().tobytes()) for r, p in enumerate(parts)]

    def average_gradients(self, parameters: Iterable[torch.Tensor]) -> None:
        """Average ``p.grad`` over ranks, coalesced into one all-reduce per dtype (see
        :func:`lzk_comm.common.average_gradients`)."""
        with self.timer.timed():
            average_gradients(parameters, self.world_size, self.all_reduce_sum)

    def close(self) -> None:
        """Stop the heartbeat; destroy the process group this backend created (idempotent; safe
        after a failure)."""
        if self._heartbeat is not None:
            self._heartbeat.stop()
            self._heartbeat = None
        if self._owned:
            self._owned = False
            try:
                if self._dist.is_initialized():
                    self._dist.destroy_process_group()
            except Exception:  # noqa: BLE001 - a dead peer must not mask the original error
                pass
