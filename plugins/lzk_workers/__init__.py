"""lzk_workers: first-party lzkernel plugin providing collectors and evaluators.

* ``episode`` collector (:mod:`lzk_workers.collector`), ``segment`` collector
  (:mod:`lzk_workers.segment_collector`), ``episodes`` evaluator (:mod:`lzk_workers.evaluator`),
  all built on :mod:`lzk_workers.rollout`.
* Two-player games against bots: the ``versus`` collector (:mod:`lzk_workers.versus_collector`)
  and evaluator (:mod:`lzk_workers.versus_evaluator`), on the same episode player with the
  acting wrapper and the agent's view of :mod:`lzk_workers.versus`; opponents as configured
  and checked in :mod:`lzk_workers.opponents`.
"""
