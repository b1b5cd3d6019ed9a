"""Serving: ``load(model)`` → ``Plan`` (SPEC §5, §6, §8.5, §8.6).

``load`` is decision, then supply, then bind; it never measures:

1. find the lockfile in force (``lockfile=``, ``FRT_LOCK``, the project's
   ``lockfiles/<model>.lock``, the bundled one) and read it (digests verified);
2. resolve every phase band (``frt_dist.routes.resolver.resolve_all``); any refusal
   raises one ``RouteRefused`` with every reason, before anything is downloaded
   or imported;
3. load each package the chosen routes use, at the variant each decision names,
   through the one shared loader (``frt_dist.loader.load_locked``);
4. for every bound impl and band: the required ``entry`` must exist, optional
   ``probes`` are recorded as offered / not offered, and one bind-time smoke call
   must pass (``frt_dist.loader.smoke``). Every failure of steps 3–4 is gathered into
   one ``KernelUnavailable``.

The ``Plan`` hands out guarded callables per (seam, phase band). The guard
checks every input the impl's contract describes (its ``smoke.inputs``: count,
tensor-ness, device, dtype, layout, shape with the row band and width; see
``_Contract``) and counts; a miss on any input raises ``ContractViolation``, or,
when the caller gave ``host=`` and the plan's policy is ``fallback="host"``,
runs the host and counts a fallback. Everything the guard needs is computed
at bind time. Under ``torch.compile`` the guard's checks are traced (so they
become compile-time guards) but its counters cannot run; the ledger then says
the seam was "not observed under compilation" instead of reporting zeros.
Inside CUDA graph capture the guard runs as in eager mode (its checks decide
what is captured); a replay runs no Python, so the ledger counts captures apart
and says that replays are not counted.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Callable

from ..errors import ContractViolation, KernelUnavailable, LockfileError, RouteRefused, UsageError
from ..system.hardware import Hardware

__all__ = ["load", "Plan", "find_lockfile", "NOT_OBSERVED", "CAPTURED"]

NOT_OBSERVED = "not observed under compilation"
CAPTURED = "captured in CUDA graphs"
_DEVICE_FLAGS = {"cpu": "is_cpu", "cuda": "is_cuda", "xpu": "is_xpu", "mps": "is_mps", "meta": "is_meta"}


# ---------------------------------------------------------------------------
# finding the lockfile


def _project(project, lockfile=None):
    """The project ``load`` uses: ``project=`` (a ``Project`` or a folder), else found as the CLI
    finds it (``FRT_PROJECT``, upward, ``FRT_HOME``, the lockfile named); none is ``NoProject``,
    never the bundled demo."""
    from ..documents.lockfile import Lockfile  # noqa: PLC0415
    from ..project.discover import Project  # noqa: PLC0415

    if isinstance(project, Project):
        return project
    if project is not None:
        return Project.find(explicit=project)
    named = (lockfile if isinstance(lockfile, (str, os.PathLike)) else
             lockfile.path if isinstance(lockfile, Lockfile) else None)
    return Project.find(lockfile=named, python=True)


def find_lockfile(model: str, lockfile=None, project=None):
    """(Lockfile, project root for its path packages), in SPEC §8.4 order: ``lockfile=``,
    ``FRT_LOCK``, the project's ``lockfiles/<model>.lock``."""
    from ..loader import lock_root  # noqa: PLC0415
    from ..documents.lockfile import Lockfile  # noqa: PLC0415

    proj = _project(project, lockfile)
    if isinstance(lockfile, Lockfile):
        lock = lockfile
        root = lock_root(lock) if lock.path else proj.root
    else:
        path = lockfile if lockfile is not None else os.environ.get("FRT_LOCK") or None
        if path is None:
            path = proj.lockfile_path(model)
            if not path.is_file():
                hint = (f"copy lockfiles/{model}.lock here from the project that locks it" if proj.is_node
                        else f"run `frt lock --model {model}` in the project")
                raise LockfileError(f"no lockfile for model {model!r} (looked in {path}; {proj.describe()})",
                                    exit_code=1, hints=[hint])
        lock = Lockfile.read(path)
        root = lock_root(lock)
    if lock.model != model:
        raise UsageError(f"lockfile {lock.path or '(in memory)'} is for model {lock.model!r}, not {model!r}")
    return lock, root


# ---------------------------------------------------------------------------
# binds: which impl serves which seam in which band


@dataclass(frozen=True)
class _Bind:
    """Which impl (from which package variant) serves a seam in a phase band."""

    seam: str
    phase: str
    impl: object  # frt_dist.documents.manifest.Impl
    repo: str
    variant: str


def _binds(lock, decisions) -> list[_Bind]:
    m = lock.manifest
    out = []
    for phase, d in decisions.items():
        if d.decision != "route":
            continue
        for seam, name in sorted(m.routes[d.route].seams.items()):
            impl = m.impl(seam, name)
            out.append(_Bind(seam, phase, impl, impl.package, d.variants[impl.package]))
    return out


def _supply(lock, binds, *, mirror, hardware, allow_pins, root, project) -> tuple[dict, list[dict]]:
    """Check every package the binds use, then import them only if all passed:
    (repo → LoadedPackage, reasons of those that failed)."""
    from ..loader import CheckBatch, Ready, prepare_locked  # noqa: PLC0415

    ready, reasons = {}, []
    batch = CheckBatch()  # nothing is imported until every package is checked
    for repo, variant in sorted({(b.repo, b.variant) for b in binds}):
        try:
            ready[repo] = prepare_locked(lock, repo, variant, mirror=mirror, hardware=hardware,
                                         allow_pins=allow_pins, root=root, project=project, batch=batch)
        except KernelUnavailable as exc:
            reasons.extend(exc.reasons)
    if reasons:
        return {}, reasons
    packages = {}
    for repo, got in ready.items():
        try:
            packages[repo] = got.load() if isinstance(got, Ready) else got
        except KernelUnavailable as exc:
            reasons.extend(exc.reasons)
    return packages, reasons


