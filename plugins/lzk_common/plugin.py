"""Entry point of lzk_common. The shared library of search-based policies registers no
components, but is listed by ``lzkernel plugins`` with its version like every plugin."""
