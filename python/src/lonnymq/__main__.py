"""``python -m lonnymq``: the same as the ``lonnymq`` command."""

from .cli.main import main

raise SystemExit(main())
