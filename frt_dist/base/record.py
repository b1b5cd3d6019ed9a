"""Value classes without the ``dataclasses`` module's start-up cost.

``@dataclass`` costs every process that imports a value class: ``dataclasses`` imports
``inspect`` (with ``ast``, ``dis``, ``tokenize``: ~8 ms), and each decorated class runs a few
hundred lines of Python and one ``exec`` per generated method. ``frt resolve`` loads 23 such
classes before it decides anything, which was most of what kept it above 2x the bare
interpreter.

This module is a drop-in for the subset of ``dataclasses`` frt's value classes use
(``@dataclass``, ``@dataclass(frozen=True)``, ``field(default=, default_factory=, init=,
repr=, compare=)``) and generates the same methods with the same behaviour: ``__init__``
(defaults, default factories, ``init=False`` fields, ``__post_init__``), ``__repr__``
(``Name(a=1, b='x')``, fields with ``repr=False`` left out), ``__eq__`` (same class only, the
``compare=True`` fields as a tuple), ``__hash__`` (frozen: the hash of that tuple; not frozen:
unhashable), frozen ``__setattr__``/``__delattr__`` (``FrozenInstanceError``, an
``AttributeError``) and ``__match_args__``; a method the class body defines is kept, as
``dataclasses`` keeps it. Only ``__init__`` is compiled when
the class is made (for the speed and the argument errors of a real signature); ``__repr__``,
``__eq__`` and ``__hash__`` are compiled the first time they are called (most processes never
call them on most classes); the frozen ``__setattr__``/``__delattr__`` are closures.

The standard library's functions still work on these classes: ``dataclasses.is_dataclass``,
``fields``, ``asdict``, ``replace`` and a ``@dataclass`` subclass all read
``__dataclass_fields__``, which is built (and ``dataclasses`` imported) the first time
something asks for it. ``replace`` here does what ``dataclasses.replace`` does without that
import. Anything outside the subset (``order=``, ``slots=``, ``kw_only``, ``InitVar``, a base
class that is a real dataclass) is refused at class creation, so a new use cannot silently
get different semantics: use ``dataclasses`` itself there.
"""

from __future__ import annotations

import reprlib

__all__ = ["FrozenInstanceError", "dataclass", "field", "replace"]


class _Missing:
    __slots__ = ()

    def __repr__(self) -> str:
        return "MISSING"


MISSING = _Missing()
_HAS_DEFAULT_FACTORY = type("_HAS_DEFAULT_FACTORY", (), {"__repr__": lambda self: "<factory>"})()


class FrozenInstanceError(AttributeError):
    """Assigning to or deleting a field of a frozen record (as ``dataclasses.FrozenInstanceError``)."""


class _Field:
    __slots__ = ("name", "type", "default", "default_factory", "init", "repr", "compare")

    def __init__(self, default, default_factory, init, repr, compare):
        self.name = None
        self.type = None
        self.default = default
        self.default_factory = default_factory
        self.init = init
        self.repr = repr
        self.compare = compare


def field(*, default=MISSING, default_factory=MISSING, init=True, repr=True, compare=True):
    """As ``dataclasses.field`` (the arguments frt uses)."""
    if default is not MISSING and default_factory is not MISSING:
        raise ValueError("cannot specify both default and default_factory")
    return _Field(default, default_factory, init, repr, compare)


class _Params:
    """``__dataclass_params__``: what a ``dataclasses`` subclass reads of its base."""

    __slots__ = ("init", "repr", "eq", "order", "unsafe_hash", "frozen")

    def __init__(self, init, repr, eq, frozen):
        self.init, self.repr, self.eq, self.order, self.unsafe_hash, self.frozen = init, repr, eq, False, False, frozen


class _LazyFields:
    """``__dataclass_fields__``: real ``dataclasses.Field`` objects, made on first use."""

    def __init__(self, fields: tuple):
        self.fields = fields
        self.made = None

    def __get__(self, obj, owner):
        if self.made is not None:
            return self.made
        import dataclasses  # noqa: PLC0415 - only what reads dataclass fields pays for it

        out = {}
        for f in self.fields:
            kw = {"default_factory": f.default_factory} if f.default_factory is not MISSING else (
                {"default": f.default} if f.default is not MISSING else {})
            df = dataclasses.field(init=f.init, repr=f.repr, compare=f.compare, **kw)
            df.name, df.type, df.kw_only = f.name, f.type, False
            df._field_type = dataclasses._FIELD  # what fields()/replace()/asdict() select on
            out[f.name] = df
        self.made = out
        return out


