"""lzk_comm: first-party lzkernel plugin providing comm backends.

* ``local`` (:mod:`lzk_comm.local`): one process, identity collectives.
"""
