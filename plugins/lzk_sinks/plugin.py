"""Entry point of the lzk_sinks plugin: registers its components with lzkernel."""
