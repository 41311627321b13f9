"""lzk_envs: first-party lzkernel plugin providing environments.

* ``gymnasium`` (:mod:`lzk_envs.gym`): an adapter for gymnasium envs with a Discrete action space,
  vectorised with same-step auto-reset.
"""