def _is_classvar(annotation) -> bool:
    text = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", repr(annotation))
    return text.startswith(("ClassVar", "typing.ClassVar", "t.ClassVar"))


def _collect(cls) -> tuple:
    fields: dict[str, _Field] = {}
    for base in cls.__mro__[-1:0:-1]:
        if "__dataclass_fields__" in base.__dict__:
            if "_record_fields" not in base.__dict__:
                raise TypeError(f"{cls.__qualname__}: a base that is a `dataclasses` dataclass; use dataclasses")
            for f in base._record_fields:
                fields[f.name] = f
    for name, annotation in cls.__dict__.get("__annotations__", {}).items():
        if _is_classvar(annotation):
            continue
        text = annotation if isinstance(annotation, str) else repr(annotation)
        if text.startswith(("InitVar", "dataclasses.InitVar", "KW_ONLY", "dataclasses.KW_ONLY")):
            raise TypeError(f"{cls.__qualname__}.{name}: InitVar/KW_ONLY are not supported here; use dataclasses")
        value = getattr(cls, name, MISSING)  # as dataclasses: an inherited class attribute is a default too
        if isinstance(value, _Field):
            f = value
            if f.default is MISSING:
                delattr(cls, name)
            else:
                setattr(cls, name, f.default)
        else:
            f = _Field(value, MISSING, True, True, True)
        if f.default is not MISSING and f.default.__class__.__hash__ is None:
            raise ValueError(f"mutable default {type(f.default)} for field {name} is not allowed: use default_factory")
        f.name, f.type = name, annotation
        fields[name] = f
    return tuple(fields.values())


def _on_first_call(cls, name: str, src: str):
    """``name``, compiled from ``src`` the first time it is called and then put on ``cls`` in this
    stand-in's place: most processes never compare, hash or print most records, and the compiled
    form is what dataclasses generates (as fast; closures over the field names took 2x as long)."""
    def first_call(self, *args):
        ns: dict = {}
        exec(src, {}, ns)
        fn = ns[name]
        fn.__qualname__ = f"{cls.__qualname__}.{name}"
        if name == "__repr__":
            fn = reprlib.recursive_repr()(fn)
        setattr(cls, name, fn)
        return fn(self, *args)
    return first_call


def _frozen_fns(cls, names: frozenset) -> dict:
    def __setattr__(self, name, value):
        if type(self) is cls or name in names:
            raise FrozenInstanceError(f"cannot assign to field {name!r}")
        super(cls, self).__setattr__(name, value)

    def __delattr__(self, name):
        if type(self) is cls or name in names:
            raise FrozenInstanceError(f"cannot delete field {name!r}")
        super(cls, self).__delattr__(name)
    return {"__setattr__": __setattr__, "__delattr__": __delattr__}


