"""Day two with the command line: the bundled demo is never used silently, nothing ends in
a traceback on a read-only or full disk or at Ctrl-C, `frt --project DIR CMD`, `--model` left out,
the refusal hint for routes that lost only on their state, and a terminal matrix people can read."""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers.factories import tiny_project
from helpers.paths import BUNDLED
from helpers.terminal import on_a_terminal

FRT = str(Path(sys.executable).with_name("frt"))
NOTE = f"note: using the bundled demo project (read-only) at {BUNDLED} (--demo)"


def _env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FRT_", "HF_", "KERNELS_"))}
    env.update(PYTHONDONTWRITEBYTECODE="1", HF_HUB_OFFLINE="1", **extra)
    return env


def frt(args, cwd, **kw) -> subprocess.CompletedProcess:
    # not helpers.frt: the installed console script itself (its entry point), not python -m frt_dist.cli
    """The installed console script, stdout and stderr piped (as in CI)."""
    return subprocess.run([FRT, *args], cwd=cwd, env=kw.pop("env", None) or _env(), capture_output=True, text=True,
                          timeout=kw.pop("timeout", 120), **kw)


# --- the bundled demo is never used silently ---------------------------------------------------


@pytest.mark.subprocess
def test_every_command_on_the_demo_names_the_bundled_demo_on_stderr(tmp_path):
    """Outside a project the demo is used only when asked for (`--demo`); then every command says so."""
    work = tmp_path / "empty"
    work.mkdir()
    bundled = {"root": str(BUNDLED), "kind": "bundled", "bundled": True}
    for argv, code in ((["lock", "--check"], 0), (["verify"], 0), (["mirror", str(tmp_path / "m")], 0),
                       (["resolve"], None), (["matrix"], 0), (["lock", "--export", "kernels"], 0),
                       (["qualify", "--route", "fused"], 1)):
        argv = [*argv, "--demo"]
        r = frt(argv, work)
        assert code is None or r.returncode == code, (argv, r.stderr)
        assert r.stderr.splitlines()[0] == NOTE, (argv, r.stderr)
        assert "Traceback" not in r.stderr
        if argv[0] in ("lock", "verify", "mirror", "resolve") and "--export" not in argv:
            j = frt([*argv, "--json"], work)
            assert j.stderr.splitlines() == [NOTE], (argv, j.stderr)  # stdout is the document; stderr says it
            assert json.loads(j.stdout)["project"] == bundled, argv
    assert frt(["verify", "-q", "--demo"], work).stderr == ""  # --quiet: nothing but errors


@pytest.mark.subprocess
def test_json_documents_name_the_project_in_force(tmp_path):
    tp = tiny_project(tmp_path)
    tp.lock()
    doc = json.loads(frt(["verify", "--json"], tp.root).stdout)
    assert doc["project"] == {"root": str(tp.root.resolve()), "kind": "project", "bundled": False}
    assert set(doc) == {"ok", "lockfiles", "problems", "notes", "project"}  # the other keys as they were
    init = json.loads(frt(["init", str(tmp_path / "new"), "--json"], tmp_path).stdout)
    assert init["project"] == str(tmp_path / "new")  # init's own "project" key is kept


# --- frt --project DIR COMMAND, and --model left out -------------------------------------------


@pytest.mark.subprocess
def test_project_as_a_global_option_before_the_command(tmp_path):
    assert frt(["init", str(tmp_path / "p")], tmp_path).returncode == 0
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    r = frt(["--project", str(tmp_path / "p"), "lock"], elsewhere)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("lockfiles/my-model.lock: written") and (tmp_path / "p/lockfiles/my-model.lock").is_file()
    r = frt(["--project", str(tmp_path / "p"), "resolve", "--project", str(elsewhere)], tmp_path)
    assert r.returncode == 2
    assert r.stderr == (f"error: --project {tmp_path / 'p'} (before the command) and --project {elsewhere} "
                        "(after it) differ; give one\n")
    assert frt(["--project", str(tmp_path / "p"), "resolve", "--project", str(tmp_path / "p")],
               tmp_path).returncode == 1  # the same folder twice is fine (refused: no receipts yet)
    r = frt(["--project", str(tmp_path / "q"), "init"], tmp_path)
    assert r.returncode == 0 and (tmp_path / "q" / "manifests" / "my-model.toml").is_file()
    assert "--project DIR" in frt(["--help"], tmp_path).stdout


