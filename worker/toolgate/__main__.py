"""``python -m toolgate``: the same as the ``toolgate`` command."""

from toolgate.cli import main

raise SystemExit(main())
