"""lzk_mcts: first-party lzkernel plugin."""