def _process(cls, frozen: bool, eq: bool, init: bool, repr_: bool):
    fields = _collect(cls)
    for b in cls.__mro__[1:-1]:
        if "_record_frozen" in b.__dict__ and b._record_frozen != frozen:
            raise TypeError("cannot inherit frozen dataclass from a non-frozen one" if not frozen else
                            "cannot inherit non-frozen dataclass from a frozen one")
    env = {"MISSING": MISSING, "_HAS_DEFAULT_FACTORY": _HAS_DEFAULT_FACTORY, "__object_setattr": object.__setattr__}
    src: list[str] = []
    own = cls.__dict__

    def assign(name: str, value: str) -> str:
        return f"  __object_setattr(self, {name!r}, {value})" if frozen else f"  self.{name} = {value}"

    if init and "__init__" not in own:
        params, body, seen_default = ["self"], [], False
        for f in fields:
            if f.default is not MISSING:
                env[f"__dflt_{f.name}"] = f.default
            if f.init:
                if f.default is not MISSING:
                    params.append(f"{f.name}=__dflt_{f.name}")
                    seen_default = True
                elif f.default_factory is not MISSING:
                    params.append(f"{f.name}=_HAS_DEFAULT_FACTORY")
                    seen_default = True
                elif seen_default:
                    raise TypeError(f"non-default argument {f.name!r} follows default argument")
                else:
                    params.append(f.name)
            if f.default_factory is not MISSING:
                env[f"__dflt_{f.name}"] = f.default_factory
                value = (f"__dflt_{f.name}() if {f.name} is _HAS_DEFAULT_FACTORY else {f.name}" if f.init
                         else f"__dflt_{f.name}()")
                body.append(assign(f.name, value))
            elif f.init:
                body.append(assign(f.name, f.name))
            # init=False with a plain default: read from the class attribute, as dataclasses leaves it
        if hasattr(cls, "__post_init__"):
            body.append("  self.__post_init__()")
        src.append(f"def __init__({', '.join(params)}):\n" + ("\n".join(body) or "  pass"))
    methods: dict = {}
    if src:
        exec(src[0], env, methods)
        methods["__init__"].__annotations__ = {**{f.name: f.type for f in fields if f.init}, "return": None}
    # compiling every method when the class is made cost ~0.3 ms a class: the rest wait for their first call
    if repr_ and "__repr__" not in own:
        parts = ", ".join(f"{f.name}={{self.{f.name}!r}}" for f in fields if f.repr)
        methods["__repr__"] = _on_first_call(cls, "__repr__", f"def __repr__(self):\n"
                                             f"  return self.__class__.__qualname__ + f\"({parts})\"")
    compared = [f.name for f in fields if f.compare]
    values = "(" + "".join(f"self.{n}," for n in compared) + ")"  # a tuple, as dataclasses compares and hashes
    if eq and "__eq__" not in own:
        others = "(" + "".join(f"other.{n}," for n in compared) + ")"
        methods["__eq__"] = _on_first_call(cls, "__eq__", f"def __eq__(self, other):\n"
                                           f"  if other.__class__ is self.__class__:\n    return {values} == {others}\n"
                                           f"  return NotImplemented")
    if frozen:
        for name in ("__setattr__", "__delattr__"):
            if name in own:
                raise TypeError(f"Cannot overwrite attribute {name} in class {cls.__name__}")
        methods.update(_frozen_fns(cls, frozenset(f.name for f in fields)))
    class_hash = own.get("__hash__", MISSING)  # dataclasses' rule: `__hash__ = None` set by an own __eq__ is not explicit
    explicit_hash = not (class_hash is MISSING or (class_hash is None and "__eq__" in own))
    if eq and frozen and not explicit_hash:
        methods["__hash__"] = _on_first_call(cls, "__hash__", f"def __hash__(self):\n  return hash({values})")
    for name, fn in methods.items():
        fn.__qualname__ = f"{cls.__qualname__}.{name}"
        setattr(cls, name, fn)
    if eq and not frozen and not explicit_hash:
        cls.__hash__ = None  # mutable and compared by value: unhashable, as dataclasses makes it
    if "__match_args__" not in own:
        cls.__match_args__ = tuple(f.name for f in fields if f.init)
    if cls.__doc__ is None:
        cls.__doc__ = f"{cls.__name__}({', '.join(f.name for f in fields if f.init)})"
    cls._record_fields = fields
    cls._record_frozen = frozen
    cls.__dataclass_fields__ = _LazyFields(fields)
    cls.__dataclass_params__ = _Params(init, repr_, eq, frozen)
    return cls


def dataclass(cls=None, /, *, frozen: bool = False, eq: bool = True, init: bool = True, repr: bool = True,
              **unsupported):
    """As ``dataclasses.dataclass`` for frt's value classes (see the module's docstring)."""
    if unsupported:
        raise TypeError(f"frt_dist.base.record.dataclass: {', '.join(sorted(unsupported))} not supported; "
                        f"use dataclasses")

    def wrap(c):
        return _process(c, frozen, eq, init, repr)

    return wrap if cls is None else wrap(cls)


def replace(obj, /, **changes):
    """As ``dataclasses.replace``: a new record with ``changes`` applied (``init=False`` fields
    are made again by ``__init__``/``__post_init__`` and cannot be given)."""
    fields = getattr(type(obj), "_record_fields", None)
    if fields is None:
        import dataclasses  # noqa: PLC0415 - a real dataclass

        return dataclasses.replace(obj, **changes)
    for f in fields:
        if not f.init:
            if f.name in changes:
                raise ValueError(f"field {f.name} is declared with init=False, it cannot be specified with replace()")
            continue
        if f.name not in changes:
            changes[f.name] = getattr(obj, f.name)
    return obj.__class__(**changes)
