"""lzk_schedule: first-party lzkernel plugin."""
