"""lzk_envs: first-party lzkernel plugin providing environments.

* ``gymnasium`` (:mod:`lzk_envs.gym`): an adapter for gymnasium envs with a Discrete action space,
  vectorised with same-step auto-reset.
* ``openspiel`` (:mod:`lzk_envs.openspiel`): two-player board games from OpenSpiel, with a
  batched simulator for search (:mod:`lzk_envs.openspiel_sim`) and opponents
  (:mod:`lzk_envs.board_bots`, :mod:`lzk_envs.tictactoe_solver`).
"""
