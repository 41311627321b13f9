"""lzk_envs: first-party lzkernel plugin."""
