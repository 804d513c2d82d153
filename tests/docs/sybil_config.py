"""How Sybil finds the code examples of the documentation and the docstrings, and runs them.

Markdown: the comment right before a fence says how it runs, ``<!-- example: ranks -->`` (a
pytest module with helios-pg's plugin; ``ranks failing``: one whose test must fail, to show
its report), ``torchrun N``, ``shell`` (bash, from the repository root) or ``skip: REASON``;
else a python block is a program, ``>>>`` or pycon a doctest, a console or bash block an
error. A text (or unlabelled) block is a sample output, and its comment says what prints
it: ``<!-- output: above -->`` (the example right above: a program, torchrun, shell or
ranks example), ``ranks session`` (the one pytest session of the ranks examples),
``run: COMMAND`` (a quick command, in a plain environment; ``... as rank N of FILE.json``:
in that rank's environment recorded from a real launcher, under ``tests/env/recorded``),
``template in PACKAGE: REASON`` (no run here prints it: checked for shape only, and counted
as a skip) or ``skip: REASON``. ``tests/docs/outputs.py`` says how a sample is compared.
Docstrings: the ``>>>`` lines are one doctest (the module's globals); an ``Example::`` or
``.. code-block:: python`` block is a program (a ranks module if it uses
``pytest.mark.ranks``).

A program or doctest runs in a child forked from pytest's process, torch imported once: its
own process, with a fresh ``__main__``, working directory and plain environment, pytest's
logging and exit handlers gone. It fails on an exception, a non-zero exit, a warning or a
process group left initialized; past its limit its stacks are dumped and its process group
killed. The ranks examples of a session run in one fresh ``python -m pytest``. A sample
output reuses its example's run where it ran in this process, else runs it.
"""

from __future__ import annotations

import atexit
import contextlib
import doctest
import faulthandler
import io
import json
import logging
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import traceback
import types
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import pytest
from sybil import Document, Example, Region, Sybil
from sybil.integration.pytest import SybilFile, SybilItem
from sybil.parsers.abstract.lexers import BlockLexer, LexerCollection
from sybil.parsers.markdown.lexers import RawFencedCodeBlockLexer
from sybil.parsers.myst.lexers import DirectiveLexer
from sybil.parsers.rest.lexers import END_PATTERN_TEMPLATE
from sybil.parsers.rest.lexers import DirectiveLexer as RestDirectiveLexer

from tests.docs.outputs import find, fits_template
from tests.support.procs import plain_environment, run_processes, torchrun_command

REPO_ROOT = Path(__file__).resolve().parents[2]
NESTED = "HELIOS_DOCS_SHELL_EXAMPLE"  # set in a shell example: the shell examples inside skip
LIMITS = {"python": 60.0, "doctest": 60.0, "run": 60.0, "ranks": 600.0, "torchrun": 180.0}
LIMITS["shell"] = 540.0
PYTHON, SHELLS = {"python", "py", "python3", "py3"}, {"console", "bash", "sh", "shell"}
OUTPUT_BLOCKS, RUNS = {"", "text"}, {"python", "ranks", "torchrun", "shell"}
MARKER = re.compile(r"^[ \t]*<!--\s*(?P<what>example|output)\b(?P<text>.*?)-->[ \t]*$", re.M)
KIND = re.compile(
    r":\s*(?:(?P<k>ranks(?P<fails> failing)?|shell)|torchrun\s+(?P<n>[1-9]\d*)"
    r"|skip\s*:\s*(?P<why>\S.*))"
)
ORIGIN = re.compile(
    r":\s*(?:(?P<above>above)|(?P<session>ranks session)"
    r"|run\s*:\s*(?P<run>\S.*?)(?:\s+as rank (?P<rank>\d+) of (?P<recording>\S+\.json))?"
    r"|template in (?P<package>[\w.]+)\s*:\s*(?P<shape>\S.*)|skip\s*:\s*(?P<why>\S.*))"
)
OUTPUTS: dict[tuple[str, int], str] = {}  # the output of each example run in this process
CODE = "code-block|code|sourcecode"
FENCES = LexerCollection(
    [
        RawFencedCodeBlockLexer(re.compile(r"(?P<info>[^\n]*)\n")),
        DirectiveLexer(CODE, mapping={"arguments": "info", "source": "source"}),
    ]
)
LITERAL = re.compile(r"^(?P<prefix>[ \t]*)Examples?::[ \t]*\n", re.M)
LITERALS = LexerCollection([BlockLexer(LITERAL, END_PATTERN_TEMPLATE), RestDirectiveLexer(CODE)])
SECTION = re.compile(r"^([ \t]*)Examples?:[ \t]*\n(?P<body>(?:\1[ \t]+\S.*\n|[ \t]*\n)*)", re.M)
SUMMARY = re.compile(r"^([A-Z]+) (?:\[\d+\] )?(test_\d+)\.py", re.M)


