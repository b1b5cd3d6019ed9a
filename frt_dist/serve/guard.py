"""The runtime guard: what ``Plan.entry`` hands out for a (seam, phase band).

The guard checks every input the impl's contract describes (its ``smoke.inputs``: count,
tensor-ness, device, dtype, layout, shape with the row band and width; see ``Contract``) and
counts (``ledger.Counts``); a miss on any input raises ``ContractViolation``, or, when the
caller gave ``host=`` and the plan's policy is ``fallback="host"``, runs the host and counts a
fallback. Everything the guard needs is computed at bind time, and its hot path is generated
per contract (``_fast_source``). Under ``torch.compile`` the guard's checks are traced (so
they become compile-time guards) but its counters cannot run; the ledger then says the seam
was "not observed under compilation" instead of reporting zeros. Inside CUDA graph capture
the guard runs as in eager mode (its checks decide what is captured); a replay runs no
Python, so the ledger counts captures apart and says that replays are not counted.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..errors import ContractViolation, RouteRefused
from .ledger import Counts

__all__ = ["Contract", "TensorRule", "kernel_entry", "host_entry"]

_DEVICE_FLAGS = {"cpu": "is_cpu", "cuda": "is_cuda", "xpu": "is_xpu", "mps": "is_mps", "meta": "is_meta"}


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


class TensorRule:
    """What an impl's contract (``contract`` in the manifest) asks of one tensor by itself: its
    device type, a dtype among the contract's ``dtypes``, its layout, its width (last dim). The one
    reading of a contract table: ``Contract`` (a function impl's guard, which adds what a call of
    several inputs needs) and the vLLM router (``frt_dist.serve.vllm.plugin.Band``: a layer impl's
    input) both check through it, with the same reasons."""

    def __init__(self, contract: dict):
        import torch  # noqa: PLC0415

        self.device = contract.get("device")
        self.dtype_names = list(contract.get("dtypes", ()))
        self.dtypes = tuple(getattr(torch, n) for n in self.dtype_names if isinstance(getattr(torch, n, None), torch.dtype))
        self.contiguous = contract.get("layout", "contiguous") == "contiguous"
        self.width = contract.get("width")
        self.flag = _DEVICE_FLAGS.get(self.device)  # e.g. "is_cpu": cheaper than device.type

    def on_device(self, a) -> bool:
        return getattr(a, self.flag) if self.flag else a.device.type == self.device

    def fits(self, x) -> bool:
        """``problems(x)`` would find nothing (the per-call fast path)."""
        return (self.on_device(x) and x.dtype in self.dtypes and (not self.contiguous or x.is_contiguous())
                and (self.width is None or x.shape[-1] == self.width))

    def problems(self, x, tag: str = "input 1") -> list[tuple[str, str]]:
        """Every way ``x`` misses the rule, as (kind, reason), ``tag`` naming it."""
        out = []
        if not self.on_device(x):
            out.append(("device", f"{tag}: device {x.device.type} not {self.device}"))
        if x.dtype not in self.dtypes:
            out.append(("dtype", f"{tag}: dtype {_dtype_name(x.dtype)} not in [{', '.join(self.dtype_names)}]"))
        if self.contiguous and not x.is_contiguous():
            out.append(("layout", f"{tag}: not contiguous"))
        if self.width is not None and x.shape[-1] != self.width:
            out.append(("width", f"{tag}: width {x.shape[-1]} not {self.width}"))
        return out


class Contract:
    """One impl's contract in one band, precomputed for the guard.

    The call's inputs are the impl's ``smoke.inputs``, in order: input *i* is the
    *i*-th positional argument, or the entry's parameter at that position passed by
    keyword (docs/reference.md#qualification). Every input is checked (inputs are numbered from 1 in reasons):

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
        rule = self.rule = TensorRule(c)
        self.device, self.dtype_names, self.dtypes = rule.device, rule.dtype_names, rule.dtypes
        self.contiguous, self.width = rule.contiguous, rule.width
        self.lo, self.hi = phase.rows
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
        for i, (a, spec) in enumerate(zip(ins, self.inputs, strict=False)):
            tag = f"input {i + 1}"
            if a is _MISSING:
                continue
            if not isinstance(a, self._tensor):
                out.append(("type", f"{tag}: not a tensor ({type(a).__name__})"))
                continue
            if not self.rule.on_device(a):
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
            for j, (g, d) in enumerate(zip(got, shape, strict=False)):
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


def _detached(st: Counts) -> RouteRefused:
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
# ``Contract.problems`` would find nothing.
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


def _fast_checks(con: Contract) -> tuple[list[str], str, dict]:
    """(input variable names, the generated pass condition, the constants it reads)."""
    names = ["x"] + [f"a{i}" for i in range(1, con.arity)]
    consts: dict = {}
    conds = [f"(type({v}) is Tensor or type({v}) is Parameter)" for v in names]  # before any attribute read
    family = [i for i, spec in enumerate(con.inputs) if spec.dtype is None]
    for i, (v, spec) in enumerate(zip(names, con.inputs, strict=False)):
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
    for i, (v, spec) in enumerate(zip(names, con.inputs, strict=False)):
        if i == 0:
            continue
        if "rows" in spec.shape:
            dims = ", ".join("r" if d == "rows" else str(int(d)) for d in spec.shape)
            conds.append(f"{v}.shape == ({dims}{',' if len(spec.shape) == 1 else ''})")
        else:
            consts[f"shape{i}"] = tuple(int(d) for d in spec.shape)
            conds.append(f"{v}.shape == shape{i}")
    return names, "(" + "\n                and ".join(conds) + ")", consts


def _fast_source(con: Contract) -> tuple[str, dict]:
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
        present = " and ".join(f"({v} is not _M or {p!r} in kwargs)" for v, p in zip(names, pnames, strict=False))
        moves = "\n".join(f"        if {v} is _M:\n            {v} = kw.pop({p!r})" for v, p in zip(names, pnames, strict=False))
        keywords = _KEYWORDS_TEMPLATE.format(present=present, moves=moves, rest=rest, checks=checks, call=call)
    # A CUDA contract's calls may be captured into a CUDA graph: the checks run at capture
    # (eager Python, the same path), replays run no Python, so a capture is counted apart.
    count = "if capturing():\n        st.captures += 1\n    st.calls += 1" if con.device == "cuda" else "st.calls += 1"
    src = _FAST_TEMPLATE.format(params=", ".join(f"{v}=_M" for v in names), call=call, checks=checks, more=more,
                                keywords=keywords, count=count)
    return src, consts


def kernel_entry(fn: Callable, st: Counts, con: Contract, host: Callable | None, fall_back: bool) -> Callable:
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
    exec(compile(src, f"<frt guard {con.seam}/{con.phase}>", "exec"), namespace)
    entry = namespace["entry"]
    entry.__name__ = getattr(fn, "__name__", "entry")
    entry.__qualname__ = f"frt_guard[{con.seam}/{con.phase}]"
    entry.__doc__ = getattr(fn, "__doc__", None)
    entry.__wrapped__ = fn
    return entry


def host_entry(host: Callable, st: Counts) -> Callable:
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
