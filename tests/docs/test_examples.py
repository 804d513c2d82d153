"""Every code example of the README, the docs and the public docstrings runs as it says.

One test per example, with the id ``file:line`` (the fence, the ``Example::`` line or
the first ``>>>`` line); ``tests/docs/examples.py`` finds them and decides each one's
mode. Every run gets a plain environment (no launcher variable, no pytest variable) and
a parent-side time limit, so a broken example fails and never hangs the suite:

- ``python`` programs and doctests: the first such test runs all the selected ones at
  once in one runner interpreter that forks a child process per example (see
  ``examples.py``): each example is still a process of its own, and only one
  ``import torch`` is paid for all of them. The other tests read their result.
- ``ranks``: each block is written to a test file of its own in a temporary directory,
  and the first such test runs all the selected files in one fresh ``python -m pytest``
  (helios-pg's plugin loaded through its entry point, warnings as errors), so pytest's
  start and the plugin's forkserver are paid once; the JUnit report gives each file's
  outcomes, and a block must pass at least one test and fail or error none. The session
  runs through ``tests.support.procs.run_processes``, whose limit kills the whole process
  session, ranks and forkserver included, where ``pytester.runpytest_subprocess`` would
  kill pytest only; each ranks test also has the plugin's own deadline.
- ``torchrun N``: a script run by ``torchrun --standalone --nproc-per-node N``; must exit 0.
  These are ``slow`` (several interpreters importing torch).
- ``shell``: ``bash`` with ``set -euo pipefail`` from the repository root, the workspace
  environment's ``bin`` first on ``PATH`` and ``uv run`` told not to sync (the tests run
  in the workspace environment as it is, without the network); must exit 0. These are
  ``slow``, and are skipped inside another shell example's run (a ``uv run pytest`` in
  the docs must not run itself again).
- ``skip``: skipped with its reason. ``invalid``: fails with what is wrong.

The tests at the end check this machinery on broken examples of each kind.
"""

from __future__ import annotations

import json
import os
import re
import sys
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import NoReturn

import pytest

from tests.docs.examples import (
    IN_PROCESS_MODES,
    Example,
    collect,
    parse_docstring,
    parse_markdown,
)
from tests.support.procs import (
    Finished,
    plain_environment,
    results,
    run_processes,
    torchrun_command,
)

REPO_ROOT = Path(__file__).resolve().parents[2]
EXAMPLES_SCRIPT = Path(__file__).resolve().with_name("examples.py")
NESTED = "HELIOS_DOCS_SHELL_EXAMPLE"
PROGRAM_LIMIT = 60.0
RANKS_LIMIT = 90.0
TORCHRUN_LIMIT = 180.0
SHELL_LIMIT = 540.0
RANKS_INI = "[pytest]\nfilterwarnings =\n    error\n"

EXAMPLES = [example for example in collect(REPO_ROOT) if example.mode != "output"]
IN_PROCESS_COUNT = sum(example.mode in IN_PROCESS_MODES for example in EXAMPLES)
RANKS_COUNT = sum(example.mode == "ranks" for example in EXAMPLES)
# The first program, doctest or ranks test to run waits for the whole batch.
BATCH_TIMEOUT = max((PROGRAM_LIMIT + 5) * IN_PROCESS_COUNT, RANKS_LIMIT * RANKS_COUNT) + 120

Cases = list[tuple[str, str, str]]
"""A ranks module's tests: ``(name, outcome, detail)``; outcome ``passed``, ``failed``,
``error`` or ``skipped``."""


def _marks(example: Example) -> list[pytest.MarkDecorator]:
    if example.mode == "skip":
        return [pytest.mark.skip(reason=f"{example.location}: {example.reason}")]
    if example.mode in IN_PROCESS_MODES or example.mode == "ranks":
        return [pytest.mark.timeout(BATCH_TIMEOUT)]
    if example.mode == "torchrun":
        return [pytest.mark.slow, pytest.mark.timeout(TORCHRUN_LIMIT + 60)]
    if example.mode == "shell":
        return [pytest.mark.slow, pytest.mark.timeout(SHELL_LIMIT + 60)]
    return []


