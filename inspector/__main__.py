"""`python -m inspector` runs the same entry point as `ckpt-inspector`."""

import sys

from inspector.cli import main

sys.exit(main())
