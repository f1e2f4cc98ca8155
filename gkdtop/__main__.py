from gkdtop.cli import main

raise SystemExit(main())