@dataclass(frozen=True)
class Snippet:
    """An example: its kind (python, doctest, ranks, torchrun, shell, output, template, skip
    or invalid), its code (a sample's text), ``line_offset`` lines below its region's first,
    and a skip's reason or a problem. ``fails``: a ranks example whose test must fail. A
    sample's ``origin`` is what its marker says prints it, ``producer`` the example above."""

    kind: str
    source: str = ""
    line_offset: int = 0
    nproc: int = 0
    reason: str = ""
    fails: bool = False
    origin: str = ""
    producer: Snippet | None = None

    def runs_as(self) -> str:
        """The kind of the run this example needs: a sample's is its producer's."""
        if self.kind != "output":
            return self.kind
        if self.producer is not None:
            return self.producer.kind
        return "ranks" if self.origin == "ranks session" else "run"


def _region(start: int, end: int, snippet: Snippet | str) -> Region:
    parsed = Snippet("invalid", reason=snippet) if isinstance(snippet, str) else snippet
    return Region(start, end, parsed, evaluate)


def _code(kind: str, text: str, lexed: Region, nproc: int = 0, fails: bool = False) -> Snippet:
    source = lexed.lexemes["source"]
    offset = text.count("\n", lexed.start, lexed.start + source.offset)
    return Snippet(kind, source, offset, nproc, fails=fails)


def _sample(text: str, lexed: Region, marker: str, above: Snippet | None) -> Snippet | str:
    """A sample output's check, or its marker's problem."""
    if (parsed := ORIGIN.fullmatch(marker.strip())) is None:
        kinds = "above, ranks session, run: COMMAND, template in PACKAGE: WHY, skip: WHY"
        return f"unknown output marker {marker.strip()!r}: {kinds}"
    if parsed["why"]:
        return Snippet("skip", reason=parsed["why"])
    sample = _code("output", text, lexed)
    if parsed["package"]:
        return Snippet("template", sample.source, reason=parsed["shape"], origin=parsed["package"])
    if parsed["above"] and (above is None or above.kind not in RUNS):
        return "<!-- output: above --> needs a program, torchrun, shell or ranks example above"
    origin = marker.strip().removeprefix(":").strip().removeprefix("run:").strip()
    producer = above if parsed["above"] else None
    return Snippet("output", sample.source, sample.line_offset, origin=origin, producer=producer)


def _fence(
    text: str, lexed: Region, language: str, marker: re.Match[str] | None, above: Snippet | None
) -> Snippet | str | None:
    """A fenced block's example, its problem, or None for a block that is neither."""
    source = lexed.lexemes["source"]
    session = language == "pycon" or (language in PYTHON and source.lstrip()[:3] == ">>>")
    if marker is None:
        if language in SHELLS:
            return f"a {language} block needs <!-- example: shell --> or <!-- ... skip: WHY -->"
        if language in OUTPUT_BLOCKS:
            return "an output block needs <!-- output: WHAT PRINTS IT --> or <!-- ... skip: WHY -->"
        if "pytest.mark.ranks" in source and not session:
            return "this block uses pytest.mark.ranks: mark it <!-- example: ranks -->"
        is_code = session or language in PYTHON
        return _code("doctest" if session else "python", text, lexed) if is_code else None
    if marker["what"] == "output":
        if language in OUTPUT_BLOCKS:
            return _sample(text, lexed, marker["text"], above)
        return f"<!-- output: ... --> marks a text block, not a {language} block"
    if (parsed := KIND.fullmatch(marker["text"].strip())) is None:
        kinds = "ranks, ranks failing, torchrun N, shell, skip: WHY"
        return f"unknown marker {marker['text'].strip()!r}: {kinds}"
    if parsed["why"]:
        return Snippet("skip", reason=parsed["why"])
    kind = "ranks" if parsed["fails"] else parsed["k"] or "torchrun"
    if (language in SHELLS) if kind == "shell" else (language in PYTHON and not session):
        return _code(kind, text, lexed, int(parsed["n"] or 0), fails=bool(parsed["fails"]))
    return f"`{kind}` does not fit a {language or 'plain'} block"


