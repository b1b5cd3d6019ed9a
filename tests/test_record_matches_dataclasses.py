"""frt_dist.base.record: the value classes on the start-up path behave as `dataclasses` made them."""

from __future__ import annotations

import dataclasses
import inspect
import pickle

import pytest

from frt_dist.base import record as _record


def _pair(frozen: bool):
    """The same class body made by `dataclasses` and by `_record`."""
    out = []
    for deco, fld in ((dataclasses.dataclass, dataclasses.field), (_record.dataclass, _record.field)):
        class C:
            a: int
            b: str = "x"
            c: tuple = fld(default_factory=tuple)
            d: tuple = fld(default=(), repr=False, compare=False)
            e: int = fld(init=False, default=7)
        out.append(deco(frozen=frozen)(C))
    return out


@pytest.mark.parametrize("frozen", [True, False])
def test_generated_methods_match_dataclasses(frozen):
    dc, rec = _pair(frozen)
    for args, kw in (((1,), {}), ((1, "y"), {"c": (1, 2)}), ((), {"a": 2, "d": (1,)})):
        x, y = dc(*args, **kw), rec(*args, **kw)
        assert repr(x) == repr(y)
        assert vars(x) == vars(y)
        assert (x == dc(*args, **kw)) and (y == rec(*args, **kw))
        assert y == rec(*args, **{**kw, "d": ("other",)})  # compare=False is not compared
        assert y != rec(5) and (y == x) is False  # another class is never equal
    assert rec.__match_args__ == dc.__match_args__
    assert str(inspect.signature(rec)) == str(inspect.signature(dc))  # names, defaults, annotations
    assert _record.dataclass(type("F", (), {"__annotations__": {"m": "dict"}, "m": _record.field(default_factory=dict)}))().m is not \
        _record.dataclass(type("F", (), {"__annotations__": {"m": "dict"}, "m": _record.field(default_factory=dict)}))().m
    for bad in ((), (1, "y", {}, (), 9)):
        with pytest.raises(TypeError):
            rec(*bad)
    with pytest.raises(TypeError):
        rec(1, e=3)  # init=False
    if frozen:
        assert hash(rec(1, "y")) == hash(dc(1, "y")) == hash(rec(1, "y", d=(9,)))
        for obj in (rec(1),):
            with pytest.raises(_record.FrozenInstanceError, match="cannot assign to field 'a'"):
                obj.a = 2
            with pytest.raises(AttributeError, match="cannot delete field 'b'"):
                del obj.b
            with pytest.raises(AttributeError):
                obj.new = 1  # as dataclasses: no attribute at all can be set
    else:
        assert rec.__hash__ is None and dc.__hash__ is None
        y = rec(1)
        y.a = 5
        assert y.a == 5


def test_the_standard_library_reads_them_as_dataclasses():
    _, rec = _pair(True)
    y = rec(1, "y", (1,), (2,))
    assert dataclasses.is_dataclass(y) and dataclasses.is_dataclass(rec)
    assert [f.name for f in dataclasses.fields(y)] == ["a", "b", "c", "d", "e"]
    assert dataclasses.asdict(y) == {"a": 1, "b": "y", "c": (1,), "d": (2,), "e": 7}
    z = dataclasses.replace(y, b="z")
    assert (z.a, z.b, z.c, z.d, z.e) == (1, "z", (1,), (2,), 7)
    assert _record.replace(y, b="z") == z
    with pytest.raises(ValueError, match="init=False"):
        _record.replace(y, e=1)

    @dataclasses.dataclass(frozen=True)
    class Sub(rec):  # a real dataclass may build on one
        f: int = 0

    assert repr(Sub(1, f=2)) == "test_the_standard_library_reads_them_as_dataclasses.<locals>.Sub(a=1, b='x', c=(), e=7, f=2)"


def test_post_init_and_own_methods_are_kept():
    calls = []

    @_record.dataclass(frozen=True)
    class P:
        a: int
        derived: int = _record.field(init=False, repr=False, compare=False)

        def __post_init__(self):
            calls.append(self.a)
            object.__setattr__(self, "derived", self.a * 2)

        def __repr__(self):
            return "mine"

    p = P(3)
    assert calls == [3] and p.derived == 6 and repr(p) == "mine"