def example_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """A user's plain environment: no launcher or pytest variable, the workspace first."""
    env = {
        name: value
        for name, value in plain_environment(os.environ).items()
        if not name.startswith("PYTEST_")
    }
    env["PATH"] = os.pathsep.join(filter(None, [str(Path(sys.executable).parent), env.get("PATH")]))
    env["PYTHONUNBUFFERED"] = "1"
    # Gloo picks its interface from the host name; keep every group on loopback.
    env["GLOO_SOCKET_IFNAME"] = "lo"
    env.update(extra or {})
    return env


def gpus_for(nproc: int) -> dict[str, str]:
    """Hide CUDA where there are GPUs but fewer than ranks: the examples then run on gloo.

    With CUDA, ``helios_pg.init`` picks nccl and binds ``cuda:LOCAL_RANK``, which needs
    one GPU per rank on the node; an example on more ranks than GPUs runs on the CPU.
    """
    import torch

    count = torch.cuda.device_count()
    return {"CUDA_VISIBLE_DEVICES": ""} if 0 < count < nproc else {}


def shell_ranks(source: str) -> int:
    """The most ranks per node that a shell example starts (``--nproc-per-node N``)."""
    found = re.findall(r"--nproc[-_]per[-_]node[= ](\d+)", source)
    return max([1, *map(int, found)])


def _fail(example: Example, what: str, finished: Finished | None = None) -> NoReturn:
    detail = f"\n{finished.describe()}" if finished is not None else ""
    pytest.fail(f"{example.location}: {what}{detail}", pytrace=False)


# --- Running each kind --------------------------------------------------------------


@dataclass(frozen=True)
class Batch:
    """The results of the python programs, doctests and ranks blocks of one run.

    Attributes:
        programs: Each program's and doctest's result from the runner, by id.
        ranks: Each ranks block's tests, by id.
        runs: The runner's and the pytest session's processes, for failure reports.
    """

    programs: dict[str, dict[str, object]]
    ranks: dict[str, Cases]
    runs: list[Finished]


def run_batch(
    programs: Sequence[Example],
    ranks: Sequence[Example],
    directory: Path,
    limit: float = PROGRAM_LIMIT,
) -> Batch:
    """Run the programs and doctests in one runner and the ranks blocks in one pytest.

    The two start together: the ranks tests mostly wait (on timeouts the docs show), so
    the runner's work hides in their waits.

    Args:
        programs: Examples of a mode in ``IN_PROCESS_MODES``.
        ranks: Examples of mode ``ranks``: a test file each, numbered as in their
            documentation file.
        directory: An empty directory for the files of both runs.
        limit: Seconds each program or doctest may run.
    """
    commands: list[list[str]] = []
    if programs:
        jobs = directory / "jobs.json"
        jobs.write_text(json.dumps([asdict(example) for example in programs]), encoding="utf-8")
        commands.append([sys.executable, str(EXAMPLES_SCRIPT), str(jobs), str(limit)])
    modules: dict[str, str] = {}
    report = directory / "report.xml"
    if ranks:
        (directory / "pytest.ini").write_text(RANKS_INI, encoding="utf-8")
        for index, example in enumerate(ranks):
            name = f"test_example_{index}"
            # Blank lines in front: tracebacks give the documentation file's line numbers.
            source = "\n" * (example.first_line - 1) + example.source
            (directory / f"{name}.py").write_text(source, encoding="utf-8")
            modules[name] = example.location
        command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q"]
        command += ["--continue-on-collection-errors", f"--junitxml={report}"]
        commands.append([*command, *(f"{name}.py" for name in modules)])
    total = max((limit + 5) * len(programs), RANKS_LIMIT * len(ranks)) + 60
    runs = run_processes(
        [(command, example_env()) for command in commands], limit=total, cwd=directory
    )
    found: dict[str, Cases] = {location: [] for location in modules.values()}
    if report.exists():
        for case in ET.parse(report).getroot().iter("testcase"):
            module = (case.get("classname") or case.get("name") or "").split(".")[0]
            if module not in modules:
                continue
            outcome, detail = "passed", ""
            for kind in ("failure", "error", "skipped"):
                element = case.find(kind)
                if element is not None:
                    outcome = {"failure": "failed"}.get(kind, kind)
                    detail = element.text or element.get("message") or ""
                    break
            found[modules[module]].append((str(case.get("name")), outcome, detail))
    program_results = {
        str(result["id"]): result for result in results(runs[:1] if programs else [])
    }
    return Batch(programs=program_results, ranks=found, runs=runs)


