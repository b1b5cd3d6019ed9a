"""One CLI spelling per idea: `-o/--output FILE`, `--output-dir DIR`, `--key KEY`, `frt publish URL`,
`frt export --format`; each old spelling still works, and says on stderr that it is deprecated, never inside
`--json` stdout. Library warnings (`FrtWarning`) print as `warning: <message>` on stderr."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest

from helpers.factories import tiny_project
from helpers.frt import frt_process as run_frt


def _deprecated(old: str, new: str) -> str:
    return f"warning: '{old}' is deprecated and will be removed in the next release; use '{new}'"


@pytest.fixture
def proj(tmp_path):
    tp = tiny_project(tmp_path)
    return tp, tp.lock()


# --- frt export --format (was frt lock --export) --------------------------------------------------


def test_export_format_is_what_lock_export_printed(tmp_path):
    new = run_frt(["export", "--format", "kernels", "--demo"], cwd=tmp_path)
    old = run_frt(["lock", "--export", "kernels", "--demo"], cwd=tmp_path)
    assert new.returncode == old.returncode == 0, new.stderr + old.stderr
    assert new.stdout == old.stdout and json.loads(new.stdout)
    dep = _deprecated("frt lock --export kernels", "frt export --format kernels")
    assert dep not in new.stderr and "deprecated" not in new.stderr
    assert old.stderr.splitlines()[-1] == dep
    # kernels is the default format
    assert run_frt(["export", "--demo"], cwd=tmp_path).stdout == new.stdout


def test_export_to_a_file_and_from_a_named_lockfile(tmp_path, proj):
    tp, lock = proj
    out, named = tmp_path / "kernels.lock", tmp_path / "reviewed.lock"
    named.write_bytes(Path(lock.path).read_bytes())
    r = run_frt(["export", "--format", "kernels", "--lockfile", str(named), "-o", str(out)], cwd=tp.root)
    assert r.returncode == 0 and r.stdout == "", r.stderr
    assert f"wrote {out}" in r.stderr
    assert out.read_text() == run_frt(["export"], cwd=tp.root).stdout


def test_export_cyclonedx_describes_one_model(tmp_path, proj):
    tp, _ = proj
    r = run_frt(["export", "--format", "cyclonedx"], cwd=tp.root, env={"SOURCE_DATE_EPOCH": "0"})
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["bomFormat"] == "CycloneDX"
    old = run_frt(["lock", "--export", "cyclonedx"], cwd=tp.root, env={"SOURCE_DATE_EPOCH": "0"})
    assert old.stdout == r.stdout
    assert old.stderr.splitlines()[-1] == _deprecated("frt lock --export cyclonedx", "frt export --format cyclonedx")


# --- frt publish URL (was frt mirror URL) ---------------------------------------------------------


def test_publish_is_what_mirror_url_did(tmp_path, proj):
    tp, _ = proj
    new = run_frt(["publish", f"file://{tmp_path / 'a'}", "--variant", "torch-cpu", "--json"], cwd=tp.root)
    old = run_frt(["mirror", f"file://{tmp_path / 'b'}", "--variant", "torch-cpu", "--json"], cwd=tp.root)
    assert new.returncode == old.returncode == 0, new.stderr + old.stderr
    a, b = json.loads(new.stdout), json.loads(old.stdout)  # --json stdout stays one clean document
    assert [m["uploaded"] for m in a["models"]] == [m["uploaded"] for m in b["models"]] and a["models"][0]["uploaded"]
    assert sorted(p.name for p in (tmp_path / "a").rglob("*")) == sorted(p.name for p in (tmp_path / "b").rglob("*"))
    assert "deprecated" not in new.stderr
    assert old.stderr.splitlines()[-1] == _deprecated("frt mirror URL", "frt publish URL")


def test_publish_needs_a_store_and_mirror_still_fills_a_folder(tmp_path, proj):
    tp, _ = proj
    r = run_frt(["publish", str(tmp_path / "dir")], cwd=tp.root)
    assert r.returncode == 2 and r.stderr.splitlines()[0] == f"error: frt publish {tmp_path / 'dir'}: not an object-store URL"
    r = run_frt(["publish"], cwd=tp.root)  # the URL is required: in the usage line, and refused by the parser
    assert r.returncode == 2 and "error: the following arguments are required: URL" in r.stderr.splitlines()
    assert "[--cells]\n                   URL\n" in r.stderr and "[URL]" not in r.stderr
    r = run_frt(["mirror", str(tmp_path / "m"), "--variant", "torch-cpu", "-v"], cwd=tp.root)
    assert r.returncode == 0 and "deprecated" not in r.stderr, r.stderr
    assert "  t-org/scale " in r.stderr  # -v: each file as it is written


def test_mirror_and_publish_take_the_lockfile_named(tmp_path, proj):
    tp, lock = proj
    r = run_frt(["publish", f"file://{tmp_path / 's'}", "--lockfile", str(lock.path), "--variant", "torch-cpu"],
                cwd=tp.root)
    assert r.returncode == 0 and r.stdout.startswith("tiny: "), r.stderr
    r = run_frt(["mirror", str(tmp_path / "m"), "--lockfile", str(tmp_path / "none.lock"), "--variant", "torch-cpu"],
                cwd=tp.root)
    assert r.returncode == 1 and r.stderr.startswith(f"error: no lockfile at {tmp_path / 'none.lock'} (--lockfile)")


def test_digest_verbose_names_each_file_with_both_digests(tmp_path, proj):
    tp, _ = proj
    pkg = next(p for p in (tp.root / "packages").iterdir() if (p / "build").is_dir())
    changed = next(f for f in (pkg / "build").rglob("*.py"))
    changed.write_text(changed.read_text() + "\n# edited\n")
    r = run_frt(["digest", "--check", "-v", str(pkg)], cwd=tp.root)
    assert r.returncode == 1, r.stderr
    variant = pkg / "build" / changed.relative_to(pkg / "build").parts[0]
    [line] = [x for x in r.stdout.splitlines() if x.startswith(f"  {changed.relative_to(variant)}: ")]
    old, new = line.split(": ", 1)[1].split(" -> ")
    assert old != new and old and new, r.stdout
    assert "->" not in run_frt(["digest", "--check", str(pkg)], cwd=tp.root).stdout  # without -v: the names only


# --- frt qualify --output-dir / --key (were --out / --sign) ----------------------------------------


@pytest.fixture
def measured(monkeypatch, proj):
    """`frt qualify` in this process with the measuring itself left out (no band measured): what is
    checked is how the flags were read; everything before the measuring runs as it is."""
    from frt_dist.cli import qualify as cmd
    from frt_dist.qualify import run as qualify_run

    seen = {}

    def qualify(lock, route, **kw):
        seen["route"] = route
        return []

    monkeypatch.setattr(cmd, "_import_holding_ctrl_c", lambda *modules: None)
    monkeypatch.setattr(qualify_run, "qualify", qualify)
    return proj[0], seen


def _qualify(capsys, tp, *argv):
    from frt_dist.cli.main import main

    rc = main(["qualify", "--project", str(tp.root), "--route", "fast", *argv])
    out, err = capsys.readouterr()
    return rc, out, err


def test_qualify_output_dir_and_its_old_spelling(tmp_path, measured, capsys):
    tp, seen = measured
    dep = _deprecated("frt qualify --out", "frt qualify --output-dir")
    for flag, warned in (("--output-dir", False), ("--out", True)):
        rc, out, err = _qualify(capsys, tp, flag, str(tmp_path / "r"), "--json")
        assert rc == 0 and seen["route"] == "fast", err
        assert json.loads(out)["results"] == []  # stdout: the one JSON document, nothing else
        assert (err.splitlines()[-1:] == [dep]) is warned, err
    (tmp_path / "afile").write_text("x")  # the folder named is the one checked, either spelling
    for flag in ("--output-dir", "--out"):
        rc, out, err = _qualify(capsys, tp, flag, str(tmp_path / "afile" / "r"))
        assert rc == 2 and "afile is not a folder" in err.splitlines()[0], err
    rc, out, err = _qualify(capsys, tp, "--out", "a", "--output-dir", "b")
    assert rc == 2 and err.splitlines() == ["error: --output-dir b and --out a differ; give one"]  # an error alone


def test_qualify_key_and_its_old_spelling(tmp_path, measured, capsys):
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ed25519

    tp, _ = measured
    key = tmp_path / "ci.pem"
    key.write_bytes(ed25519.Ed25519PrivateKey.generate().private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    bad = tmp_path / "bad.pem"
    bad.write_text("nope")
    dep = _deprecated("frt qualify --sign", "frt qualify --key")
    for flag, warned in (("--key", False), ("--sign", True)):
        rc, _, err = _qualify(capsys, tp, flag, str(key))
        assert rc == 0 and (dep in err.splitlines()) is warned, err
        rc, _, err = _qualify(capsys, tp, flag, str(bad))
        assert rc == 2 and err.startswith(f"error: {bad}: not a PEM private key") and dep not in err, err
        with pytest.raises(SystemExit):
            _qualify(capsys, tp, flag, str(key), "--unsigned")
        assert "not allowed with argument" in capsys.readouterr().err


# --- -v and -q where a command reports ------------------------------------------------------------


def test_verbose_adds_detail_and_quiet_keeps_errors_only(tmp_path, proj):
    tp, _ = proj
    r = run_frt(["lock", "-v"], cwd=tp.root)
    assert r.returncode == 0 and "  package t-org/scale @ sha256:" in r.stdout, r.stdout + r.stderr
    assert "package t-org/scale" not in run_frt(["lock"], cwd=tp.root).stdout
    r = run_frt(["verify", "-v", "-q"], cwd=tp.root)
    assert r.returncode == 0 and r.stdout == "" and r.stderr == ""
    r = run_frt(["verify", "--json", "-v"], cwd=tp.root)
    assert r.returncode == 0 and json.loads(r.stdout)["ok"] is True


# --- global -q, -v, --json: before the command or after it -----------------------------------------


def test_global_quiet_verbose_and_json_mean_before_the_command_what_they_mean_after_it(frt, proj):
    tp, _ = proj
    for before, after in ((["-q", "verify"], ["verify", "-q"]), (["--json", "verify"], ["verify", "--json"]),
                          (["-v", "lock"], ["lock", "-v"]), (["--quiet", "--json", "lock"], ["lock", "--json", "-q"])):
        a, b = frt(*before, cwd=tp.root), frt(*after, cwd=tp.root)
        assert a.code == b.code == 0 and (a.out, a.err) == (b.out, b.err), (before, a, b)
    assert frt("-q", "verify", cwd=tp.root).out == ""
    assert frt("--json", "verify", cwd=tp.root).json()["ok"] is True
    assert "  package t-org/scale @ sha256:" in frt("-v", "lock", cwd=tp.root).out
    # a global flag the command does not have is refused as the command's own would be, naming it
    r = frt("-v", "export", cwd=tp.root)
    assert r.code == 2 and r.err == "error: -v: frt export has nothing more to say\n"
    r = frt("--json", "completion", "bash", cwd=tp.root)
    assert r.code == 2 and r.json()["error"] == "--json: frt completion prints no JSON document"
    r = frt("-q", "completion", "bash", cwd=tp.root)
    assert r.code == 2 and r.err == "error: -q: frt completion prints only its output\n"


def test_help_names_the_short_form_first_and_every_value_its_metavar():
    import argparse

    from frt_dist.cli.parser import build_parser

    parser = build_parser()
    subs = {"frt": parser}
    for name, sub in parser._subparsers._group_actions[0].choices.items():
        subs[f"frt {name}"] = sub
        for action in sub._actions:
            if isinstance(action, argparse._SubParsersAction):
                subs.update({f"frt {name} {n}": s for n, s in action.choices.items()})
    for cmd, p in subs.items():
        text = p.format_help()
        assert "--quiet, -q" not in text and "--verbose, -v" not in text, cmd
        if "--quiet" in text:
            assert "-q, --quiet" in text, cmd
        for action in p._actions:  # argparse's default metavar is the dest in capitals (DEVICE_CLASS, MAX_ROUNDS)
            takes = action.option_strings and action.nargs != 0 and action.help != argparse.SUPPRESS
            assert not takes or action.metavar is not None or action.choices is not None, (cmd, action.option_strings)
    assert "-q, --quiet" in parser.format_help() and "-v, --verbose" in parser.format_help()
    assert "DEVICE_CLASS" not in subs["frt resolve"].format_help()
    assert "MAX_ROUNDS" not in subs["frt qualify"].format_help()


# --- FrtWarning from library code -----------------------------------------------------------------


def test_library_warnings_print_as_warning_lines_on_stderr(monkeypatch, capsys, tmp_path):
    from frt_dist.cli import main as cli
    from frt_dist.errors import FrtWarning

    def warns(args):
        for _ in range(2):  # said each time, not once per place (the CLI's filter is "always")
            warnings.warn("receipts/x.json: rejected: its cell names no device class", FrtWarning, stacklevel=2)
        print(json.dumps({"ok": True}) if args.json else "done")
        return 0

    monkeypatch.setitem(cli.COMMANDS, "verify", warns)
    monkeypatch.chdir(tmp_path)
    assert cli.main(["verify", "--json"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out) == {"ok": True}  # never inside --json stdout
    assert err.splitlines() == ["warning: receipts/x.json: rejected: its cell names no device class"] * 2
    assert cli.main(["verify", "-q"]) == 0
    assert capsys.readouterr().err == ""  # --quiet: nothing but errors
    assert cli.main(["verify"]) == 0
    assert capsys.readouterr().err.count("warning: receipts/x.json") == 2