def _check_binds(lock, binds, packages) -> tuple[dict, dict, list[dict]]:
    """Entry symbols, probes and smoke for every bind whose package loaded."""
    from ..loader import record_unavailable  # noqa: PLC0415
    from ..loader.smoke import smoke_impl  # noqa: PLC0415

    fns, probes, reasons = {}, {}, []
    cache: dict = {}  # smoke inputs shared by the binds of this load (weights materialised once)
    for b in binds:
        pkg = packages.get(b.repo)
        if pkg is None:
            continue
        facts = {"package": b.repo, "revision": pkg.revision, "seam": b.seam, "phase": b.phase, "impl": b.impl.name}
        if b.impl.layer is not None:  # a layer impl (vLLM binding): the host smokes it on its own op
            from .kernelize import layer_problem  # noqa: PLC0415

            why = layer_problem(pkg.module, b.impl.layer)
            if why:
                reasons.append({**facts, "kind": "entry", "reason": f"package {b.repo} revision {pkg.revision} {why}"})
                record_unavailable(b.repo, KernelUnavailable(reasons[-1]["reason"], reasons=[reasons[-1]]),
                                   version=pkg.version, revision=pkg.revision, variant=pkg.variant)
                continue
            fns[(b.seam, b.phase)] = vars(pkg.module.layers)[b.impl.layer]
            continue
        fn = getattr(pkg.module, b.impl.entry, None)
        if not callable(fn):
            why = f"package {b.repo} revision {pkg.revision} does not export the entry {b.impl.entry!r}"
            reasons.append({**facts, "kind": "entry", "reason": why})
            record_unavailable(b.repo, KernelUnavailable(why, reasons=[reasons[-1]]), version=pkg.version,
                               revision=pkg.revision, variant=pkg.variant)
            continue
        probes[(b.seam, b.phase)] = {p: ("offered" if pkg.offers(p) else "not offered") for p in b.impl.probes}
        why = smoke_impl(fn, b.impl, lock.manifest.phases[b.phase], cache=cache)
        if why:
            reasons.append({**facts, "kind": "smoke", "reason": why})
            record_unavailable(b.repo, KernelUnavailable(why, reasons=[reasons[-1]]), version=pkg.version,
                               revision=pkg.revision, variant=pkg.variant)
            continue
        fns[(b.seam, b.phase)] = fn
    return fns, probes, reasons


def load(model: str, *, precision: str | None = None, fallback: str = "refuse", accept=("certified_fast",),
         lockfile=None, mirror=None, hardware: Hardware | None = None, allow_pins: bool = False,
         project=None) -> "Plan":
    """Resolve, supply and bind ``model`` for this (or the declared) hardware (SPEC §5, §8.6)."""
    from ..loader import mirror_location  # noqa: PLC0415
    from ..routes.resolver import refusal_error, resolve_all  # noqa: PLC0415

    proj = _project(project, lockfile)
    lock, root = find_lockfile(model, lockfile, proj)
    from ..lock.freshness import manifest_drift  # noqa: PLC0415

    stale = manifest_drift(lock, root)
    if stale:  # SPEC §23: the lock is what was reviewed; say once that the manifest moved on
        import sys  # noqa: PLC0415

        print(f"warning: {stale}", file=sys.stderr)
    hw = hardware or Hardware.detect()
    decisions = resolve_all(lock, hardware=hw, precision=precision, fallback=fallback, accept=accept)
    refused = refusal_error(model, decisions)
    if refused is not None:
        raise refused
    binds = _binds(lock, decisions)
    mdir = mirror_location(mirror, proj)
    packages, reasons = _supply(lock, binds, mirror=mdir, hardware=hw, allow_pins=allow_pins, root=root,
                                project=proj)
    fns, probes, more = _check_binds(lock, binds, packages)
    reasons += more
    if reasons:
        raise KernelUnavailable(
            f"model {model!r}: {len(reasons)} problem(s) supplying the chosen routes; nothing was bound:\n  "
            + "\n  ".join(r["reason"] for r in reasons[:40]), reasons=reasons,
            hints=[f"republish the objects named from a machine holding the verified files (`frt mirror {mdir} "
                   "--repair`); nothing unverified was used"] if isinstance(mdir, str) else
                  ["`frt verify --mirror DIR` names damaged files; "
                   + ("`frt mirror DIR --from URL` refills them from the fleet's store" if proj.is_node
                      else "`frt mirror DIR` refills them")])
    plan = Plan(lock, hw, decisions, fallback, packages, binds, fns, probes)
    if stale:
        plan.notes.append(stale)
    return plan


def plan_for_route(lock, route: str, phases, hardware: Hardware, packages: dict, fns: dict) -> "Plan":
    """A ``Plan`` that binds ``route`` in ``phases`` without a decision from receipts.

    For the qualification door only (``frt qualify`` measures a route before any
    receipt exists): the same guarded entries and ledger serving uses, with
    ``fallback="host"`` so a contract miss is counted as a fallback, never hidden.
    """
    from ..routes.resolver import Decision  # noqa: PLC0415

    m = lock.manifest
    rt = m.routes[route]
    variants = {repo: packages[repo].variant for repo in m.route_packages(route)}
    revisions = {repo: packages[repo].revision for repo in variants}
    decisions = {ph: Decision(ph, "route", route, "unknown", None, (), variants, revisions) for ph in phases}
    binds = [_Bind(seam, ph, m.impl(seam, name), m.impl(seam, name).package, variants[m.impl(seam, name).package])
             for ph in phases for seam, name in sorted(rt.seams.items())]
    return Plan(lock, hardware, decisions, "host", packages, binds, dict(fns), {})


