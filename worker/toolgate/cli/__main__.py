"""python -m toolgate.cli"""

from toolgate.cli import main

raise SystemExit(main())
