"""``python -m helios_collectives``: check and benchmark a distributed setup."""

from helios_collectives._main.cli import main

raise SystemExit(main())