def check_in_process(example: Example, batch: Batch) -> None:
    """Fail, naming the example, unless its run has no problem."""
    result = batch.programs.get(example.location)
    if result is None:
        _fail(example, "the example runner gave no result for this example", batch.runs[0])
    problems = result["problems"]
    assert isinstance(problems, list)
    if problems:
        output = str(result["output"]).rstrip() or "(none)"
        text = "\n\n".join(str(problem) for problem in problems)
        what = "doctest" if example.mode == "doctest" else "program"
        _fail(example, f"the {what} failed:\n{text}\n--- its output ---\n{output}")


def check_ranks(example: Example, batch: Batch) -> None:
    """Fail, naming the example, unless its module passed a test and failed none."""
    cases = batch.ranks.get(example.location, [])
    if not cases:
        _fail(example, "the ranks test module reported no test", batch.runs[-1])
    bad = [case for case in cases if case[1] in ("failed", "error")]
    if bad or not any(outcome == "passed" for _, outcome, _ in cases):
        summary = ", ".join(f"{name}: {outcome}" for name, outcome, _ in cases)
        details = "\n\n".join(f"--- {name} ({outcome}) ---\n{text}" for name, outcome, text in bad)
        _fail(
            example,
            f"the ranks test module (its lines numbered as in {example.relpath}) must pass a "
            f"test and fail none; {summary}\n{details}",
        )


def run_torchrun(example: Example, directory: Path) -> None:
    """Fail, naming the example, unless torchrun on its ranks exits 0."""
    script = directory / "example.py"
    script.write_text(example.source, encoding="utf-8")
    command = torchrun_command("--standalone", f"--nproc-per-node={example.nproc}", str(script))
    env = example_env(gpus_for(example.nproc))
    [finished] = run_processes([(command, env)], limit=TORCHRUN_LIMIT, cwd=directory)
    if finished.returncode != 0:
        _fail(example, f"torchrun on {example.nproc} ranks failed", finished)


def run_shell(example: Example, limit: float = SHELL_LIMIT) -> None:
    """Fail, naming the example, unless bash runs it with exit status 0."""
    command = ["bash", "-c", "set -euo pipefail\n" + example.source]
    env = example_env(
        {
            NESTED: "1",
            "VIRTUAL_ENV": str(Path(sys.executable).parents[1]),
            "UV_NO_SYNC": "1",
            "UV_FROZEN": "1",
            **gpus_for(shell_ranks(example.source)),
        }
    )
    [finished] = run_processes([(command, env)], limit=limit, cwd=REPO_ROOT)
    if finished.returncode != 0:
        _fail(example, "the shell example failed", finished)


# --- One test per example -----------------------------------------------------------


def _selected(request: pytest.FixtureRequest, modes: frozenset[str]) -> list[Example]:
    """The examples of these modes among the tests this session runs."""
    selected: list[Example] = []
    for item in request.session.items:
        callspec = getattr(item, "callspec", None)
        example = callspec.params.get("example") if callspec is not None else None
        if isinstance(example, Example) and example.mode in modes:
            selected.append(example)
    return selected


