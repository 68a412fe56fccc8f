"""``python -m dp_pipeline.release`` is the ``dp-release`` command."""

import sys

from dp_pipeline.release.cli import main

sys.exit(main())