# ---------------------------------------------------------------------------
# contracts and counters


class _Counts:
    """Counters of one (seam, phase band). Plain attributes: cheap to bump, and
    transparent to ``torch.compile`` (a store to them is an ordinary side effect)."""

    def __init__(self, seam: str, phase: str):
        self.seam, self.phase = seam, phase
        self.calls = self.fallbacks = self.host_calls = self.contract_refusals = self.bind_refusals = 0
        self.misses: dict[str, int] = {}
        self.compiled = False
        self.captures = 0  # calls made while a CUDA graph was being captured (replays run no Python)
        self.active = True


def _dtype_name(dt) -> str:
    return str(dt).removeprefix("torch.")


_MISSING = object()  # an input the call did not pass


@dataclass(frozen=True)
class _Input:
    """What the contract asks of one positional input (from ``smoke.inputs[i]``)."""

    shape: tuple  # ints and "rows", as the smoke declares it
    dtype: object  # the torch.dtype it is pinned to, or None when it follows the call's precision
    dtype_name: str


def _signature(fn) -> tuple[list | None, float, set | None]:
    """(parameter name at each position or None for positional-only, most positional
    arguments ``fn`` takes, keyword names it takes or None for any) — None, inf, None
    when ``fn`` has no signature Python can read."""
    import inspect  # noqa: PLC0415

    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return None, float("inf"), None
    names, maxpos, kw = [], 0, set()
    P = inspect.Parameter
    for p in sig.parameters.values():
        if p.kind in (P.POSITIONAL_ONLY, P.POSITIONAL_OR_KEYWORD):
            names.append(p.name if p.kind is P.POSITIONAL_OR_KEYWORD else None)
            maxpos += 1
        if p.kind in (P.POSITIONAL_OR_KEYWORD, P.KEYWORD_ONLY):
            kw.add(p.name)
        if p.kind is P.VAR_POSITIONAL:
            maxpos = float("inf")
        if p.kind is P.VAR_KEYWORD:
            kw = None
    return names, maxpos, kw


