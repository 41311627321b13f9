"""Entry point of the lzk_envs plugin: registers its components with lzkernel."""
