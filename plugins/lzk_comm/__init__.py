"""lzk_comm: first-party lzkernel plugin."""