def parse_markdown(document: Document) -> Iterator[Region]:
    """One region per example of a page, and one per problem."""
    text, used, above = document.text, {-1}, None
    fences = [(lexed, str(lexed.lexemes["info"]).strip()) for lexed in FENCES(document)]
    literal = [(f.start, f.end) for f, info in fences if not info.startswith("{")]  # not {note}
    for lexed, info in fences:
        if info.startswith("{") or any(s < lexed.start < e for s, e in literal):
            continue  # a MyST directive, or a fence shown inside a literal block
        before = text.rfind("\n", 0, max(lexed.start - 1, 0)) + 1
        marker = MARKER.match(text, before, lexed.start - 1) if lexed.start else None
        used.add(marker.start() if marker else -1)
        language = info.split()[0].lower() if info else ""
        last = text[: lexed.end].rsplit("\n", 1)[-1].strip()
        if lexed.end == len(text) and not (len(last) >= 3 and set(last) in ({"`"}, {"~"})):
            yield _region(lexed.start, lexed.end, "this fence is never closed")
        elif found := _fence(text, lexed, language, marker, above):
            yield _region(lexed.start, lexed.end, found)
            above = found if isinstance(found, Snippet) else None
        else:
            above = None
    for marker in MARKER.finditer(text):
        if marker.start() not in used and not any(s < marker.start() < e for s, e in literal):
            yield _region(marker.start(), marker.end(), "this marker is not right before a fence")


def parse_docstring(document: Document) -> Iterator[Region]:
    """One doctest for a docstring's ``>>>`` lines, one program per literal block."""
    text = document.text
    if found := doctest.DocTestParser().get_examples(text):
        lines, last = text.splitlines(keepends=True), found[-1]
        start = len("".join(lines[: found[0].lineno]))
        end = len("".join(lines[: last.lineno + f"{last.source}{last.want}".count("\n")]))
        yield _region(start, end, Snippet("doctest", text[start:end]))
    for lexed in LITERALS(document):
        source = lexed.lexemes["source"]
        if lexed.lexemes.get("arguments", "python") == "python" and ">>>" not in source[:20]:
            kind = "ranks" if "pytest.mark.ranks" in source else "python"
            yield _region(lexed.start, lexed.end, _code(kind, text, lexed))
    for section in SECTION.finditer(text):
        if ">>>" not in section["body"] and "code-block::" not in section["body"]:
            why = "an Example: section without `>>>` lines is neither run nor shown as code"
            yield _region(section.end(1), text.index("\n", section.start()), why)


MARKDOWN = Sybil([parse_markdown], patterns=["*.md"], path="/", fixtures=["ranks_batch"])
DOCSTRINGS = Sybil([parse_docstring], patterns=["*.py"], path="/", fixtures=["ranks_batch"])


class DocFile(SybilFile):
    """A page's or a source file's examples; torchrun and shell ones are ``slow``."""

    def __init__(self, **kwargs: Any) -> None:
        markdown = Path(kwargs["path"]).suffix == ".md"
        super().__init__(sybils=[MARKDOWN if markdown else DOCSTRINGS], **kwargs)

    def collect(self) -> Iterator[SybilItem]:
        for item in super().collect():  # type: ignore[no-untyped-call]
            kind = item.example.parsed.runs_as()
            if kind in LIMITS:  # pytest-timeout: the run's own limit, then a minute
                item.add_marker(pytest.mark.timeout(LIMITS[kind] + 60))
            if kind in ("torchrun", "shell"):
                item.add_marker(pytest.mark.slow)
            yield item


def evaluate(example: Example) -> str | None:
    """Sybil's evaluator of every snippet: None when it passed, else what failed."""
    snippet: Snippet = example.parsed
    if snippet.kind == "skip":
        pytest.skip(f"{_place(example)}: {snippet.reason}")
    if snippet.kind in ("output", "template"):
        return check_sample(example, snippet)
    return snippet.reason if snippet.kind == "invalid" else run(example, snippet)


