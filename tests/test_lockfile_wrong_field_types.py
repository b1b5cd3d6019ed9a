"""Every field of a lockfile, given a value of the wrong TOML type (a date/time included), is
bad input: `Lockfile.read`, `frt verify`, `frt lock --check` and `frt resolve` answer with an
`error:` naming the file (exit 1 or 2), never a traceback. The lock-digest is recomputed after
each edit, so the readers meet the value itself, not a digest mismatch (a date/time cannot be
digested: it is refused before the digest)."""

from __future__ import annotations

import datetime
import json
import shutil
from pathlib import Path

import pytest

from frt_dist.base.canonical import digest
from frt_dist.cli.main import main
from frt_dist.documents.lockfile import Lockfile, render
from frt_dist.documents.schema import parse_toml
from frt_dist.errors import FrtError, LockfileError
from helpers.paths import ROOT

LOCK = ROOT / "lockfiles" / "demo-decoder.lock"
WHEN = datetime.datetime(1979, 5, 27, 7, 32, tzinfo=datetime.UTC)
WRONG = [WHEN, 7, 1.5, True, ["x"], {"x": 1}, "zz"]


def _doc() -> dict:
    return parse_toml(LOCK.read_bytes(), LockfileError, "demo")


def _paths(v, path=()):
    if path:
        yield path
    if isinstance(v, dict):
        for k, x in v.items():
            yield from _paths(x, path + (k,))
    elif isinstance(v, list):
        for i, x in enumerate(v):
            yield from _paths(x, path + (i,))


def _cases():
    doc = _doc()
    out = []
    for p in _paths(doc):
        if p == ("lock-digest",):
            continue
        out.append(("toml", p))
    for part in ("index",):  # a JSON part of the lock: its fields are fields too
        for p in _paths(json.loads(doc[part])):
            out.append((part, p))
    return out


def _set(doc, path, value):
    for k in path[:-1]:
        doc = doc[k]
    doc[path[-1]] = value


def _write(path: Path, doc: dict) -> None:
    body = {k: v for k, v in doc.items() if k != "lock-digest"}
    try:
        d = digest(body)
    except TypeError:  # a date/time: no digest can be computed; the reader must refuse it first
        d = doc["lock-digest"]
    path.write_bytes(render(body, d))


@pytest.fixture(scope="module")
def demo_copy(tmp_path_factory):
    root = tmp_path_factory.mktemp("fields")
    for d in ("manifests", "lockfiles", "receipts", "packages"):
        shutil.copytree(ROOT / d, root / d, ignore=shutil.ignore_patterns("__pycache__"))
    (root / "pyproject.toml").write_text("[tool.frt]\n")
    return root


@pytest.mark.parametrize("where, path", _cases(), ids=lambda x: ".".join(map(str, x)) if isinstance(x, tuple) else x)
def test_a_wrong_type_in_any_lockfile_field_is_an_error_not_a_traceback(demo_copy, where, path, capsys):
    lockpath = demo_copy / "lockfiles" / "demo-decoder.lock"
    original = _doc()
    for value in WRONG:
        doc = _doc()
        if where == "toml":
            old = _get(doc, path)
        else:
            part = json.loads(doc[where])
            old = _get(part, path)
        if type(old) is type(value):
            continue
        if where == "toml":
            _set(doc, path, value)
        else:
            if isinstance(value, datetime.datetime):
                continue  # JSON has no date/time
            _set(part, path, value)
            doc[where] = json.dumps(part)
        _write(lockpath, doc)
        try:
            Lockfile.read(lockpath)
        except FrtError:
            pass
        for argv in (["verify"], ["lock", "--check"], ["resolve", "--model", "demo-decoder", "--arch", "x86_64",
                                                      "--backend", "cpu", "--device-class", "amd-epyc"]):
            code = main(argv + ["--project", str(demo_copy), "-q"])
            err = capsys.readouterr().err
            assert code in (0, 1, 2), (argv, path, value)
            if code and argv[0] != "resolve":
                assert "error:" in err, (argv, path, value, err)
    _write(lockpath, original)


