"""`duo completion bash`: the script completes commands, flags, choices and file names
in a real bash."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from duo.cli.main import main

COMPLETE = """
source "$1"
shift
for line in "$@"; do
    COMP_LINE="$line"
    read -ra COMP_WORDS <<< "$line"
    [[ "$line" == *" " ]] && COMP_WORDS+=("")
    COMP_CWORD=$((${#COMP_WORDS[@]} - 1))
    COMP_POINT=${#COMP_LINE}
    COMPREPLY=()
    _shtab_duo
    printf '%s\\n' "${COMPREPLY[@]}" | sort | tr '\\n' ' '
    echo
done
"""


def test_bash_completes_commands_flags_choices_and_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert shutil.which("bash")
    assert main(["completion", "bash"]) == 0
    script = tmp_path / "duo.bash"
    script.write_text(capsys.readouterr().out)
    (tmp_path / "model-f16.gguf").write_bytes(b"")
    lines = [
        "duo ge",
        "duo lead --reasoning-format deep",
        "duo bench --li",
        f"duo generate -m {tmp_path}/model-",
    ]
    out = subprocess.run(
        ["bash", "-c", COMPLETE, "complete", str(script), *lines],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    assert [line.split() for line in out] == [
        ["generate"],
        ["deepseek", "deepseek-legacy"],
        ["--link"],
        [f"{tmp_path}/model-f16.gguf"],
    ]


@pytest.mark.parametrize("shell", ["zsh", "tcsh"])
def test_other_shells_get_a_script(shell: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["completion", shell]) == 0
    out = capsys.readouterr().out
    assert "generate" in out and "--reasoning-format" in out


def test_an_unknown_shell_is_one_line() -> None:
    r = subprocess.run(
        [sys.executable, "-m", "duo", "completion", "fish"], capture_output=True, text=True
    )
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == [
        "duo completion: error: argument shell: invalid choice: 'fish' (choose from 'bash', "
        "'zsh', 'tcsh') (see duo completion --help)"
    ]
