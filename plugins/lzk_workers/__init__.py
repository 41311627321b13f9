"""lzk_workers: first-party lzkernel plugin providing collectors and evaluators.

* ``episode`` collector (:mod:`lzk_workers.collector`), ``segment`` collector
  (:mod:`lzk_workers.segment_collector`), ``episodes`` evaluator (:mod:`lzk_workers.evaluator`),
  all built on :mod:`lzk_workers.rollout`.
"""