def check_sample(example: Example, sample: Snippet) -> str | None:
    """Compare a sample output with what prints it, or with its package's templates."""
    if sample.kind == "template":
        if problem := fits_template(sample.source, sample.origin):
            return f"{problem}: is the sample stale?"
        pytest.skip(f"{_place(example)}: only its shape is checked ({sample.reason})")
    output, problem = produce(example, sample)
    origin = {"above": "the example above", "ranks session": "the ranks session"}
    what = origin.get(sample.origin, f"`{sample.origin}`")
    if problem is not None:
        return f"{what}, which prints the sample, failed: {problem}"
    difference = find(sample.source, output)
    return f"{what} does not print this: {difference}" if difference else None


def _place(example: Example) -> str:
    return f"{os.path.relpath(example.path, REPO_ROOT)}:{example.line}"


def run(example: Example, snippet: Snippet) -> str | None:
    """Run an example, keeping its output for the samples it prints: None if it passed."""
    if snippet.kind == "ranks":
        batch: RanksBatch = example.namespace["ranks_batch"]
        return batch.check(example)
    if snippet.kind in ("torchrun", "shell"):
        return run_command(snippet, (example.path, example.line))
    return run_forked(example, snippet)


def produce(example: Example, sample: Snippet) -> tuple[str, str | None]:
    """What prints ``sample``: its output, and its problem (None when it ran well)."""
    if sample.origin == "ranks session":
        return example.namespace["ranks_batch"].output(), None
    if sample.producer is None:
        return run_quick(sample.origin)
    above = next(e for e in example.document.examples() if e.parsed is sample.producer)
    key = (above.path, above.line)
    if sample.producer.kind == "ranks":
        problem = run(above, sample.producer)
        return example.namespace["ranks_batch"].output(), problem
    problem = None if key in OUTPUTS else run(above, sample.producer)
    return OUTPUTS.get(key, ""), problem


def run_quick(origin: str) -> tuple[str, str | None]:
    """Run ``COMMAND [as rank N of FILE.json]`` (bash, in a temporary directory), in a
    user's plain environment (gloo's interface not set) and that rank's recorded one."""
    parsed = ORIGIN.fullmatch(f": run: {origin}")
    assert parsed is not None
    extra = {}
    if parsed["recording"]:
        recorded = json.loads((REPO_ROOT / parsed["recording"]).read_text(encoding="utf-8"))
        extra = recorded["ranks"][int(parsed["rank"])]["environ"]
    with tempfile.TemporaryDirectory(prefix="helios-example-") as tmp:
        command = ["bash", "-c", "set -euo pipefail\n" + parsed["run"]]
        env = {k: v for k, v in example_env().items() if k != "GLOO_SOCKET_IFNAME"} | extra
        [done] = run_processes([(command, env)], limit=LIMITS["run"], cwd=tmp)
    problem = f"exit status {done.returncode}\n{done.describe()}" if done.returncode else None
    return done.stdout + done.stderr, problem


def example_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """A user's plain environment: no launcher or pytest variable, the workspace first."""
    env = {k: v for k, v in plain_environment(os.environ).items() if not k.startswith("PYTEST_")}
    env["PATH"] = os.pathsep.join(filter(None, [str(Path(sys.executable).parent), env.get("PATH")]))
    # gloo on loopback: it picks its interface from the host name.
    return {**env, "PYTHONUNBUFFERED": "1", "GLOO_SOCKET_IFNAME": "lo", **(extra or {})}


