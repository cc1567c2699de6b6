"""``python -m sloscope`` runs the command line."""

from sloscope.cli import main

raise SystemExit(main())
