"""helios_env never imports torch, at import time or when any function runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

from tests.env.launchers import torchrun_env

CALL_EVERYTHING = textwrap.dedent(
    """
    import io, json, sys
    import helios_env
    from helios_env._report import main

    helios_env.is_using_torchrun()
    helios_env.detect_launcher()
    helios_env.get_dist_info()
    helios_env.get_local_rank()
    helios_env.get_global_rank()
    helios_env.get_local_world_size()
    helios_env.get_world_size()
    helios_env.inspect_environment()
    main([], stdout=io.StringIO())
    main(["--json"], stdout=io.StringIO())
    print(json.dumps(sorted(m for m in sys.modules if m.partition(".")[0] == "torch")))
    """
)


def run_isolated(environ: dict[str, str]) -> list[str]:
    # -I: no PYTHONPATH, no user site, no current directory on sys.path.
    done = subprocess.run(
        [sys.executable, "-I", "-c", CALL_EVERYTHING],
        env={**os.environ, **environ},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    modules: list[str] = json.loads(done.stdout.splitlines()[-1])
    return modules


def test_a_plain_process_never_imports_torch() -> None:
    assert run_isolated({}) == []


def test_a_torchrun_worker_never_imports_torch() -> None:
    assert run_isolated(torchrun_env(rank=1, world_size=2)) == []
