"""A broken example fails, saying why and naming its file and line."""

from __future__ import annotations

from pathlib import Path

import pytest
from sybil.example import SybilFailure

from tests.docs import sybil_config as config

CASES = [  # a block (after its marker, if any), and what its test says
    ("```python\nimport os\nint(os.environ['NOT_SET_ANYWHERE'])\n```", 'md", line 3, in <module>'),
    ("```python\nraise SystemExit(3)\n```", "the example exited with status 3"),
    ("```python\nimport warnings\nwarnings.warn('careful')\n```", "UserWarning: careful"),
    ("```pycon\n>>> 1 + 1\n3\n```", "Expected:\n    3\nGot:\n    2"),
    ("```python\nimport helios_pg\nhelios_pg.init()\n```", "left the default process group"),
    ("<!-- example: rank 2 -->\n```python\npass\n```", "unknown marker ': rank 2'"),
    ("```console\nls\n```", "a console block needs <!-- example: shell -->"),
    ("<!-- example: skip -->\n```bash\nls\n```", "unknown marker ': skip'"),  # no reason
    ("<!-- example: skip: not here -->\n```bash\nls\n```", "page.md:32: not here"),
    ("```python\nprint('fine')\n```", "passed"),
]
MODULE = '''def f():
    """Nothing.

    Example:
        f()

    Examples:
        >>> f()
        1
    """
'''


PROGRAM = "```python\nimport helios_env\nprint(helios_env.get_dist_info(), 'in 0.25 s')\n```\n"
STALE = "DistributedInfo(local_rank=0, rank=0, local_world_size=1, world_size=1) in 0.25 s"
TEMPLATE = "<!-- output: template in tests.docs.sybil_config: two ranks -->\n```text\n"
SAMPLES = [  # blocks ending in a sample output, and what the test of each block says
    (PROGRAM + "<!-- output: above -->\n```text\n" + STALE, ["passed", "no line of the output"]),
    (PROGRAM + "<!-- output: above -->\n```\nDistributedInfo(local_rank=0, ...) in 3.5 s",
     ["passed"] * 2),
    ("<!-- output: run: echo '10.1.2.3:4242 pid 17'; printf 'a\\nb\\nc\\n' -->\n```text\n"
     "127.0.0.1:29500 pid 2\n...\nc", ["passed"]),
    ("<!-- output: run: printf 'a\\nb\\nc\\n' -->\n```text\nc\nb", ["not together"]),
    ("<!-- output: run: exit 3 -->\n```text\n", ["`exit 3`, which prints the sample, failed"]),
    ("```text\nunmarked", ["an output block needs <!-- output: WHAT PRINTS IT -->"]),
    ("<!-- output: anywhere -->\n```text\n", ["unknown output marker ': anywhere'"]),
    ("<!-- output: above -->\n```python\npass", ["marks a text block, not a python block"]),
    ("<!-- example: skip: no -->\n```python\n```\n<!-- output: above -->\n```text\n",
     ["page.md:", "needs a program, torchrun, shell or ranks example above"]),
    (TEMPLATE + "`x`, which printed the sample, failed: exit 3", ["fits none of the"]),
    (TEMPLATE + "`x`, which prints the sample, failed: exit 3", ["only its shape is checked"]),
    ("<!-- output: skip: not here -->\n```text\n", [": not here"]),
]  # fmt: skip


def outcomes(path: Path) -> list[str]:
    """Each example's outcome: "passed", the skip's reason or the failure's message."""
    found = []
    for example in (config.MARKDOWN if path.suffix == ".md" else config.DOCSTRINGS).parse(path):
        try:
            example.evaluate()
            found.append("passed")
        except (SybilFailure, pytest.skip.Exception) as outcome:
            found.append(str(outcome))
    return found


def test_broken_examples_fail(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "page.md").write_text("\n".join(block for block, _ in CASES) + "\n")
    for (_, expected), outcome in zip(CASES, outcomes(tmp_path / "page.md"), strict=True):
        assert expected in outcome
    (tmp_path / "broken_docstrings.py").write_text(MODULE)
    monkeypatch.syspath_prepend(tmp_path)
    section, doctest = outcomes(tmp_path / "broken_docstrings.py")
    assert "an Example: section without `>>>` lines" in section
    assert "Expected:\n    1\nGot nothing" in doctest


def test_a_stale_sample_output_fails(tmp_path: Path) -> None:
    (tmp_path / "page.md").write_text("\n```\n".join(blocks for blocks, _ in SAMPLES) + "\n```\n")
    expected = [outcome for _, found in SAMPLES for outcome in found]
    for wanted, outcome in zip(expected, outcomes(tmp_path / "page.md"), strict=True):
        assert wanted in outcome


@pytest.mark.slow
def test_a_failing_ranks_test_fails(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTHONPATH", str(config.REPO_ROOT))
    pytester.makeconftest(
        "from tests.docs.sybil_config import DocFile, ranks_batch\n"
        "def pytest_collect_file(file_path, parent):\n"
        "    if file_path.suffix == '.md':\n"
        "        return DocFile.from_parent(parent, path=file_path)\n"
    )
    block = "<!-- example: ranks -->\n```python\nimport pytest\n\n@pytest.mark.ranks(2)\n{}```\n"
    disagree = "def test_disagree(dist_info):\n    assert dist_info.rank == 0, 'rank 1 disagrees'\n"
    agree = "def test_agree(dist_info):\n    assert dist_info.world_size == 2\n"
    failing = block.replace("ranks", "ranks failing", 1).format(disagree)
    report = "<!-- output: above -->\n```text\nrank 1 of 2 failed:\n...\nAssertionError: {}\n```\n"
    pages = [
        block.format(disagree),
        block.format(agree),
        failing,
        report.format("rank 1 disagrees"),
    ]
    pytester.makefile(".md", page="".join([*pages, failing, report.format("rank 2 disagrees")]))
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", timeout=240)
    result.assert_outcomes(failed=2, passed=4)
    result.stdout.fnmatch_lines(["*test_0.py (numbered as on the page) must pass a test*"])
    result.stdout.fnmatch_lines(["*no line of the output reads 'AssertionError: rank 2 disagrees'"])
    assert "rank 1 disagrees" in result.stdout.str()


@pytest.mark.slow
def test_a_hang_or_a_failing_shell_block_fails(tmp_path: Path) -> None:
    (tmp_path / "page.md").write_text("```python\nimport time\ntime.sleep(600)\n```\n")
    [example] = config.MARKDOWN.parse(tmp_path / "page.md")
    failure = config.run_forked(example, example.parsed, limit=3) or ""
    assert "still running after 3 s" in failure
    assert 'page.md", line 3 in <module>' in failure  # every thread's stack
    failure = config.run_command(config.Snippet("shell", "true | false\necho unreachable\n")) or ""
    assert "the shell example failed" in failure
