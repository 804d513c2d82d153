"""``python -m helios_env``: report the distributed environment of this process."""

from helios_env._report import main

raise SystemExit(main())
