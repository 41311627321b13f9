"""Entry point of the lzk_schedule plugin: registers its components with lzkernel."""
