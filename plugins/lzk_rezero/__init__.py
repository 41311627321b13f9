"""lzk_rezero: first-party lzkernel plugin."""
