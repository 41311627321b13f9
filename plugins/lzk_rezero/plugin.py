"""Entry point of the lzk_rezero plugin: registers its components with lzkernel."""