@pytest.mark.subprocess
def test_model_may_be_left_out_when_the_project_has_one(tmp_path):
    root = tmp_path / "p"
    assert frt(["init", str(root)], tmp_path).returncode == 0 and frt(["lock"], root).returncode == 0
    r = frt(["resolve"], root)
    assert r.returncode == 1 and r.stdout.startswith("model my-model  precision fp32"), r.stdout + r.stderr
    manifest = (root / "manifests" / "my-model.toml").read_text("utf-8")
    (root / "manifests" / "other.toml").write_text(manifest.replace('model = "my-model"', 'model = "other"'), "utf-8")
    for argv in (["resolve"], ["qualify", "--route", "fast-norm"]):
        r = frt(argv, root)
        assert r.returncode == 2, r.stderr
        assert r.stderr.splitlines() == [f"error: --model is needed: project {root} has 2 models: my-model, other",
                                         f"hint: e.g. frt {argv[0]} --model my-model"]
    assert frt(["resolve", "--model", "my-model"], root).returncode == 1  # named: as before


# --- messages that tell the truth --------------------------------------------------------------

HW = ["--arch", "x86_64", "--device-class", "test-cpu", "--backend", "cpu", "--software", "torch=2.13"]


@pytest.mark.subprocess
def test_a_refusal_lost_only_on_state_hints_accept_supported_correct(tmp_path):
    tp = tiny_project(tmp_path)
    tp.lock(receipts=[(route, phase, "supported_correct") for route in ("fast", "solo") for phase in ("decode", "prefill")])
    r = frt(["resolve", *HW], tp.root)
    assert r.returncode == 1
    assert "receipt is supported_correct; accept is certified_fast" in r.stdout
    assert r.stderr.splitlines()[-1] == (
        "hint: the qualified routes here are supported_correct (correct, no speed claim): `--accept supported_correct` "
        "serves them; only certified_fast is accepted by default")
    assert frt(["resolve", *HW, "--accept", "supported_correct"], tp.root).returncode == 0
    tp2 = tiny_project(tmp_path, "other")
    tp2.lock()  # no receipts: nothing lost on its state, so the hint is the usual one
    r = frt(["resolve", *HW], tp2.root)
    assert r.returncode == 1 and "--accept supported_correct" not in r.stderr
    assert r.stderr.splitlines()[-1].startswith("hint: `--explain` shows every candidate")


@pytest.mark.subprocess
def test_resolve_names_the_arch_as_an_arch(tmp_path):
    """The demo printed `rtx-5090 (cuda 12.0)` for the refused hardware, which reads as a CUDA version."""
    r = frt(["resolve", "--demo", "--arch", "12.0", "--device-class", "rtx-5090", "--software", "torch=2.13,cuda=12.8"],
            tmp_path)
    head = r.stdout.splitlines()[0]
    assert "hardware rtx-5090 (cuda, arch 12.0)" in head and "cuda 12.0" not in r.stdout, head


# --- the matrix: a table on a terminal, Markdown into a pipe ------------------------------------


def _on_a_terminal(argv, cwd) -> str:
    code, shown, err = on_a_terminal([FRT, *argv], cwd=cwd, env=_env(COLUMNS="200"), stream="stdout", timeout=120)
    assert code == 0, err
    return shown.replace("\r\n", "\n")


@pytest.mark.subprocess
def test_the_terminal_matrix_is_a_plain_table_and_a_pipe_gets_markdown(tmp_path):
    shown = _on_a_terminal(["matrix", "--demo"], tmp_path)
    assert "\\_" not in shown and "**" not in shown and "|" not in shown, shown
    lines = shown.splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("phase "))
    assert lines[head].split() == ["phase", "rows", "precision", "hardware", "device", "class", "software", "fused", "split"]
    assert set(lines[head + 1].replace(" ", "")) == {"-"}
    decode = lines[head + 2]
    assert decode.split()[:4] == ["decode", "1–16", "fp32", "cpu"] and "★ certified_fast" in decode
    # the columns line up: every route column starts where its heading does
    assert decode.index("★ certified_fast") == lines[head].index("fused")
    piped = frt(["matrix", "--demo"], tmp_path).stdout
    assert piped.startswith("# frt route matrix") and "| phase | rows |" in piped and "*supported\\_correct*" in piped
    assert frt(["matrix", "--demo", "--format", "text"], tmp_path).stdout == shown
    assert frt(["matrix", "--demo", "--format", "md"], tmp_path).stdout == piped


