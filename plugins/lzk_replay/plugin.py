"""Entry point of the lzk_replay plugin: registers its components with lzkernel."""