class _Contract:
    """One impl's contract in one band, precomputed for the guard.

    The call's inputs are the impl's ``smoke.inputs``, in order: input *i* is the
    *i*-th positional argument, or the entry's parameter at that position passed by
    keyword (SPEC §7). Every input is checked (inputs are numbered from 1 in reasons):

    - **arity**: each input is present; a call the entry's signature cannot take
      (too many positional arguments, an unknown keyword) is a miss too. With
      ``contract.arity = "fixed"`` nothing beyond the inputs may be passed; the
      default ``"open"`` lets further arguments (``eps``, ``out``) through unchecked;
    - **type**: each input is a tensor;
    - **device**: each on the contract's device type and, off the CPU, all on the
      same device (``cuda:0`` with ``cuda:1`` is a miss);
    - **dtype**: the contract's ``dtypes`` are the precisions a call may run at;
      the smoke's dtypes say which inputs carry it. The first input whose smoke
      dtype is in ``dtypes`` leads, and every input declared with that same smoke
      dtype follows: each must be in ``dtypes`` and all share one dtype in a call
      (no float16 activations with bfloat16 weights). Any other input (int64
      indices, the float32 scales of an fp16 or fp8 kernel, even when float32 is
      also one of ``dtypes``) is pinned to exactly its smoke dtype. (The manifest
      reader refuses smoke inputs none of whose dtypes is in ``dtypes``.);
    - **layout** ``contiguous``: every input;
    - **shape**: every input has the smoke shape's rank and its fixed dims; the
      first input's leading dim is the call's row count (kind ``rows``: inside the
      band), every other ``"rows"`` dim equals it; ``width`` is the first input's
      last dim (kind ``width``; the manifest reader checks it agrees with the smoke).
    """

    def __init__(self, impl, phase, fn=None):
        import torch  # noqa: PLC0415

        c = impl.contract
        self.seam, self.phase = impl.seam, phase.name
        self.entry = impl.entry
        self.device = c["device"]
        self.dtype_names = list(c["dtypes"])
        self.dtypes = tuple(getattr(torch, n) for n in self.dtype_names if isinstance(getattr(torch, n, None), torch.dtype))
        self.contiguous = c.get("layout", "contiguous") == "contiguous"
        self.lo, self.hi = phase.rows
        self.width = c.get("width")
        self.fixed_arity = c.get("arity", "open") == "fixed"
        specs = impl.smoke.get("inputs") or [{"shape": ["rows"], "dtype": self.dtype_names[0] if self.dtype_names else "float32"}]
        # the precision leader: the first input whose smoke dtype is one of the contract's dtypes;
        # inputs declared with the leader's dtype follow the call's precision, the others are pinned
        lead = next((spec["dtype"] for spec in specs if spec["dtype"] in self.dtype_names), None)
        self.inputs = []
        for spec in specs:
            name = spec["dtype"]
            known = getattr(torch, name, None)
            # a name torch does not know pins to the name itself, which no tensor's dtype is
            pinned = None if name == lead else known if isinstance(known, torch.dtype) else name
            self.inputs.append(_Input(tuple(spec["shape"]), pinned, name))
        self.arity = len(self.inputs)
        self.names, self.maxpos, self.kwnames = _signature(fn) if fn is not None else (None, float("inf"), None)
        self._tensor = torch.Tensor
        self._flag = _DEVICE_FLAGS.get(self.device)  # e.g. "is_cpu": cheaper than device.type
        self._plain_max = self.arity if self.fixed_arity else self.maxpos  # positional-only calls up to this many

    # -- the exact check: every way a call misses, as (kind, reason) --------------
    def _inputs(self, args, kwargs, out: list) -> list:
        """The call's inputs in contract order (``_MISSING`` where absent); arity misses go to ``out``."""
        n, names = self.arity, self.names
        if not kwargs and n <= len(args) <= self._plain_max:  # the common shape: nothing to map or refuse
            return list(args[:n])
        ins = list(args[:n])
        used = []  # keywords that supplied an input
        if len(args) < n:
            if names is None:  # no readable signature: keyword values in call order
                for k in list(kwargs)[: n - len(args)]:
                    ins.append(kwargs[k])
                    used.append(k)
            else:
                for i in range(len(args), n):
                    nm = names[i] if i < len(names) else None
                    if nm is not None and nm in kwargs:
                        ins.append(kwargs[nm])
                        used.append(nm)
                    else:
                        ins.append(_MISSING)
        ins += [_MISSING] * (n - len(ins))
        for i, a in enumerate(ins):
            if a is _MISSING:
                out.append(("arity", f"input {i + 1}: missing (the contract declares {n} input{'s' if n > 1 else ''})"))
        if len(args) > self.maxpos:
            out.append(("arity", f"{len(args)} positional arguments; {self.entry}() takes at most {self.maxpos}"))
        if names is not None:
            for k in kwargs:
                if k in names[: len(args)]:
                    out.append(("arity", f"argument {k!r} given by position and by keyword"))
                elif self.kwnames is not None and k not in self.kwnames:
                    out.append(("arity", f"unexpected keyword argument {k!r}"))
        if self.fixed_arity:
            for i in range(n, len(args)):
                out.append(("arity", f"input {i + 1}: unexpected (the contract declares exactly {n} inputs)"))
            for k in kwargs:
                if k not in used and (names is None or k not in names[: len(args)]):
                    out.append(("arity", f"keyword argument {k!r}: unexpected (the contract declares exactly {n} inputs)"))
        return ins

    def _show(self, shape, rows) -> str:
        return "[" + ", ".join(str(rows) if d == "rows" and rows is not None else str(d) for d in shape) + "]"

    def problems(self, args, kwargs) -> list[tuple[str, str]]:
        """Every way the call's arguments miss the contract, as (kind, reason)."""
        out: list[tuple[str, str]] = []
        ins = self._inputs(args, kwargs, out)
        lead = None  # (input number, dtype) of the first input that sets the call's precision
        dev0 = None  # (input number, device) of the first input on the contract's device type
        rows = None  # the call's row count: the first input's leading dim
        for i, (a, spec) in enumerate(zip(ins, self.inputs)):
            tag = f"input {i + 1}"
            if a is _MISSING:
                continue
            if not isinstance(a, self._tensor):
                out.append(("type", f"{tag}: not a tensor ({type(a).__name__})"))
                continue
            if not (getattr(a, self._flag) if self._flag else a.device.type == self.device):
                out.append(("device", f"{tag}: device {a.device.type} not {self.device}"))
            elif self.device == "cpu":
                pass  # one CPU
            elif dev0 is None:
                dev0 = (i + 1, a.device)
            elif a.device != dev0[1]:
                out.append(("device", f"{tag}: device {a.device}, input {dev0[0]} is on {dev0[1]}"))
            dt = a.dtype
            if spec.dtype is not None:
                if dt != spec.dtype:
                    out.append(("dtype", f"{tag}: dtype {_dtype_name(dt)} not {spec.dtype_name}"))
            elif dt not in self.dtypes:
                out.append(("dtype", f"{tag}: dtype {_dtype_name(dt)} not in [{', '.join(self.dtype_names)}]"))
            elif lead is None:
                lead = (i + 1, dt)
            elif dt != lead[1]:
                out.append(("dtype", f"{tag}: dtype {_dtype_name(dt)}, input {lead[0]} is {_dtype_name(lead[1])} "
                                     "(one call has one precision)"))
            if self.contiguous and not a.is_contiguous():
                out.append(("layout", f"{tag}: not contiguous"))
            shape, got = spec.shape, tuple(a.shape)
            if i == 0:
                if not got:
                    out.append(("rows", f"{tag}: 0-dimensional; the {self.phase} band [{self.lo}, {self.hi}] "
                                        "needs a leading row dimension"))
                    continue
                rows = got[0]
                if not self.lo <= rows <= self.hi:
                    out.append(("rows", f"{tag}: rows {rows} outside {self.phase} band [{self.lo}, {self.hi}]"))
                if self.width is not None and got[-1] != self.width:
                    out.append(("width", f"{tag}: width {got[-1]} not {self.width}"))
            if len(got) != len(shape):
                out.append(("shape", f"{tag}: shape {list(got)}, expected {self._show(shape, rows)}"))
                continue
            bad = False
            for j, (g, d) in enumerate(zip(got, shape)):
                if i == 0 and (j == 0 and d == "rows" or j == len(got) - 1 and self.width is not None):
                    continue  # reported as rows / width above
                want = rows if d == "rows" else d
                if want is not None and g != want:
                    bad = True
            if bad:
                out.append(("shape", f"{tag}: shape {list(got)}, expected {self._show(shape, rows)}"))
        return out

    def violation(self, problems) -> ContractViolation:
        reasons = [{"seam": self.seam, "phase": self.phase, "kind": k, "reason": r} for k, r in problems]
        return ContractViolation(f"seam {self.seam!r} ({self.phase}): " + "; ".join(r for _, r in problems),
                                 reasons=reasons,
                                 hints=["pass host= and load(..., fallback=\"host\") to run the host path instead"])


