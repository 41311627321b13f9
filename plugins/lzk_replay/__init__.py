"""lzk_replay: first-party lzkernel plugin."""
