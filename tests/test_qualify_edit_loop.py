"""Edit -> qualify -> lock never loops (SPEC item 44): `frt qualify` measures the route as
``manifests/<model>.toml`` defines it now, with the packages the lock pins, and where the route needs a
package the lock does not pin it says which `frt lock` comes first. Every hint printed on that path is
followed here mechanically (each command in backticks, in order; a command that fails is followed by
its own hints) and must end at a fresh lock holding a receipt of the edited route.

The toy project of test_qualify.py (``toyq``: one seam on a CPU host, path packages), two edits a
publisher makes: a route whose impl's contract changes (same packages), and a route moved onto a new
package (one the lock does not pin yet).
"""

from __future__ import annotations

import re
import shlex

import pytest

from frt_dist.documents.lockfile import Lockfile
from frt_dist.documents.manifest import Manifest
from helpers.factories import write_files
from helpers.frt import frt_main
from helpers.gpu import needs_no_gpu

MAX_STEPS = 12  # every command run, over the whole walk: a loop cannot hide behind a bound


class Walk:
    def __init__(self, root):
        self.root = root
        self.ran: list[tuple[str, int]] = []

    def run(self, cmd: str):
        argv = shlex.split(cmd)
        assert argv[0] == "frt", cmd
        assert len(self.ran) < MAX_STEPS, f"the hints loop: {self.ran}"
        r = frt_main(argv[1:], cwd=self.root)
        self.ran.append((cmd, r.code))
        return r

    def follow(self, cmd: str, depth: int = 0) -> None:
        """Run ``cmd``; where it fails, follow each hint that names commands (not the one that gives
        coverage up on purpose), every command in it in order; then ``cmd`` must succeed."""
        r = self.run(cmd)
        if r.code == 0:
            return
        assert r.code == 1 and depth < 3, (cmd, r.code, r.err)
        hints = [ln[len("hint: "):] for ln in r.err.splitlines() if ln.startswith("hint: ")]
        steps = [h for h in hints if "on purpose" not in h and "`frt " in h]
        assert steps, f"{cmd} failed with no hint to follow:\n{r.err}"
        for hint in steps[:1]:  # the first: each hint is a whole way out
            for sub in re.findall(r"`(frt [^`]+)`", hint):
                self.follow(sub, depth + 1)
        r = self.run(cmd)
        assert r.code == 0, f"{cmd} still fails after following its hints:\n{r.err}"


def _manifest(root):
    return root / "manifests" / "toyq.toml"


def _qualify_and_lock(root):
    r = frt_main(["qualify", "--model", "toyq", "--route", "fastscale"], cwd=root)
    assert r.code == 0, r.err
    r = frt_main(["lock"], cwd=root)
    assert r.code == 0, r.err


def _edit_contract(root):
    """The impl the route runs takes only the smoke's arguments (arity fixed): what runs can change, so the route digest does."""
    text = _manifest(root).read_text()
    old = 'package = "testorg/fastscale"\nentry = "scale"\nprecision = "fp32"\ncontract = { device = "cpu", '
    assert old in text
    _manifest(root).write_text(text.replace(old, old + 'arity = "fixed", ', 1))


def _edit_new_package(root):
    """The route moves onto a new package, ``testorg/fastscale2`` (same code, its own build)."""
    from helpers.factories import QUALIFY_KERNELS
    from helpers.hubserver import kernel_variant_files

    write_files(root / "packages" / "fastscale2", kernel_variant_files(
        name="fastscale2", variant="torch-cpu", module_files={"__init__.py": QUALIFY_KERNELS["fastscale"]},
        id="_toyq_fastscale2"))
    text = _manifest(root).read_text()
    text = text.replace("[phases.decode]", '[packages."testorg/fastscale2"]\npath = "packages/fastscale2"\n\n'
                                           "[phases.decode]", 1)
    text = text.replace("[routes.fastscale]",
                        '[seams.norm.impls.fastscale2]\npackage = "testorg/fastscale2"\nentry = "scale"\n'
                        'precision = "fp32"\n'
                        'contract = { device = "cpu", dtypes = ["float32"], layout = "contiguous", width = 8 }\n'
                        'smoke = { inputs = [{ shape = ["rows", 8], dtype = "float32" }, { shape = [8], dtype = "float32" }] }\n'
                        "\n[routes.fastscale]", 1)
    text = text.replace('seams = { norm = "fastscale" }', 'seams = { norm = "fastscale2" }', 1)
    _manifest(root).write_text(text)


EDITS = {"contract": _edit_contract, "new-package": _edit_new_package}


def _check_fresh(root, old_digest):
    m = Manifest.read(_manifest(root))
    new_digest = m.routes["fastscale"].digest
    assert new_digest != old_digest
    lk = Lockfile.read(root / "lockfiles" / "toyq.lock")
    assert [r.cell["route-digest"] for r in lk.receipts.values() if r.route == "fastscale"] == [new_digest]
    assert frt_main(["lock", "--check"], cwd=root).code == 0  # the lock is fresh
    assert frt_main(["verify"], cwd=root).code == 0


def _locked_then_edited(root, edit: str) -> str:
    """Qualify and lock the route, then make ``edit``: the route digest the lock measured."""
    _qualify_and_lock(root)
    old_digest = Manifest.read(_manifest(root)).routes["fastscale"].digest
    EDITS[edit](root)
    return old_digest


@needs_no_gpu  # qualifies CPU-only packages on the detected hardware
@pytest.mark.parametrize("edit", sorted(EDITS))
def test_the_hints_of_frt_lock_after_an_edit_end_at_a_fresh_lock(qproject, edit):
    old_digest = _locked_then_edited(qproject, edit)
    walk = Walk(qproject)
    walk.follow("frt lock")
    _check_fresh(qproject, old_digest)
    assert [c for c, _ in walk.ran].count("frt lock") == 2  # refused once, then locked: no loop
    if edit == "new-package":  # the lock that pins the new package comes before the measurement
        assert walk.ran[1][0] == "frt lock --model toyq --allow-loss" and walk.ran[1][1] == 0
    else:
        assert walk.ran[1][0] == "frt qualify --model toyq --route fastscale --phase decode"


@needs_no_gpu  # qualifies CPU-only packages on the detected hardware
@pytest.mark.parametrize("edit", sorted(EDITS))
def test_qualify_first_after_an_edit_measures_the_manifest_or_says_which_lock_comes_first(qproject, edit):
    old_digest = _locked_then_edited(qproject, edit)
    walk = Walk(qproject)
    r = walk.run("frt qualify --model toyq --route fastscale")
    if edit == "new-package":
        assert r.code == 1
        assert ("error: route 'fastscale' of manifests/toyq.toml needs packages lockfiles/toyq.lock does not pin as "
                "the manifest declares them: testorg/fastscale2 is not pinned") in r.err
        assert ("hint: lock them first: `frt lock --model toyq --allow-loss` (it drops the 1 receipt(s) measured on "
                "route definitions manifests/toyq.toml no longer has: receipts/toyq/") in r.err
        walk.ran.clear()
        walk.follow("frt qualify --model toyq --route fastscale")
    else:
        assert r.code == 0, r.err
        assert "note: route fastscale changed since lockfiles/toyq.lock was written: measuring it as " \
               "manifests/toyq.toml defines it now" in r.err
    walk.follow("frt lock")
    _check_fresh(qproject, old_digest)