def _detached(st: _Counts) -> RouteRefused:
    st.bind_refusals += 1
    return RouteRefused(f"seam {st.seam!r} ({st.phase}): the plan was detached and no host= was given",
                        reasons=[{"seam": st.seam, "phase": st.phase, "reason": "plan detached"}])


# The guard's hot path, specialised per contract at bind time (like dataclasses
# writes __init__): only the checks the contract declares are emitted, for every
# input, each as a direct attribute read. It takes the call shape the manifest's
# smoke declares (the inputs, positionally), and under arity "open" also further
# positional arguments the entry accepts; a call passing inputs by keyword has them
# moved to their positions by the kernel's parameter names, then checked the same way.
# Anything else (detached plan, a miss, a tensor subclass, a call that does not bind)
# takes ``slow``, which re-checks exactly: the fast path may only say "passes" when
# ``_Contract.problems`` would find nothing.
_FAST_TEMPLATE = """
def entry({params}, /, *args, **kwargs):
    if compiling():
        return traced(given(({call},) + args), kwargs)
    {count}
    if st.active and not args and not kwargs:
        if {checks}:
            return fn({call})
    {more}
    {keywords}
    return slow(given(({call},) + args), kwargs)
"""

# Inputs passed by keyword (generated when every input's parameter can be): when every
# input is there, each one given by keyword is moved to its position by the kernel's
# parameter name, the other keywords must be ones the kernel takes; then the same
# checks. A miss reaches ``slow`` (and the host) as the call was made.
_KEYWORDS_TEMPLATE = """elif st.active and kwargs and not args and {present}:
        pos, kw = given(({call},)), kwargs.copy()
{moves}
        if {rest} and {checks}:
            return fn({call}, **kw)
        return slow(pos, kwargs)"""

_MORE_TEMPLATE = """elif st.active and {nargs} and not kwargs:
        if {checks}:
            return fn({call}, *args)"""


def _given(args: tuple) -> tuple:
    """The positional arguments a call passed: the fast path's parameters default to ``_MISSING``."""
    for i, a in enumerate(args):
        if a is _MISSING:
            return args[:i]
    return args


def _fast_checks(con: _Contract) -> tuple[list[str], str, dict]:
    """(input variable names, the generated pass condition, the constants it reads)."""
    names = ["x"] + [f"a{i}" for i in range(1, con.arity)]
    consts: dict = {}
    conds = [f"(type({v}) is Tensor or type({v}) is Parameter)" for v in names]  # before any attribute read
    family = [i for i, spec in enumerate(con.inputs) if spec.dtype is None]
    for i, (v, spec) in enumerate(zip(names, con.inputs)):
        if spec.dtype is not None:
            consts[f"pin{i}"] = spec.dtype
            conds.append(f"{v}.dtype is pin{i}")
        elif len(con.dtypes) == 1:
            conds.append(f"{v}.dtype is dtype0")
        elif i == family[0]:
            conds.append(f"(d := {v}.dtype) in dtypes")
        else:
            conds.append(f"{v}.dtype is d")
    for v in names:
        conds.append(f"{v}.{_DEVICE_FLAGS[con.device]}" if con.device in _DEVICE_FLAGS else f"{v}.device.type == device")
    if con.device != "cpu" and len(names) > 1:  # one device for every input
        conds.append(" == ".join(f"{v}.get_device()" for v in names))
    if con.contiguous:
        conds.extend(f"{v}.is_contiguous()" for v in names)
    first = con.inputs[0].shape
    if not first:
        conds.append("False")  # a 0-dimensional first input has no row count: always the exact path
    else:
        conds.append(f"len(s := x.shape) == {len(first)}")
        conds.append("lo <= (r := s[0]) <= hi")
        for j, d in enumerate(first):
            if d == "rows" and j:
                conds.append(f"s[{j}] == r")
            elif d != "rows":
                conds.append(f"s[{j}] == {int(d)}")
    for i, (v, spec) in enumerate(zip(names, con.inputs)):
        if i == 0:
            continue
        if "rows" in spec.shape:
            dims = ", ".join("r" if d == "rows" else str(int(d)) for d in spec.shape)
            conds.append(f"{v}.shape == ({dims}{',' if len(spec.shape) == 1 else ''})")
        else:
            consts[f"shape{i}"] = tuple(int(d) for d in spec.shape)
            conds.append(f"{v}.shape == shape{i}")
    return names, "(" + "\n                and ".join(conds) + ")", consts


def _fast_source(con: _Contract) -> tuple[str, dict]:
    """The entry's source: the inputs are positional-only parameters defaulting to
    ``_MISSING`` (no argument tuple to build and unpack on the fast path); further
    positional arguments and keywords land in ``args`` / ``kwargs``."""
    names, checks, consts = _fast_checks(con)
    call = ", ".join(names)
    more = ""
    if not con.fixed_arity and con.maxpos > con.arity:  # further positional arguments the entry takes
        nargs = "True" if con.maxpos == float("inf") else f"len(args) <= {con.maxpos - con.arity}"
        more = _MORE_TEMPLATE.format(nargs=nargs, call=call, checks=checks)
    keywords = ""
    pnames = (con.names or [])[: con.arity]
    if len(pnames) == con.arity and None not in pnames:
        inames = frozenset(pnames)
        if con.fixed_arity:
            rest = "not kw"  # nothing but the inputs
        elif con.kwnames is None:  # the kernel takes **kwargs: anything but an input given twice
            consts["inames"], rest = inames, "(not kw or inames.isdisjoint(kw))"
        else:
            consts["okkw"], rest = frozenset(con.kwnames) - inames, "(not kw or okkw.issuperset(kw))"
        present = " and ".join(f"({v} is not _M or {p!r} in kwargs)" for v, p in zip(names, pnames))
        moves = "\n".join(f"        if {v} is _M:\n            {v} = kw.pop({p!r})" for v, p in zip(names, pnames))
        keywords = _KEYWORDS_TEMPLATE.format(present=present, moves=moves, rest=rest, checks=checks, call=call)
    # A CUDA contract's calls may be captured into a CUDA graph: the checks run at capture
    # (eager Python, the same path), replays run no Python, so a capture is counted apart.
    count = "if capturing():\n        st.captures += 1\n    st.calls += 1" if con.device == "cuda" else "st.calls += 1"
    src = _FAST_TEMPLATE.format(params=", ".join(f"{v}=_M" for v in names), call=call, checks=checks, more=more,
                                keywords=keywords, count=count)
    return src, consts


