"""lzk_sinks: first-party lzkernel plugin."""
