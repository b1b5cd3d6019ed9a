"""A command line that does not make people guess: suggestions for mistyped
subcommands and flags, JSON for every outcome under --json, a closed stdout ends quietly."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from frt_dist.cli.main import main
from helpers.paths import BUNDLED

FRT = str(Path(sys.executable).with_name("frt"))


def test_a_mistyped_subcommand_suggests_the_closest(capsys):
    try:
        main(["lok"])
    except SystemExit as exc:
        assert exc.code == 2
    err = capsys.readouterr().err
    assert "error: argument COMMAND: invalid choice: 'lok'" in err and "hint: did you mean 'lock'?" in err


def test_a_mistyped_flag_suggests_the_subcommands_flag(capsys):
    try:
        main(["resolve", "--modle", "demo-decoder"])
    except SystemExit as exc:
        assert exc.code == 2
    err = capsys.readouterr().err
    assert "hint: --modle: did you mean --model?" in err


def test_usage_errors_and_refusals_are_json_under_json(capsys):
    try:
        main(["lock", "--json", "--chek"])
    except SystemExit as exc:
        assert exc.code == 2
    doc = json.loads(capsys.readouterr().out)
    assert doc["exit"] == 2 and doc["error"] == "unrecognized arguments: --chek" and doc["hints"] == [
        "--chek: did you mean --check?"]
    assert main(["resolve", "--json", "--model", "no-such-model", "--arch", "9.0", "--device-class", "h200",
                 "--project", str(BUNDLED)]) == 2
    out = capsys.readouterr()
    doc = json.loads(out.out)
    assert doc["exit"] == 2 and doc["error"].startswith("unknown model 'no-such-model'")
    assert doc["error"] == f"unknown model 'no-such-model' in project {BUNDLED} (models: demo-decoder)"
    assert out.err == ""  # a project (the checkout's own): nothing said on stderr when it is not a terminal


@pytest.mark.subprocess
def test_a_closed_stdout_ends_quietly():
    p = subprocess.Popen([FRT, "matrix"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    p.stdout.close()  # the reader leaves before anything is written (`frt matrix | head -0`)
    err = p.stderr.read()
    assert p.wait(timeout=60) == 0 and "Traceback" not in err and "BrokenPipe" not in err, err


def test_out_of_range_numbers_and_missing_output_folders_are_usage_errors(tmp_path, capsys):
    for argv, message in ((["qualify", "--model", "demo-decoder", "--route", "fused", "--rounds", "0"],
                           "argument --rounds: expected a number >= 1, got 0"),
                          (["qualify", "--model", "demo-decoder", "--route", "fused", "--rounds", "x"],
                           "argument --rounds: expected a whole number, got 'x'"),
                          (["matrix", "-o", str(tmp_path / "no" / "m.md")],
                           f"argument -o/--output: folder {tmp_path / 'no'} does not exist")):
        try:
            main(argv)
        except SystemExit as exc:
            assert exc.code == 2
        assert f"error: {message}" in capsys.readouterr().err
    assert not (tmp_path / "no").exists()


@pytest.mark.subprocess
def test_the_bundled_demo_is_never_used_silently(tmp_path):
    env = {k: v for k, v in __import__("os").environ.items() if not k.startswith("FRT_")}
    r = subprocess.run([FRT, "resolve", "--model", "demo-decoder", "--arch", "9.0", "--device-class", "h200"],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and r.stderr.startswith("error: no frt project here (")  # never the demo unasked
    assert "hint: the bundled demo project (read-only): --demo" in r.stderr
    r = subprocess.run([FRT, "--demo", "resolve", "--model", "demo-decoder", "--arch", "9.0", "--device-class", "h200"],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert r.stderr.splitlines()[0] == f"note: using the bundled demo project (read-only) at {BUNDLED} (--demo)"
    r = subprocess.run([FRT, "--demo", "resolve", "--model", "demo-decoder", "--arch", "9.0", "--device-class", "h200",
                        "-q"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert "bundled demo" not in r.stderr


def test_every_subcommand_and_flag_has_help_text():
    import argparse

    from frt_dist.cli.main import build_parser

    missing = []
    parser = build_parser()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {c.dest: c.help for c in action._choices_actions}
            for name, sub in action.choices.items():
                if not helps.get(name):
                    missing.append(name)
                missing += [f"{name} {x.option_strings or x.dest}" for x in sub._actions
                            if not x.help or x.help == argparse.SUPPRESS]
    assert missing == []


@pytest.mark.subprocess
def test_a_refusal_ends_with_the_next_step(tmp_path):
    r = subprocess.run([FRT, "resolve", "--demo", "--model", "demo-decoder", "--arch", "9.0", "--device-class", "h200"],
                       cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert r.returncode == 1
    assert r.stderr.splitlines()[-2:] == [
        "hint: qualify a route on the machine itself (`frt qualify --model demo-decoder --route ROUTE`), then `frt lock`",
        "hint: `--explain` shows every candidate and why it lost; `--fallback host` decides the host path instead"]
