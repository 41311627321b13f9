"""Entry point of the lzk_comm plugin: registers its components with lzkernel."""