def _kernel_entry(fn: Callable, st: _Counts, con: _Contract, host: Callable | None, fall_back: bool) -> Callable:
    """The guarded kernel callable for one (seam, band): contract checks and counts."""
    import torch  # noqa: PLC0415

    host_ok = fall_back and host is not None

    def slow(args, kwargs):
        if not st.active:
            if host is None:
                raise _detached(st)
            st.host_calls += 1
            return host(*args, **kwargs)
        problems = con.problems(args, kwargs)
        if not problems:  # e.g. a tensor subclass, or an input passed by keyword
            return fn(*args, **kwargs)
        for kind, _ in problems:
            st.misses[kind] = st.misses.get(kind, 0) + 1
        if host_ok:
            st.fallbacks += 1
            return host(*args, **kwargs)
        st.contract_refusals += 1
        raise con.violation(problems)

    def traced(args, kwargs):
        st.compiled = True
        problems = con.problems(args, kwargs)  # evaluated at trace time; becomes compile guards
        if problems:
            if host_ok:
                return host(*args, **kwargs)
            # Building the error is not traceable: dynamo breaks the graph here and the
            # error is raised eagerly.
            raise con.violation(problems)
        return fn(*args, **kwargs)

    src, consts = _fast_source(con)
    namespace = {
        # torch.compiler.is_dynamo_compiling is a plain `return False` in eager and is
        # constant-folded to True while dynamo traces (is_compiling() costs ~3x more).
        "compiling": torch.compiler.is_dynamo_compiling, "traced": traced, "slow": slow, "fn": fn, "st": st,
        "capturing": torch.cuda.is_current_stream_capturing,
        "given": _given, "_M": _MISSING,
        "Tensor": torch.Tensor, "Parameter": torch.nn.Parameter,
        "dtype0": con.dtypes[0] if con.dtypes else None, "dtypes": con.dtypes,
        "device": con.device, "lo": con.lo, "hi": con.hi, **consts,
    }
    exec(compile(src, f"<frt guard {con.seam}/{con.phase}>", "exec"), namespace)  # noqa: S102
    entry = namespace["entry"]
    entry.__name__ = getattr(fn, "__name__", "entry")
    entry.__qualname__ = f"frt_guard[{con.seam}/{con.phase}]"
    entry.__doc__ = getattr(fn, "__doc__", None)
    entry.__wrapped__ = fn
    return entry


def _host_entry(host: Callable, st: _Counts) -> Callable:
    """The caller's host callable, counted (a host decision or an unbound seam)."""
    import torch  # noqa: PLC0415

    compiling = torch.compiler.is_dynamo_compiling  # a plain `return False` in eager; True while dynamo traces

    def entry(*args, **kwargs):
        if compiling():
            st.compiled = True
        else:
            st.calls += 1
            st.host_calls += 1
        return host(*args, **kwargs)

    entry.__name__ = getattr(host, "__name__", "host")
    entry.__qualname__ = f"frt_host[{st.seam}/{st.phase}]"
    entry.__wrapped__ = host
    return entry


# ---------------------------------------------------------------------------
# the plan