def _get(doc, path):
    for k in path:
        doc = doc[k]
    return doc


def test_a_toml_datetime_names_the_file_and_the_field(demo_copy, capsys):
    lockpath = demo_copy / "lockfiles" / "demo-decoder.lock"
    original = lockpath.read_bytes()
    try:
        for field in ("model", "manifest-file", "manifest-digest"):
            doc = _doc()
            doc[field] = WHEN
            _write(lockpath, doc)
            why = (f"lockfiles/demo-decoder.lock: {field}: expected a string or a number, "
                   "got a TOML date/time (1979-05-27T07:32:00+00:00)")
            assert main(["verify", "--project", str(demo_copy)]) == 2
            assert f"error: {why}" in capsys.readouterr().err
            # lock --check: an unreadable lockfile is stale (exit 1), the reason named
            assert main(["lock", "--check", "--project", str(demo_copy)]) == 1
            assert f"  - {why}" in capsys.readouterr().out
    finally:
        lockpath.write_bytes(original)


def _sparse(path: Path, size: int) -> None:
    """A file of ``size`` bytes that takes no disk (the size check comes before any read)."""
    with open(path, "wb") as fh:
        fh.truncate(size)


def test_a_lockfile_over_the_size_limit_is_refused_before_parsing(demo_copy, capsys):
    from frt_dist.documents.schema import MAX_BYTES

    lockpath = demo_copy / "lockfiles" / "demo-decoder.lock"
    original = lockpath.read_bytes()
    try:
        _sparse(lockpath, 535 << 20)  # the 1,000,000-line index of the report
        with pytest.raises(LockfileError) as ei:
            Lockfile.read(lockpath, label="lockfiles/demo-decoder.lock")
        assert ei.value.exit_code == 2
        assert str(ei.value) == ("lockfiles/demo-decoder.lock: is 535.0 MiB, over the 256.0 MiB limit for this kind "
                                 "of file; frt refuses it before parsing")
        assert MAX_BYTES["LockfileError"] == 256 << 20
        assert main(["verify", "--project", str(demo_copy)]) == 2
        assert "over the 256.0 MiB limit" in capsys.readouterr().err
    finally:
        lockpath.write_bytes(original)


def test_a_manifest_a_receipt_and_a_metadata_json_over_their_limits_are_refused(demo_copy, capsys):
    rec = demo_copy / "receipts" / "demo-decoder" / "zz-huge.json"
    _sparse(rec, (4 << 20) + 1)
    meta = demo_copy / "packages" / "rmsnorm" / "build" / "torch-cpu" / "metadata.json"
    manifest = demo_copy / "manifests" / "demo-decoder.toml"
    saved = {p: p.read_bytes() for p in (meta, manifest)}
    try:
        # a receipt: rejected (recorded, never fatal), its reason naming the size and the limit
        assert main(["lock", "--check", "--project", str(demo_copy), "--json"]) == 1
        rejected = json.loads(capsys.readouterr().out)["lockfiles"][0]["rejected"]
        assert [r["reason"] for r in rejected if r["file"].endswith("zz-huge.json")] == [
            "is 4.0 MiB, over the 4.0 MiB limit for this kind of file; frt refuses it before parsing"], rejected
        rec.unlink()
        _sparse(meta, (4 << 20) + 10)
        assert main(["lock", "--check", "--project", str(demo_copy)]) == 1
        assert "metadata.json: is 4.0 MiB, over the 4.0 MiB limit" in capsys.readouterr().err
        meta.write_bytes(saved[meta])
        _sparse(manifest, 17 << 20)
        assert main(["lock", "--check", "--project", str(demo_copy)]) == 2
        assert "manifests/demo-decoder.toml: is 17.0 MiB, over the 16.0 MiB limit" in capsys.readouterr().err
    finally:
        rec.unlink(missing_ok=True)
        for p, data in saved.items():
            p.write_bytes(data)
