"""Entry point of the lzk_workers plugin: registers its components with lzkernel."""
