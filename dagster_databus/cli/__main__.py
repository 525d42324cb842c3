"""``python -m dagster_databus.cli``: the ``databus`` command."""

import sys

from dagster_databus.cli import main

sys.exit(main())
