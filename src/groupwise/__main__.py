"""`python -m groupwise ...` is the same as the `groupwise` command."""

from groupwise.cli import main

raise SystemExit(main())
