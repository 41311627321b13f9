"""Entry point of the lzk_muzero plugin: registers its components with lzkernel."""
