"""helios_log in a fresh interpreter: what it imports, and logging.basicConfig at startup."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.support.procs import base_env

IMPORTS = """
import json, logging, sys
before = set(sys.modules)
import helios_log
helios_log.global_print("printed")
helios_log.local_print("printed")
helios_log.on_global_rank()(print)("decorated")
helios_log.setup_rank_logging(stream=sys.stdout)
logging.getLogger("demo").info("logged")
new = {name.partition(".")[0] for name in set(sys.modules) - before}
print(json.dumps(sorted(new - set(sys.stdlib_module_names))))
"""

BASIC_CONFIG = """
import logging
from helios_log import RankFieldsFilter, RankFilter
handler = logging.StreamHandler()
handler.addFilter(RankFilter(0, all_ranks_level=logging.WARNING))
handler.addFilter(RankFieldsFilter())
logging.basicConfig(
    level=logging.INFO, format="%(rank_prefix)s %(levelname)s %(message)s", handlers=[handler]
)
logging.info("info")
logging.warning("warning")
"""


def run_python(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code],
        env=base_env(env),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )


def test_helios_log_imports_nothing_but_the_stdlib_and_helios_env() -> None:
    done = run_python(IMPORTS)
    *printed, last = done.stdout.splitlines()
    assert json.loads(last) == ["helios_env", "helios_log"]
    assert printed == ["printed", "printed", "decorated", "[rank 0/1] INFO demo: logged"]


def test_basic_config_prefixes_lines_on_rank_zero() -> None:
    done = run_python(BASIC_CONFIG, RANK="0", WORLD_SIZE="4", LOCAL_RANK="0", LOCAL_WORLD_SIZE="2")
    assert done.stderr.splitlines() == ["[rank 0/4] INFO info", "[rank 0/4] WARNING warning"]


def test_basic_config_logs_only_warnings_on_other_ranks() -> None:
    done = run_python(BASIC_CONFIG, RANK="3", WORLD_SIZE="4", LOCAL_RANK="1", LOCAL_WORLD_SIZE="2")
    assert done.stderr.splitlines() == ["[rank 3/4] WARNING warning"]