def run_command(snippet: Snippet, key: tuple[str, int] | None = None) -> str | None:
    """Run a shell example (bash, from the repository root) or a torchrun one, keeping its
    output under ``key``."""
    import torch

    if snippet.kind == "shell" and os.environ.get(NESTED):
        pytest.skip("a shell example does not run inside another shell example's run")
    found = re.findall(r"--nproc[-_]per[-_]node[= ](\d+)", snippet.source)
    ranks = snippet.nproc or max([1, *map(int, found)])
    # With fewer GPUs than ranks the example runs on gloo: helios_pg.init would pick nccl.
    extra = {"CUDA_VISIBLE_DEVICES": ""} if 0 < torch.cuda.device_count() < ranks else {}
    with tempfile.TemporaryDirectory(prefix="helios-example-") as tmp:
        cwd, command = Path(tmp), ["bash", "-c", "set -euo pipefail\n" + snippet.source]
        if snippet.kind == "torchrun":
            Path(tmp, "example.py").write_text(snippet.source, encoding="utf-8")
            command = torchrun_command("--standalone", f"--nproc-per-node={ranks}", "example.py")
        else:
            cwd, venv = REPO_ROOT, str(Path(sys.executable).parents[1])
            extra |= {NESTED: "1", "VIRTUAL_ENV": venv, "UV_NO_SYNC": "1", "UV_FROZEN": "1"}
        limit = LIMITS[snippet.kind]
        [done] = run_processes([(command, example_env(extra))], limit=limit, cwd=cwd)
    if key is not None:
        OUTPUTS[key] = done.stdout + done.stderr
    return f"the {snippet.kind} example failed\n{done.describe()}" if done.returncode else None


def run_forked(example: Example, snippet: Snippet, limit: float | None = None) -> str | None:
    """Run a program or a doctest in a child of this process; what failed, or None."""
    with contextlib.suppress(ImportError):
        import torch.distributed  # noqa: F401  (once, for every child)
    limit, code = limit or LIMITS[snippet.kind], None
    with tempfile.TemporaryDirectory(prefix="helios-example-") as tmp:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # 3.12+: forking with threads
            pid = os.fork()
        if pid == 0:
            _child(example, snippet, Path(tmp))
        deadline = time.monotonic() + limit
        try:
            while time.monotonic() < deadline:
                done, status = os.waitpid(pid, os.WNOHANG)
                if done:
                    code = os.waitstatus_to_exitcode(status)
                    break
                time.sleep(0.01)
            else:
                os.kill(pid, signal.SIGUSR1)  # its stacks, into its output
                time.sleep(1.0)
        finally:  # what it started and left behind goes with it
            with contextlib.suppress(OSError):
                os.killpg(pid, signal.SIGKILL)
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)
        output = Path(tmp, "output").read_text(errors="replace")
    OUTPUTS[example.path, example.line] = output
    what = f"exit code {code}" if code is not None else f"still running after {limit:.0f} s"
    failed = f"the {snippet.kind} failed ({what}); its output:\n{output[-20_000:]}"
    return failed if code != 0 else None


def _child(example: Example, snippet: Snippet, tmp: Path) -> NoReturn:
    """Be the example's process: run it, print its problems, exit 1 if it has any."""
    status = 70
    try:
        os.setpgid(0, 0)
        fd = os.open(tmp / "output", os.O_WRONLY | os.O_CREAT, 0o600)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
        sys.stdout, sys.stderr = (
            io.TextIOWrapper(io.FileIO(n, "w", closefd=False), line_buffering=True) for n in (1, 2)
        )
        faulthandler.register(signal.SIGUSR1, file=sys.stderr, all_threads=True)
        os.environ.clear()
        os.environ.update(example_env())
        os.chdir(tmp)
        logging.root.handlers.clear()  # pytest's
        logging.root.setLevel(logging.WARNING)
        atexit._clear()  # pytest's and torch's: only the example's run at its end
        problems = _run(example, snippet, tmp)
        sys.stderr.write("".join(f"\n*** {problem}\n" for problem in problems))
        status = 1 if problems else 0
    except BaseException:
        traceback.print_exc()
    finally:
        with contextlib.suppress(BaseException):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(status)


