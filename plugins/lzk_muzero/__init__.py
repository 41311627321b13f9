"""lzk_muzero: first-party lzkernel plugin."""
