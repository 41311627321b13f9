"""lzk_workers: first-party lzkernel plugin."""
