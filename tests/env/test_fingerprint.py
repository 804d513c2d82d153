"""The fingerprint a rank shows and ``helios_pg.init`` compares: built without torch."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import helios_env
from helios_env._fingerprint import (
    HELIOS_PACKAGES,
    MUST_AGREE,
    Fingerprint,
    compared,
    fingerprint,
    must_agree,
    script_description,
    settings,
)

ENVIRON = {
    "NCCL_SOCKET_IFNAME": "eth0",
    "GLOO_SOCKET_IFNAME": "eth1",
    "TORCH_DISTRIBUTED_DEBUG": "DETAIL",
    "TORCH_NCCL_BLOCKING_WAIT": "1",
    "OMP_NUM_THREADS": "4",
    "CUDA_VISIBLE_DEVICES": "0",
    "NCCLX": "not a setting",
    "PATH": "/bin",
}


def test_settings_are_the_backends_variables_by_name() -> None:
    assert settings(ENVIRON) == (
        ("GLOO_SOCKET_IFNAME", "eth1"),
        ("NCCL_SOCKET_IFNAME", "eth0"),
        ("OMP_NUM_THREADS", "4"),
        ("TORCH_DISTRIBUTED_DEBUG", "DETAIL"),
        ("TORCH_NCCL_BLOCKING_WAIT", "1"),
    )


def test_a_fingerprint_lists_versions_script_backend_device_then_settings() -> None:
    found = fingerprint(
        torch_build={"cuda": "12.4", "nccl": "2.21.5"},
        backend="nccl",
        device="cuda",
        environ={"OMP_NUM_THREADS": "4"},
    )

    names = [name for name, _ in found.items]
    assert names == [
        "python",
        "torch",
        "cuda",
        "nccl",
        *HELIOS_PACKAGES,
        "script",
        "backend",
        "device",
        "OMP_NUM_THREADS",
    ]
    assert found.value("helios-env") == helios_env.__version__
    assert found.value("python") == ".".join(map(str, sys.version_info[:3]))
    assert found.value("NCCL_SOCKET_IFNAME") == "not set"


def test_without_torch_imported_its_version_comes_from_the_installed_distribution(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delitem(sys.modules, "torch", raising=False)

    found = fingerprint(environ={})

    assert found.value("torch") not in ("", "not set")
    assert "torch" not in sys.modules
    assert [name for name, _ in found.items if name in ("cuda", "nccl", "backend")] == []


def test_the_digest_is_short_and_follows_every_item() -> None:
    one = fingerprint(environ={"NCCL_SOCKET_IFNAME": "eth0"})
    same = fingerprint(environ={"NCCL_SOCKET_IFNAME": "eth0"})
    other = fingerprint(environ={"NCCL_SOCKET_IFNAME": "eth1"})

    assert one.digest == same.digest
    assert one.digest != other.digest
    assert len(one.digest) == 16


def test_a_fingerprint_survives_its_encoding() -> None:
    found = fingerprint(backend="gloo", device="cpu", environ=ENVIRON)

    assert Fingerprint.decode(found.encode()) == found


@pytest.mark.parametrize("text", ["", "[1, 2]", '{"a": "b"}', '[["a"]]', '[["a", 1]]'])
def test_a_text_that_is_no_fingerprint_is_a_value_error(text: str) -> None:
    with pytest.raises(ValueError, match="not an encoded fingerprint"):
        Fingerprint.decode(text)


def test_a_script_is_named_with_a_digest_of_its_file(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text("print('step')\n")
    before = script_description(str(script))
    script.write_text("print('step')\nprint('one line more')\n")
    after = script_description(str(script))

    assert before.startswith(f"{script} sha256:")
    assert before != after
    assert compared("script", before) != compared("script", after)


def test_the_same_script_elsewhere_compares_equal(tmp_path: Path) -> None:
    for folder in ("a", "b"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "train.py").write_text("print('step')\n")
    here, there = (script_description(str(tmp_path / f / "train.py")) for f in "ab")

    assert here != there
    assert compared("script", here) == compared("script", there)


def run_python(*args: str) -> str:
    done = subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, timeout=60, check=True
    )
    return done.stdout


SELF_EDITING = """\
from pathlib import Path
from helios_env._fingerprint import script_description

LR = {lr}
before = script_description()
Path(__file__).write_text(Path(__file__).read_text().replace("LR = {lr}", "LR = 9.9"))
print(before, script_description())
"""


def test_the_script_is_the_code_this_process_loaded_not_the_file_edited_since(
    tmp_path: Path,
) -> None:
    said = {}
    for folder, lr in (("a", "0.1"), ("b", "0.2"), ("c", "0.1")):
        script = tmp_path / folder / "train.py"
        script.parent.mkdir()
        script.write_text(SELF_EDITING.format(lr=lr) + "# a comment is no code\n" * (folder == "c"))
        _, before, _, after = run_python(str(script)).split()
        said[folder] = before
        assert before == after  # the file edited since does not change it
        edited = script_description(str(script)).split()[-1]
        assert edited != before  # the file, read now, says another program
    assert said["a"] != said["b"]  # LR = 0.1 against LR = 0.2: not the same program
    assert said["a"] == said["c"]  # elsewhere, and with a comment more: the same


def test_a_process_without_a_script_file_says_so() -> None:
    code = "from helios_env._fingerprint import script_description; print(script_description())"

    assert run_python("-c", code).strip() == "-c (no file)"


def test_python_m_helios_env_shows_this_ranks_fingerprint() -> None:
    data = json.loads(run_python("-m", "helios_env", "--json"))
    text = run_python("-m", "helios_env")

    shown = data["fingerprint"]
    assert shown["helios-env"] == helios_env.__version__
    assert shown["script"].startswith("-m helios_env sha256:")
    assert "fingerprint" in text
    assert f"helios-env          {helios_env.__version__}" in text


def test_python_compares_by_major_and_minor_only() -> None:
    assert compared("python", "3.11.7") == compared("python", "3.11.9") == "3.11"
    assert compared("python", "3.12.1") != compared("python", "3.11.9")
    assert compared("NCCL_DEBUG", "INFO") == "INFO"


def test_versions_script_and_backend_must_agree_settings_need_not() -> None:
    assert {"python", "torch", "cuda", "nccl", "script", "backend"} <= MUST_AGREE
    assert all(must_agree(name) for name in HELIOS_PACKAGES)
    assert not must_agree("device")
    assert not must_agree("NCCL_SOCKET_IFNAME")
