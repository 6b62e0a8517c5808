"""``python -m toolgate.cli``: the same as the ``toolgate`` command (tests and scripts run it so)."""

from toolgate.cli import main

raise SystemExit(main())