@pytest.fixture(scope="session")
def batch(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Batch:
    """Every selected python program, doctest and ranks block, run once."""
    programs = _selected(request, IN_PROCESS_MODES)
    ranks = _selected(request, frozenset({"ranks"}))
    return run_batch(programs, ranks, tmp_path_factory.mktemp("examples"))


@pytest.mark.parametrize(
    "example",
    [pytest.param(example, id=example.location, marks=_marks(example)) for example in EXAMPLES],
)
def test_example(example: Example, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    if example.mode == "invalid":
        _fail(example, example.reason)
    elif example.mode in IN_PROCESS_MODES:
        check_in_process(example, request.getfixturevalue("batch"))
    elif example.mode == "ranks":
        check_ranks(example, request.getfixturevalue("batch"))
    elif example.mode == "torchrun":
        run_torchrun(example, tmp_path)
    elif example.mode == "shell":
        if os.environ.get(NESTED):
            pytest.skip("a shell example does not run inside another shell example's run")
        run_shell(example)
    else:
        pytest.fail(f"{example.location}: unknown mode {example.mode!r}")


# --- The machinery fails on broken examples -----------------------------------------

PAGE = "intro\n\n"  # a broken block starts on line 3


@pytest.mark.parametrize(
    ("block", "line", "message"),
    [
        pytest.param("```console\n$ ls\n```\n", 3, "needs `<!-- example: shell -->`", id="bare"),
        pytest.param("<!-- example: skip -->\n```bash\nls\n```\n", 4, "needs a reason", id="skip"),
        pytest.param("<!-- example: skip:  -->\n```sh\nls\n```\n", 4, "needs a reason", id="skip:"),
        pytest.param(
            "<!-- example: rank 2 -->\n```python\npass\n```\n", 4, "unknown example kind 'rank 2'"
        ),
        pytest.param("<!-- example: torchrun -->\n```python\npass\n```\n", 4, "number of ranks"),
        pytest.param("<!-- example: torchrun 0 -->\n```python\npass\n```\n", 4, "positive"),
        pytest.param("<!-- example ranks -->\n```python\npass\n```\n", 4, "with a colon"),
        pytest.param("<!-- example: shell -->\n```python\npass\n```\n", 4, "for console or bash"),
        pytest.param("<!-- example: ranks -->\n```bash\nls\n```\n", 4, "for python blocks"),
        pytest.param("<!-- example: shell -->\n```text\nhello\n```\n", 4, "is output"),
        pytest.param("```python\nprint(1)\n", 3, "never closed", id="unclosed"),
        pytest.param("````{note}\n```python\npass\n```\n", 3, "never closed", id="unclosed-note"),
        pytest.param(
            "<!-- example: ranks -->\n\n```python\npass\n```\n", 3, "not on the line right before"
        ),
        pytest.param(
            "<!-- example: shell -->\n```console\n$ ls\nREADME.md\n```\n", 4, "line 6 has no `$ `"
        ),
        pytest.param(
            "```python\nimport pytest\n\n@pytest.mark.ranks(2)\ndef test_x(): ...\n```\n",
            3,
            "`<!-- example: ranks -->`",
            id="ranks-unmarked",
        ),
    ],
)
def test_the_collector_reports_a_broken_block(block: str, line: int, message: str) -> None:
    found = parse_markdown(PAGE + block, "/docs/page.md", "docs/page.md")
    invalid = [example for example in found if example.mode == "invalid"]
    assert len(invalid) == 1, found
    assert invalid[0].location == f"docs/page.md:{line}"
    assert message in invalid[0].reason


def test_the_collector_reads_every_kind() -> None:
    text = "\n".join(
        [
            "```python",  # 1
            "print(1)",
            "```",
            "<!-- example: ranks -->",
            "```python",  # 5
            "import pytest",
            "```",
            "<!-- example: torchrun 4 -->",
            "~~~python",  # 9
            "print(2)",
            "~~~",
            "<!-- example: shell -->",
            "```console",  # 13
            "$ uv run python -m helios_env \\",
            "    --json",
            "```",
            "<!-- example: skip: needs two nodes -->",
            "```bash",  # 18
            "srun true",
            "```",
            "````{note}",  # 21
            "- a list:",
            "",
            "  ```{code-block} python",  # 24
            "  :caption: nested",
            "",
            "  x = 1",
            "  ```",
            "````",
            "```pycon",  # 30
            ">>> 1 + 1",
            "2",
            "```",
            "```text",  # 34
            "output",
            "```",
        ]
    )
    found = {example.line: example for example in parse_markdown(text, "/p.md", "p.md")}
    assert {line: example.mode for line, example in found.items()} == {
        1: "python",
        5: "ranks",
        9: "torchrun",
        13: "shell",
        18: "skip",
        24: "python",
        30: "doctest",
        34: "output",
    }
    assert found[9].nproc == 4
    assert found[13].source == "uv run python -m helios_env \\\n    --json\n"
    assert found[18].reason == "needs two nodes"
    assert (found[24].source, found[24].first_line, found[24].indent) == ("x = 1\n", 27, 2)


DOCSTRING = """Summary.

    Example::

        x = 1

    Example:
        Just words.

    Examples:
        >>> 1 + 1
        2
    """


def test_the_collector_reads_docstring_examples() -> None:
    found = {e.line: e for e in parse_docstring(DOCSTRING, 10, "/m.py", "m.py")}
    assert {line: example.mode for line, example in found.items()} == {
        12: "python",
        16: "invalid",
        20: "doctest",
    }
    assert (found[12].source, found[12].first_line, found[12].indent) == ("x = 1\n", 14, 8)
    assert "neither `>>>` lines nor a literal block" in found[16].reason


BROKEN_PAGE = """\
# A page

```python
import os

value = int(os.environ.get("NOT_SET_ANYWHERE", "x"))
```

```python
import sys

sys.exit(3)
```

```python
import os

os._exit(4)
```

```python
import warnings

warnings.warn("careful", UserWarning, stacklevel=1)
```

```pycon
>>> 1 + 1
3
```

```python
print("fine")
```
"""


def test_a_broken_program_or_doctest_fails_naming_its_file_and_line(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(BROKEN_PAGE, encoding="utf-8")
    examples = parse_markdown(BROKEN_PAGE, str(page), "page.md")
    batch = run_batch(examples, [], tmp_path, limit=30)
    expected = {
        "page.md:3": f'File "{page}", line 6, in <module>',
        "page.md:9": "exited with status 3",
        "page.md:15": "ended before its checks ran (exit status 4)",
        "page.md:21": "UserWarning: careful",
        "page.md:27": f'File "{page}", line 28',
    }
    for example in examples:
        if example.location not in expected:
            check_in_process(example, batch)
            continue
        with pytest.raises(pytest.fail.Exception) as failure:
            check_in_process(example, batch)
        assert str(failure.value).startswith(f"{example.location}: the ")
        assert expected[example.location] in str(failure.value)
    assert "ValueError: invalid literal for int()" in str(batch.programs["page.md:3"]["problems"])


@pytest.mark.slow
def test_a_hang_or_a_group_left_behind_fails(tmp_path: Path) -> None:
    page = "\n".join(
        [
            "```python",
            "import time",
            "time.sleep(600)",
            "```",
            "```python",
            "from helios_pg import init",
            "init()",
            "```",
        ]
    )
    examples = parse_markdown(page, str(tmp_path / "page.md"), "page.md")
    batch = run_batch(examples, [], tmp_path, limit=5)
    messages = ["still running after the 5 s limit", "left the default process group"]
    for example, message in zip(examples, messages, strict=True):
        with pytest.raises(pytest.fail.Exception, match=message):
            check_in_process(example, batch)
    assert 'page.md", line 3 in <module>' in str(batch.programs["page.md:1"]["output"])  # stacks


@pytest.mark.slow
def test_a_failing_ranks_block_fails_naming_the_test(tmp_path: Path) -> None:
    page = "\n".join(
        [
            "<!-- example: ranks -->",
            "```python",
            "import pytest",
            "",
            "@pytest.mark.ranks(2)",
            "def test_disagree(dist_info):",
            "    assert dist_info.rank == 0, 'rank 1 disagrees'",
            "```",
            "<!-- example: ranks -->",
            "```python",
            "import pytest",
            "",
            "@pytest.mark.ranks(2)",
            "def test_agree(dist_info):",
            "    assert dist_info.world_size == 2",
            "```",
        ]
    )
    examples = parse_markdown(page, str(tmp_path / "page.md"), "page.md")
    batch = run_batch([], examples, tmp_path)
    with pytest.raises(pytest.fail.Exception, match=r"(?s)page.md:2: .*test_disagree: failed"):
        check_ranks(examples[0], batch)
    assert "rank 1 disagrees" in str(batch.ranks["page.md:2"])
    check_ranks(examples[1], batch)


@pytest.mark.slow
def test_a_failing_shell_block_fails() -> None:
    [example] = parse_markdown(
        "<!-- example: shell -->\n```bash\ntrue | false\necho unreachable\n```\n", "/p.md", "p.md"
    )
    with pytest.raises(pytest.fail.Exception, match=r"p.md:2: the shell example failed"):
        run_shell(example, limit=30)
