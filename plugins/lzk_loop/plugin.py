"""Entry point of lzk_loop. The loop skeleton is a library for trainer plugins; it registers
no components, but is listed by ``lzkernel plugins`` with its version like every plugin."""
