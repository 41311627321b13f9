"""``python -m lzkernel`` (used by torchrun): the same as the ``lzkernel`` console script."""
import sys

from lzkernel.cli import main

sys.exit(main())