def _run(example: Example, snippet: Snippet, tmp: Path) -> list[str]:
    problems, path, line = [], example.path, example.line + snippet.line_offset
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            if snippet.kind == "doctest":
                globs = {k: v for k, v in example.namespace.items() if k != "ranks_batch"}
                globs.setdefault("__name__", "__main__")
                runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
                test = doctest.DocTestParser().get_doctest(
                    snippet.source, globs, "", path, line - 1
                )
                if runner.run(test, clear_globs=False).failed:
                    problems.append("the doctest failed")
            else:
                script = tmp / "example.py"
                script.write_text(snippet.source, encoding="utf-8")
                main = types.ModuleType("__main__")
                main.__file__ = str(script)
                sys.argv, sys.path[0], sys.modules["__main__"] = [str(script)], str(tmp), main
                # The page's line numbers (not its columns, where the page indents the code).
                source = "\n" * (line - 1) + snippet.source
                exec(compile(source, example.path, "exec", dont_inherit=True), vars(main))
        except SystemExit as exc:
            if exc.code not in (None, 0):
                problems.append(f"the example exited with status {exc.code!r}")
        except BaseException as exc:
            tb = exc.__traceback__
            while tb is not None and tb.tb_frame.f_code.co_filename == __file__:
                tb = tb.tb_next  # this runner's frames
            traceback.print_exception(type(exc), exc, tb)
            problems.append(f"the example raised {exc!r}")
        dist: Any = sys.modules.get("torch.distributed")
        if dist is not None and dist.is_available() and dist.is_initialized():
            end = "helios_pg.shutdown(), or `with helios_pg.process_group():` around it"
            problems.append(f"the example left the default process group initialized: {end}")
        atexit._run_exitfuncs()
    for w in caught:
        text = warnings.formatwarning(w.message, w.category, w.filename, w.lineno).rstrip()
        problems.append(f"the example emitted a warning: {text}")
    return problems


class RanksBatch:
    """Ranks examples, each a test module (padded to its page's line numbers) of one fresh
    ``python -m pytest`` (warnings as errors), started at once in a session of its own.
    Each must pass a test and fail none; a ``ranks failing`` one must fail and pass none."""

    def __init__(self, examples: list[Example], directory: Path) -> None:
        self.modules = {(e.path, e.line): f"test_{i}" for i, e in enumerate(examples)}
        self.output_file = directory / "output"
        (directory / "pytest.ini").write_text("[pytest]\nfilterwarnings =\n    error\n")
        for e in examples:
            padding = "\n" * (e.line + e.parsed.line_offset - 1)
            (directory / f"{self.modules[e.path, e.line]}.py").write_text(padding + e.parsed.source)
        command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rA"]
        command += ["--continue-on-collection-errors", *(f"{m}.py" for m in self.modules.values())]
        with self.output_file.open("wb") as out:
            self.proc = subprocess.Popen(command, cwd=directory, env=example_env(), stdout=out,
                stderr=subprocess.STDOUT, start_new_session=True) if examples else None  # fmt: skip

    def output(self) -> str:
        """The session's output, once it has ended (or been stopped at its limit)."""
        if self.proc is None:
            return ""
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=LIMITS["ranks"])
        self.close()
        return self.output_file.read_text(errors="replace")

    def check(self, example: Example) -> str | None:
        """None when the example's module ended as it must, else why not."""
        module = self.modules.get((example.path, example.line))
        if module is None or self.proc is None:
            return "this ranks example is not in the session's batch"
        output = self.output()
        outcomes = {outcome for outcome, name in SUMMARY.findall(output) if name == module}
        must, nor = ("FAILED", "PASSED") if example.parsed.fails else ("PASSED", "FAILED")
        if must in outcomes and not {nor, "ERROR"} & outcomes:
            return None
        rule = "fail a test and pass none" if example.parsed.fails else "pass a test and fail none"
        why = f"{module}.py (numbered as on the page) must {rule}: {sorted(outcomes)}"
        return f"{why}; the ranks session's output (exit {self.proc.poll()}):\n{output[-20_000:]}"

    def close(self) -> None:
        """Stop the session and whatever it started."""
        if self.proc is not None:
            with contextlib.suppress(OSError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


def _batched(example: Example) -> Iterator[Example]:
    """The ranks examples that ``example`` needs run: itself, the one whose output it shows,
    or for the ranks session's output, every ranks example of its page."""
    snippet: Snippet = example.parsed
    if snippet.kind == "ranks":
        yield example
    elif snippet.runs_as() == "ranks":
        for other in example.document.examples():
            if other.parsed is snippet.producer or (
                snippet.producer is None and other.parsed.kind == "ranks"
            ):
                yield other


@pytest.fixture(scope="session")
def ranks_batch(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RanksBatch]:
    """The ranks examples of the session's items, started when the first item is set up."""
    examples: dict[tuple[str, int], Example] = {}
    for item in request.session.items:
        if isinstance(item, SybilItem):
            examples |= {(e.path, e.line): e for e in _batched(item.example)}
    batch = RanksBatch(list(examples.values()), tmp_path_factory.mktemp("ranks"))
    yield batch
    batch.close()
