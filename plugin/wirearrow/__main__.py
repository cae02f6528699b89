"""``python -m wirearrow``: the command line (see :mod:`wirearrow.cli`)."""

from wirearrow.cli import main

raise SystemExit(main())