# --- no traceback on a full or read-only disk ----------------------------------------------------


@pytest.fixture
def tmpfs(tmp_path):
    """``mount(size=16k)`` and ``mount(ro)``: real file systems that are full and read-only (root
    ignores permissions, so chmod proves nothing here)."""
    mounted = []

    def mount(name, options):
        d = tmp_path / name
        d.mkdir()
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(d)], capture_output=True, text=True)
        if r.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here ({r.stderr.strip()}): needs root")
        mounted.append(d)
        return d

    yield mount
    for d in reversed(mounted):
        subprocess.run(["umount", str(d)], check=False)


def _fill(folder: Path) -> None:
    fd = os.open(folder / "filler", os.O_WRONLY | os.O_CREAT)
    try:
        while True:
            os.write(fd, b"\0" * 512)
    except OSError as exc:
        assert exc.errno == errno.ENOSPC
    finally:
        os.close(fd)


@pytest.mark.subprocess
def test_matrix_and_export_output_on_a_full_disk_name_the_file_and_leave_it_as_it_was(tmpfs, tmp_path):
    full = tmpfs("full", "size=16k")
    for _argv, name in ((["matrix"], "m.md"), (["lock", "--export", "kernels"], "kernels.lock")):
        (full / name).write_text("previous\n")
    _fill(full)
    for argv, name in ((["matrix"], "m.md"), (["lock", "--export", "kernels"], "kernels.lock")):
        r = frt([*argv, "--demo", "-o", str(full / name)], tmp_path)
        assert r.returncode == 2, r.stderr
        assert r.stderr.splitlines()[1:] == [
            f"error: -o {full / name}: cannot be written: No space left on device",
            "hint: free space on that file system (or write somewhere else), then run the command again"], r.stderr
        assert (full / name).read_text() == "previous\n"
    assert sorted(p.name for p in full.iterdir()) == ["filler", "kernels.lock", "m.md"]  # no temp file left


@pytest.mark.subprocess
def test_matrix_output_into_a_read_only_folder_is_one_error(tmpfs, tmp_path):
    ro = tmpfs("ro", "ro")
    r = frt(["matrix", "--demo", "-o", str(ro / "m.html"), "--format", "html"], tmp_path)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr.splitlines()[1:] == [
        f"error: -o {ro / 'm.html'}: cannot be written: Read-only file system",
        "hint: the file system is mounted read-only: run where you can write, or pass --project DIR / -o FILE there"]
    assert list(ro.iterdir()) == []


@pytest.mark.subprocess
def test_every_writing_command_on_a_read_only_project_ends_in_an_error_not_a_traceback(tmpfs, tmp_path):
    """The commands' own messages are theirs; what holds for all: exit non-zero, `error:`, no traceback."""
    rw = tmp_path / "p"
    assert frt(["init", str(rw)], tmp_path).returncode == 0 and frt(["lock"], rw).returncode == 0
    ro = tmpfs("ro", "ro")
    view = tmp_path / "p-ro"  # the same project, read-only (a bind mount remounted ro)
    view.mkdir()
    if subprocess.run(["mount", "--bind", str(rw), str(view)]).returncode != 0:
        pytest.skip("cannot bind-mount here")
    try:
        assert subprocess.run(["mount", "-o", "remount,bind,ro", str(view)]).returncode == 0
        manifest = rw / "manifests" / "my-model.toml"
        manifest.write_text(manifest.read_text("utf-8").replace("rounds = 10", "rounds = 3"), "utf-8")  # stale now
        for argv in (["lock", "--project", str(view)], ["qualify", "--project", str(view), "--route", "fast-norm"],
                     ["mirror", str(ro / "m")], ["init", str(ro)], ["matrix", "-o", str(ro / "m.md")],
                     ["matrix", "--project", str(view), "-o", str(view / "m.md")]):
            r = frt(argv, tmp_path)
            assert r.returncode in (1, 2) and "Traceback" not in r.stderr, (argv, r.stderr)
            assert any(line.startswith("error: ") for line in r.stderr.splitlines()), (argv, r.stderr)
        assert not [p for p in view.rglob("*") if ".tmp" in p.name or p.name.startswith(".frt-")]
    finally:
        subprocess.run(["umount", str(view)], check=False)


