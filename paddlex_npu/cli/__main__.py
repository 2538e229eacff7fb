"""``python -m paddlex_npu.cli``: the ``paddlex-npu`` command."""

import sys

from . import main

sys.exit(main())
