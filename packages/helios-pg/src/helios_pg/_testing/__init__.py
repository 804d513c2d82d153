"""The machinery of helios-pg's pytest plugin; :mod:`helios_pg.pytest_plugin` holds its hooks.

- :mod:`helios_pg._testing._marker`: the ``ranks`` marker, read and checked;
- :mod:`helios_pg._testing._parent`: the pytest process's side, which starts the
  ranks of one test, waits for them and reports;
- :mod:`helios_pg._testing._forkserver`: the session's forkserver, which forks the
  ranks with torch already imported;
- :mod:`helios_pg._testing._rank`: one rank, which forms the group and runs the test;
- :mod:`helios_pg._testing._processes`: the ranks' processes, each leading a process
  group that is ended with the test;
- :mod:`helios_pg._testing._rollcall`: the hang watchdog's roll call, which the parent
  calls at a test's deadline to name the culprits.

Importing this package or its marker module imports neither torch nor the rest of
helios-pg.
"""

__all__: list[str] = []