def test_the_last_resort_turns_an_oserror_into_one_line_and_keeps_other_defects(monkeypatch, capsys):
    from frt_dist.cli import main as cli

    def denied(args):
        raise PermissionError(errno.EACCES, "Permission denied", "/srv/models/lockfiles/x.lock")

    monkeypatch.setitem(cli.COMMANDS, "verify", denied)
    assert cli.main(["verify"]) == 2
    err = capsys.readouterr().err
    assert err.splitlines()[-2:] == ["error: /srv/models/lockfiles/x.lock: Permission denied",
                                     "hint: you may not write there: check the folder's owner and permissions, "
                                     "or write somewhere else"]
    def full(args):  # what write_atomic's temp file beside the destination raises
        raise OSError(errno.ENOSPC, "No space left on device", "/srv/p/receipts/m/.r--decode.json.k2j_x9ab.tmp")

    monkeypatch.setitem(cli.COMMANDS, "verify", full)
    assert cli.main(["verify"]) == 2
    assert capsys.readouterr().err.splitlines()[-2] == "error: /srv/p/receipts/m/r--decode.json: No space left on device"
    monkeypatch.setitem(cli.COMMANDS, "verify", lambda args: (_ for _ in ()).throw(OSError(errno.EIO, "I/O error")))
    assert cli.main(["verify", "--json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["error"] == "frt verify: I/O error" and doc["exit"] == 1
    monkeypatch.setitem(cli.COMMANDS, "verify", lambda args: {}["a defect"])
    with pytest.raises(KeyError):  # not an OSError: a programming error keeps its traceback
        cli.main(["verify"])


# --- Ctrl-C during start-up ----------------------------------------------------------------------

SLOW_IMPORT = '''
import importlib.abc, os, sys, time

class _Slow(importlib.abc.MetaPathFinder):
    """Stands still at the first import of one module, after saying so in a file; an interrupt that
    arrives inside that import is recorded in a second file (torch's C++ callbacks abort on one)."""
    def find_spec(self, name, path=None, target=None):
        if name == os.environ.get("SLOW_IMPORT_MODULE"):
            os.environ["SLOW_IMPORT_MODULE"] = ""
            open(os.environ["SLOW_IMPORT_MARK"], "w").close()
            end = time.monotonic() + float(os.environ["SLOW_IMPORT_SECONDS"])
            try:
                while time.monotonic() < end:
                    time.sleep(0.05)
            except KeyboardInterrupt:
                open(os.environ["SLOW_IMPORT_MARK"] + ".inside", "w").close()
                raise
        return None

sys.meta_path.insert(0, _Slow())
'''


@pytest.mark.parametrize("module,argv,held", [
    ("frt_dist.cli.main", ["verify"], False),  # the console script importing the CLI itself
    ("frt_dist.lock.build", ["lock"], False),  # `frt lock` loading the locker
    ("torch", ["qualify", "--route", "fast-norm"], True),  # `import torch` in `frt qualify`: held until done
])
@pytest.mark.subprocess
@pytest.mark.slow
def test_ctrl_c_during_start_up_ends_quietly_with_130(tmp_path, module, argv, held):
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(SLOW_IMPORT)
    assert frt(["init", str(tmp_path / "p")], tmp_path).returncode == 0
    assert frt(["lock"], tmp_path / "p").returncode == 0
    mark = tmp_path / "mark"
    env = _env(PYTHONPATH=str(hook), SLOW_IMPORT_MODULE=module, SLOW_IMPORT_MARK=str(mark),
               SLOW_IMPORT_SECONDS="2" if held else "120")
    # a suite started in the background has SIGINT ignored, and a child inherits that
    p = subprocess.Popen([FRT, *argv], cwd=tmp_path / "p", env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 120
    while not mark.exists() and p.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert mark.exists(), f"{module} was never imported: {p.communicate(timeout=10)}"
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=120)
    assert p.returncode == 130 and "Traceback" not in err, err
    assert err.splitlines()[-1].startswith("error: interrupted"), err
    # torch's import is never interrupted halfway (a KeyboardInterrupt in its C++ callbacks aborts)
    assert Path(f"{mark}.inside").exists() is not held
    if held:
        assert list((tmp_path / "p" / "receipts" / "my-model").iterdir()) == []  # stopped before measuring
