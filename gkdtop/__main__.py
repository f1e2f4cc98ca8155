"""`python -m gkdtop`: the same as the `gkdtop` command."""

from gkdtop.cli import main

raise SystemExit(main())
