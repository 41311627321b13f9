"""lzk_comm: first-party lzkernel plugin providing comm backends.

* ``local`` (:mod:`lzk_comm.local`): one process, identity collectives (the default).
* ``gloo`` / ``nccl`` (:mod:`lzk_comm.torch_dist`): ``torch.distributed`` process groups
  initialised from torchrun's environment, with a configurable timeout.
* ``threads`` (:mod:`lzk_comm.threads`): W ranks as threads of one process with real
  collectives; :func:`lzk_comm.threads.run_ranks` runs them (tests).

Shared helpers (coalesced gradient averaging, parameter broadcast, the object codec, the
collective-time counter) live in :mod:`lzk_comm.common`. See ``docs/distributed.md``.
"""
