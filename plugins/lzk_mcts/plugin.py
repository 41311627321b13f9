"""Entry point of the lzk_mcts plugin: registers its components with lzkernel."""