def test_what_it_does_not_do_is_refused_at_class_creation():
    """Anything outside the subset fails loudly, never with other semantics."""
    with pytest.raises(TypeError, match="order"):
        @_record.dataclass(order=True)
        class A:
            a: int
    with pytest.raises(ValueError, match="mutable default"):
        @_record.dataclass
        class B:
            a: list = []
    with pytest.raises(TypeError, match="non-default argument 'b' follows default argument"):
        @_record.dataclass
        class C:
            a: int = 0
            b: int

    @dataclasses.dataclass
    class Real:
        a: int

    with pytest.raises(TypeError, match="use dataclasses"):
        @_record.dataclass
        class D(Real):
            b: int = 0


def test_frt_value_classes_are_equal_and_hash_as_before():
    """The classes moved off `dataclasses`: equality, hashing and replace as the tests and code use them."""
    from frt_dist.documents.lockfile import LockedVariant
    from frt_dist.system.hardware import Hardware

    h = Hardware(arch="x86_64", device_class="amd-epyc", software={"torch": "2.13"})
    assert h == Hardware(arch="x86_64", device_class="AMD EPYC", software={"torch": "2.13"})
    assert "fingerprint" not in repr(h) and repr(h).startswith("Hardware(arch='x86_64', device_class='amd-epyc'")
    h2 = _record.replace(h, software={"torch": "2.12"})
    assert h2.software == {"torch": "2.12"} and h2 != h and h2.fingerprint != h.fingerprint
    assert dataclasses.replace(h, software={"torch": "2.12"}) == h2
    with pytest.raises(AttributeError):
        h.arch = "9.0"
    assert pickle.loads(pickle.dumps(h)) == h
    assert "LockedVariant" in dataclasses.fields(LockedVariant)[0].__class__.__module__ or dataclasses.is_dataclass(LockedVariant)


def test_one_compared_field_compares_and_hashes_as_a_tuple():
    """dataclasses compares and hashes ``(self.a,)``, not ``self.a``: the same hash, and the same
    identity-first equality (a NaN field equals itself)."""
    made = []
    for deco, fld in ((dataclasses.dataclass, dataclasses.field), (_record.dataclass, _record.field)):
        class One:
            a: float
            note: str = fld(default="", compare=False)
        made.append(deco(frozen=True)(One))
    dc, rec = made
    nan = float("nan")
    assert hash(rec(2.5)) == hash(dc(2.5)) == hash((2.5,))
    assert rec(nan) == rec(nan, note="x") and dc(nan) == dc(nan)
    assert rec(1.0) != rec(2.0)


def test_methods_compiled_on_first_call_behave_from_the_first_call_on():
    """`__repr__`/`__eq__`/`__hash__` are compiled when first called: the first call and the later ones
    give the same answers, and a record that holds itself prints `...` (as dataclasses' repr)."""
    made = []
    for deco, fld in ((dataclasses.dataclass, dataclasses.field), (_record.dataclass, _record.field)):
        class Node:
            name: str
            children: list = fld(default_factory=list)
        made.append(deco(Node))
    for cls in made:
        n = cls("a")
        n.children.append(n)
        assert [repr(n), repr(n)] == ["test_methods_compiled_on_first_call_behave_from_the_first_call_on.<locals>.Node("
                                      "name='a', children=[...])"] * 2
        assert [n == cls("a", [n]), n == cls("a", [n])] == [True, True]
    frozen = _record.dataclass(frozen=True)(type("K", (), {"__annotations__": {"a": "int"}}))
    first, again = hash(frozen(3)), hash(frozen(3))
    assert first == again == hash((3,))


def test_an_inherited_class_attribute_is_a_default_as_in_dataclasses():
    made = []
    for deco in (dataclasses.dataclass, _record.dataclass):
        base = type("Base", (), {"b": 5})
        made.append(deco(type("C", (base,), {"__annotations__": {"a": "int", "b": "int"}, "a": 1})))
    dc, rec = made
    assert str(inspect.signature(rec)) == str(inspect.signature(dc)) == "(a: 'int' = 1, b: 'int' = 5) -> None"
    assert dataclasses.fields(rec) is not None and dataclasses.fields(rec(2)) == dataclasses.fields(rec(3))
