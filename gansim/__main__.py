"""`python -m gansim ...` is the `gansim` command."""

import sys

from gansim.cli.main import main

sys.exit(main())
