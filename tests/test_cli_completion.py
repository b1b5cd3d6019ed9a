"""`frt completion bash|zsh|fish` prints a completion script made from the parser itself: bash and zsh
through shtab (the `completion` extra), fish written by frt."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from helpers.frt import frt_process as run_frt

COMMANDS = ("lock", "export", "resolve", "verify", "mirror", "publish", "receipts", "qualify", "sign", "init",
            "release", "digest", "matrix", "completion")


def test_bash_script_is_valid_and_completes_every_command(tmp_path):
    r = run_frt(["completion", "bash"], cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    script = tmp_path / "frt.bash"
    script.write_text(r.stdout)
    assert subprocess.run(["bash", "-n", str(script)], capture_output=True, timeout=30, check=False).returncode == 0
    # what bash offers after `frt ` and after `frt publish --`
    probe = (f"source {script}\nCOMP_WORDS=(frt '{{}}'); COMP_CWORD=1; COMP_LINE='frt '; COMP_POINT=4\n"
             "_shtab_frt frt '' frt; printf '%s\\n' \"${COMPREPLY[@]}\"\n")
    got = subprocess.run(["bash", "-c", probe.replace("'{}'", "''")], capture_output=True, text=True, timeout=30, check=False)
    assert set(COMMANDS) <= set(got.stdout.split()), got.stdout + got.stderr


def test_zsh_script_names_every_command(tmp_path):
    r = run_frt(["completion", "zsh"], cwd=tmp_path)
    assert r.returncode == 0 and r.stdout.startswith("#compdef frt"), r.stderr
    for name in COMMANDS:
        assert f"    {name}:'" in r.stdout, name
    if shutil.which("zsh"):
        script = tmp_path / "_frt"
        script.write_text(r.stdout)
        assert subprocess.run(["zsh", "-n", str(script)], capture_output=True, timeout=30, check=False).returncode == 0


def test_fish_script_has_every_command_flag_and_choice(tmp_path):
    r = run_frt(["completion", "fish"], cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    for name in COMMANDS:
        assert any(line.startswith(f"complete -c frt -n __fish_use_subcommand -a {name} -d ") for line in lines), name
    assert "complete -c frt -n '__fish_seen_subcommand_from export' -l format -xa 'kernels cyclonedx' " \
           "-d 'the format (default: kernels)'" in lines
    assert any(line.startswith("complete -c frt -n '__fish_seen_subcommand_from receipts; and "
                               "__fish_seen_subcommand_from pull' -l strict") for line in lines)
    if shutil.which("fish"):
        script = tmp_path / "frt.fish"
        script.write_text(r.stdout)
        assert subprocess.run(["fish", "--no-execute", str(script)], capture_output=True, timeout=30, check=False).returncode == 0


def test_no_shell_or_another_shell_is_a_usage_error(tmp_path):
    r = run_frt(["completion"], cwd=tmp_path)
    assert r.returncode == 2 and r.stderr.splitlines() == ["error: frt completion: name the shell",
                                                           "hint: frt completion bash (or zsh, fish)"]
    r = run_frt(["completion", "tcsh"], cwd=tmp_path)
    assert r.returncode == 2 and "invalid choice: 'tcsh'" in r.stderr


@pytest.mark.parametrize("shell", ["bash", "zsh"])
def test_without_shtab_the_error_says_which_extra_to_install(tmp_path, shell):
    hide = tmp_path / "hide"
    hide.mkdir()
    (hide / "sitecustomize.py").write_text("import sys\nsys.modules['shtab'] = None  # as if not installed\n")
    import os

    from frt_dist.cli import __file__ as cli_file
    root = os.path.dirname(os.path.dirname(os.path.dirname(cli_file)))
    r = subprocess.run([sys.executable, "-m", "frt_dist.cli", "completion", shell], cwd=tmp_path, capture_output=True,
                       text=True, timeout=60, env={"PATH": "/usr/bin:/bin", "PYTHONPATH": f"{hide}:{root}"}, check=False)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.splitlines() == [f"error: frt completion {shell} needs shtab, which is not installed",
                                     "hint: pip install 'frt-dist[completion]'"]
    # fish needs nothing more
    r = subprocess.run([sys.executable, "-m", "frt_dist.cli", "completion", "fish"], cwd=tmp_path, capture_output=True,
                       text=True, timeout=60, env={"PATH": "/usr/bin:/bin", "PYTHONPATH": f"{hide}:{root}"}, check=False)
    assert r.returncode == 0 and "complete -c frt" in r.stdout
