"""`python -m inferq`: the `inferq` command."""

import sys

from inferq.cli import main

sys.exit(main())