@dataclass
class Plan:
    """What ``load`` bound: ``decisions`` (``{phase: Decision}``), ``packages``
    (``{repo: LoadedPackage}``), guarded entries (``entry``), counts (``ledger``).
    ``notes`` carries what the loader recorded (e.g. a package with no archs)."""

    lockfile: object
    hardware: Hardware
    decisions: dict
    fallback: str
    packages: dict  # repo -> frt_dist.loader.LoadedPackage
    binds: list = field(repr=False)
    fns: dict = field(repr=False)  # (seam, phase) -> the package's entry function
    probes: dict = field(repr=False)  # (seam, phase) -> {symbol: "offered" | "not offered"}
    detached: bool = False

    def __post_init__(self):
        m = self.lockfile.manifest
        self.model = m.model
        self._counts = {(s, p): _Counts(s, p) for s in m.seams for p in self.decisions}
        self._impls = {(b.seam, b.phase): b for b in self.binds}
        # a layer impl (vLLM binding) is called as its op's forward by the host's adapter
        # (frt_dist.serve.vllm.ops), not through a function guard
        fn_binds = {k: b for k, b in self._impls.items() if b.impl.layer is None}
        self._contracts = {k: _Contract(b.impl, m.phases[b.phase], self.fns.get(k)) for k, b in fn_binds.items()}
        self._entries = {k: _kernel_entry(self.fns[k], self._counts[k], self._contracts[k], None, False)
                         for k in fn_binds}
        self.notes = [n for p in self.packages.values() for n in p.notes]

    # -- entries --------------------------------------------------------------
    def entry(self, seam: str, phase: str, host: Callable | None = None) -> Callable:
        """The guarded callable for ``seam`` in ``phase`` (SPEC §8.5).

        A route-decided band gives the kernel entry, guarded by its contract;
        ``host`` is what a contract miss falls back to under ``fallback="host"``.
        A host-decided band, or a seam the chosen route does not bind, gives
        ``host`` wrapped for counting, and raises ``RouteRefused`` without one.
        """
        if host is None:
            e = self._entries.get((seam, phase))
            if e is not None and not self.detached:
                return e
        return self._make_entry(seam, phase, host)

    def _make_entry(self, seam: str, phase: str, host: Callable | None) -> Callable:
        st = self._counts.get((seam, phase))
        if st is None:
            m = self.lockfile.manifest
            if seam not in m.seams:
                raise UsageError(f"unknown seam {seam!r} for model {self.model!r} (seams: {', '.join(m.seams)})")
            raise UsageError(f"unknown phase {phase!r} for model {self.model!r} (phases: {', '.join(self.decisions)})")
        key = (seam, phase)
        if key in self._contracts and not self.detached:
            return _kernel_entry(self.fns[key], st, self._contracts[key], host, self.fallback == "host")
        if host is not None:
            return _host_entry(host, st)
        st.bind_refusals += 1
        raise RouteRefused(self._why_host(seam, phase),
                           reasons=[{"seam": seam, "phase": phase, "reason": self._why_host(seam, phase)}],
                           hints=[f"pass host= (the caller's own {seam} implementation) to plan.entry"])

    def kernel_mapping(self, layers, *, device: str | None = None) -> dict:
        """The mapping ``kernels.use_kernel_mapping`` takes, served from this plan's verified
        modules: ``{seam: layer name}`` in, ``{layer name: {device: repository}}`` out
        (``frt_dist.serve.kernelize``). Bands decided ``host`` keep the module's own forward."""
        from .kernelize import kernel_mapping  # noqa: PLC0415

        return kernel_mapping(self, layers, device=device)

    def _why_host(self, seam: str, phase: str) -> str:
        d = self.decisions[phase]
        if self.detached:
            return f"seam {seam!r} in {phase} band: the plan was detached and no host= was given"
        if d.decision == "host":
            why = "; ".join(f"{r.route}: {r.reason}" for r in d.reasons) or "no qualified route"
            return f"{phase} band is decided host ({why}); entry({seam!r}, {phase!r}) needs host="
        return f"route {d.route!r} chosen for the {phase} band does not bind seam {seam!r}; pass host="

    def detach(self) -> None:
        """Release what ``load`` bound: guarded entries stop calling kernels (they
        call their ``host=`` if they have one, else raise ``RouteRefused``)."""
        self.detached = True
        for st in self._counts.values():
            st.active = False
        self._entries.clear()
        self.fns = {}

    # -- ledger ---------------------------------------------------------------
    def ledger(self, format: str | None = None):  # noqa: A002 - the SPEC's keyword
        """A snapshot of the counts (SPEC §8.5); ``format="prometheus"`` for text exposition.

        ``{"model", "lock-digest", "hardware", "fallback", "detached", "host-bands",
        "seams": {seam: {...}}, "totals": {"calls", "fallbacks", "host-decisions", "host-calls", "refusals"},
        "notes"}``.
        Per seam, summed over its phase bands: ``calls`` (guarded calls seen in
        eager mode), ``fallbacks`` (contract misses that ran ``host=``),
        ``host-calls`` (calls the host served by decision: a host band, an
        unbound seam, a detached plan), ``contract-misses`` (``{kind: n}``, kinds
        arity/type/device/dtype/layout/rows/width/shape, for any input; a call
        missing two ways counts twice), ``contract-refusals`` (misses that raised), ``bind-refusals``
        (``entry`` requests refused); ``route``/``state``/``receipt`` as
        ``{phase: value}`` (a seam's route differs per band); ``packages``
        (``{repo: revision}``), ``pinned`` (any author-pinned package),
        ``observed`` (false once the seam ran inside a compiled graph, whose
        calls the guard cannot count; ``notes`` says so), ``captures`` (calls made
        while a CUDA graph was captured: included in ``calls``, counted once each at
        capture, where the checks ran; replays run no Python; ``notes`` says so) and ``phases`` with the
        same facts per band plus ``decision``, ``impl`` and ``probes``.
        ``totals.host-decisions`` is the number of phase bands decided ``host`` (those
        ``host-bands`` lists), whether or not a call came yet; ``totals.host-calls`` the
        sum of the seams' ``host-calls``; ``totals.refusals`` of contract and bind refusals.
        """
        snap = self._snapshot()
        if format is None:
            return snap
        if format == "prometheus":
            return _prometheus(snap, self)
        raise UsageError(f"ledger format must be None or 'prometheus', got {format!r}")

    def _phase_view(self, seam: str, phase: str) -> dict:
        st, d = self._counts[(seam, phase)], self.decisions[phase]
        b = self._impls.get((seam, phase))
        return {
            "decision": "unbound" if d.decision == "route" and b is None else d.decision,
            "route": d.route, "state": d.state, "receipt": d.receipt,
            "impl": b.impl.name if b else None,
            "calls": st.calls, "fallbacks": st.fallbacks, "host-calls": st.host_calls,
            "contract-misses": dict(sorted(st.misses.items())), "contract-refusals": st.contract_refusals,
            "bind-refusals": st.bind_refusals, "observed": not st.compiled, "captures": st.captures,
            "probes": dict(self.probes.get((seam, phase), {})),
        }

    def _snapshot(self) -> dict:
        host_bands = sorted(p for p, d in self.decisions.items() if d.decision == "host")
        seams = {}
        totals = {"calls": 0, "fallbacks": 0, "host-decisions": len(host_bands), "host-calls": 0, "refusals": 0}
        for seam in self.lockfile.manifest.seams:
            phases = {p: self._phase_view(seam, p) for p in self.decisions}
            misses: dict[str, int] = {}
            for v in phases.values():
                for k, n in v["contract-misses"].items():
                    misses[k] = misses.get(k, 0) + n
            repos = sorted({self._impls[(seam, p)].repo for p in self.decisions if (seam, p) in self._impls})
            pkgs = {r: self.packages[r].revision for r in repos if r in self.packages}
            unobserved = [p for p, v in phases.items() if not v["observed"]]
            captured = [p for p, v in phases.items() if v["captures"]]
            entry = {
                "calls": sum(v["calls"] for v in phases.values()),
                "fallbacks": sum(v["fallbacks"] for v in phases.values()),
                "host-calls": sum(v["host-calls"] for v in phases.values()),
                "contract-misses": dict(sorted(misses.items())),
                "contract-refusals": sum(v["contract-refusals"] for v in phases.values()),
                "bind-refusals": sum(v["bind-refusals"] for v in phases.values()),
                "route": {p: v["route"] for p, v in phases.items()},
                "state": {p: v["state"] for p, v in phases.items()},
                "receipt": {p: v["receipt"] for p, v in phases.items()},
                "packages": pkgs,
                "pinned": any(self.packages[r].pinned for r in pkgs),
                "observed": not unobserved,
                "captures": sum(v["captures"] for v in phases.values()),
                "notes": [f"{NOT_OBSERVED}: calls of the {p} band inside compiled graphs are not counted"
                          for p in unobserved]
                + [f"{CAPTURED}: {phases[p]['captures']} call(s) of the {p} band were captured into CUDA graphs; "
                   "each counted once, at capture (its checks ran then); replays run no Python and are not counted"
                   for p in captured],
                "phases": phases,
            }
            seams[seam] = entry
            totals["calls"] += entry["calls"]
            totals["fallbacks"] += entry["fallbacks"]
            totals["host-calls"] += entry["host-calls"]
            totals["refusals"] += entry["contract-refusals"] + entry["bind-refusals"]
        return {
            "model": self.model, "lock-digest": self.lockfile.lock_digest, "hardware": self.hardware.to_dict(),
            "fallback": self.fallback, "detached": self.detached,
            "host-bands": host_bands,
            "seams": seams, "totals": totals, "notes": list(self.notes),
        }


