"""An enum member rebuilt by value (`Mode('steps')`) is suspicious only where the lookup runs
nothing of the class's own (round 55): on a value no member has, the lookup runs the class's
`_missing_`, and a metaclass of its own runs its `__call__` first. Each is judged from source:
the hostile samples are proven under pickle.load (a canary appears) and scanned (dangerous,
the canary never appears); an enum whose `_missing_` only raises stays suspicious."""

from __future__ import annotations

import pytest
from factories import MARK, PROTO2, REDUCE, STOP, TUPLE, module_on_path, p_global, p_unicode
from proofs import run_each_forked

from inspector.scan.engine import scan_bytes, scan_file

GADGETS = "rt55_enum_gadgets"
GADGET_SOURCE = '''
import enum


def _touch():
    open("canary", "w").close()


class Missing(enum.Enum):
    A = "a"

    @classmethod
    def _missing_(cls, value):
        _touch()
        return cls.A


class Meta(enum.EnumMeta):
    def __call__(cls, *args, **kwargs):
        _touch()
        return super().__call__(*args, **kwargs)


class Metaclassed(enum.Enum, metaclass=Meta):
    A = "a"


class Strict(str, enum.Enum):
    A = "a"

    @classmethod
    def _missing_(cls, value):
        raise ValueError(f"{value} is not one of {list(cls._value2member_map_)}")


class Plain(enum.Enum):
    A = "a"
'''


def _by_value(name: str, value: str) -> bytes:
    return PROTO2 + p_global(GADGETS, name) + MARK + p_unicode(value) + TUPLE + REDUCE + STOP


HOSTILE = {"missing": _by_value("Missing", "zz"), "metaclass": _by_value("Metaclassed", "a")}
# argv: the gadgets' folder, the sample
_LOAD = ("import pickle, sys\nsys.path.insert(0, sys.argv[1])\n"
         "pickle.load(open(sys.argv[2], 'rb'))\n")


@pytest.fixture(scope="module")
def gadgets(tmp_path_factory):
    """The gadgets' module, importable while this module's tests run."""
    folder = tmp_path_factory.mktemp("rt55-enum-gadgets")
    with module_on_path(folder, GADGETS, GADGET_SOURCE):
        yield folder


@pytest.fixture(scope="module")
def proven(tmp_path_factory, gadgets, python_exe):
    """Each hostile sample in a folder of its own, proven to write its canary (removed)."""
    work = tmp_path_factory.mktemp("rt55-enum")
    samples = {}
    for kind, data in HOSTILE.items():
        (work / kind).mkdir()
        (work / kind / "s.pkl").write_bytes(data)
        samples[kind] = (work / kind / "s.pkl", work / kind / "canary")
    outputs = run_each_forked(python_exe, _LOAD, [[str(gadgets), str(p)] for p, _ in
                                                  samples.values()],
                              [work / kind for kind in HOSTILE], ())
    for (kind, (_, canary)), (_, output) in zip(samples.items(), outputs, strict=True):
        assert canary.exists(), f"{kind}: the payload did not run under pickle.load: {output}"
        canary.unlink()
    return samples


@pytest.mark.parametrize("kind", sorted(HOSTILE))
def test_an_enum_lookup_that_runs_the_class_s_code_is_judged(proven, kind):
    sample, canary = proven[kind]
    res = scan_file(sample)
    assert res.verdict == "dangerous", res.to_json()
    assert not canary.exists()


@pytest.mark.parametrize("name", ["Strict", "Plain"])
def test_an_enum_whose_lookup_runs_nothing_of_note_stays_suspicious(gadgets, name):
    res = scan_bytes(_by_value(name, "a"))
    assert res.verdict == "suspicious", res.to_json()


def test_only_a_call_shaped_as_an_enum_lookup_has_its_class_source_read(monkeypatch) -> None:
    """`os.system('x')`, `Popen(['x'])` and `Mode(a, b)` are judged as calls whatever their
    class is, so no module source is parsed for them (reading every REDUCE target's module made
    the corpus scan 8x slower); `Mode('x')` is read."""
    import pickle

    from inspector.scan.pickles import state
    from inspector.scan.pickles.walker import scan_pickle

    asked: list[tuple[str, str]] = []
    monkeypatch.setattr(state, "is_enum_class", lambda m, n: asked.append((m, n)) or False)

    def reduce(module: str, name: str, args: bytes) -> bytes:
        return b"\x80\x02c" + f"{module}\n{name}\n".encode() + args + b"R."

    for data in (reduce("os", "system", pickle.dumps(("x",), 2)[2:-1]),
                 reduce("subprocess", "Popen", pickle.dumps((["x"],), 2)[2:-1]),
                 reduce("gadgets", "Mode", pickle.dumps(("a", "b"), 2)[2:-1])):
        scan_pickle(data)
    assert asked == []
    scan_pickle(reduce("gadgets", "Mode", pickle.dumps(("x",), 2)[2:-1]))
    assert asked == [("gadgets", "Mode")]
