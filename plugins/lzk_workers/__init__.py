"""lzk_workers: first-party lzkernel plugin providing collectors and evaluators.

* ``episode`` collector (:mod:`lzk_workers.collector`), ``episodes`` evaluator
  (:mod:`lzk_workers.evaluator`), both built on :mod:`lzk_workers.rollout`.
"""