# ---------------------------------------------------------------------------
# Prometheus text exposition

_METRICS = (
    ("frt_seam_calls_total", "counter", "Calls that entered the frt guard, per seam and phase band.", "calls"),
    ("frt_seam_fallbacks_total", "counter", "Contract misses that ran the caller's host path.", "fallbacks"),
    ("frt_seam_host_calls_total", "counter", "Calls served by the host path by decision (host band, unbound seam, detached).",
     "host-calls"),
    ("frt_seam_contract_refusals_total", "counter", "Contract misses that raised ContractViolation.",
     "contract-refusals"),
    ("frt_seam_bind_refusals_total", "counter", "plan.entry requests refused (RouteRefused).", "bind-refusals"),
    ("frt_seam_captures_total", "counter", "Calls made while a CUDA graph was captured (in calls; replays are not counted).",
     "captures"),
)


def _esc(v) -> str:
    return str(v).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(**kw) -> str:
    return "{" + ",".join(f'{k}="{_esc(v if v is not None else "")}"' for k, v in kw.items()) + "}"


def _prometheus(snap: dict, plan: Plan) -> str:
    model = snap["model"]
    lines: list[str] = []

    def head(name, kind, text):
        lines.extend([f"# HELP {name} {text}", f"# TYPE {name} {kind}"])

    views = [(seam, p, v) for seam, s in snap["seams"].items() for p, v in s["phases"].items()]
    for name, kind, text, key in _METRICS:
        head(name, kind, text)
        for seam, p, v in views:
            lines.append(f"{name}{_labels(model=model, seam=seam, phase=p, route=v['route'], state=v['state'])} {v[key]}")
    head("frt_seam_contract_misses_total", "counter", "Contract misses by reason kind (arity, type, device, dtype, layout, rows, width, shape).")
    for seam, p, v in views:
        for kind, n in v["contract-misses"].items():
            lines.append(f"frt_seam_contract_misses_total{_labels(model=model, seam=seam, phase=p, reason=kind)} {n}")
    head("frt_seam_observed", "gauge", "1 when the guard's counters saw every call; 0 when the seam ran inside "
         f"a compiled graph ({NOT_OBSERVED}).")
    for seam, p, v in views:
        lines.append(f"frt_seam_observed{_labels(model=model, seam=seam, phase=p)} {int(v['observed'])}")
    head("frt_package_info", "gauge", "Packages bound by the plan (value 1), with revision, variant and pin flag.")
    for repo, pkg in sorted(plan.packages.items()):
        lines.append(f"frt_package_info{_labels(model=model, repo=repo, revision=pkg.revision, variant=pkg.variant, source=pkg.source, pinned=str(pkg.pinned).lower())} 1")
    for key, name, kind, text in (
            ("calls", "frt_calls_total", "counter", "Guarded calls, all seams."),
            ("fallbacks", "frt_fallbacks_total", "counter", "Contract-miss fallbacks to the host, all seams."),
            ("host-decisions", "frt_host_decisions", "gauge", "Phase bands the plan decided host (no qualified route)."),
            ("host-calls", "frt_host_calls_total", "counter", "Calls served by the host by decision, all seams."),
            ("refusals", "frt_refusals_total", "counter", "Contract and bind refusals, all seams.")):
        head(name, kind, text)
        lines.append(f"{name}{_labels(model=model)} {snap['totals'][key]}")
    return "\n".join(lines) + "\n"

