"""What benign saves call while loading, and what each allowed callable does with its arguments.

Torch's and NumPy's rebuild functions, the plain containers their pickles build, and the
rebuilds NumPy's random generators and scikit-learn's compiled classes pickle themselves with
(`LIBRARY_REBUILDS`). A name here only says the call is one benign saves make: whatever such a
callable calls, constructs or calls a method of among its arguments (`CALLS_ARGUMENTS`) is
judged as a call of its own, so an allowed name cannot lend its trust to what it is handed.
"""

from __future__ import annotations

from dataclasses import dataclass


def words(text: str) -> list[str]:
    """Split a whitespace-separated table into names."""
    return text.split()


# Compiled classes and pickling helpers of NumPy's random generators and scikit-learn that
# their own pickles call (a fitted forest, gradient boosting, SGD, nearest neighbours, a
# Generator or RandomState, a protocol-5 array), and NumPy's masked-array rebuild (a masked
# array pickles itself as `_mareconstruct(MaskedArray, ndarray, shape, dtype)`: a fitted
# GridSearchCV's cv_results_ holds them). Each was read in its library's source: a
# compiled class's constructor takes typed numbers and arrays, and the helpers' calls of their
# arguments are declared in CALLS_ARGUMENTS. A user-supplied distance function
# (PyFuncDistance) calls code of the pickle's choosing at use, and is left out.
_SKLEARN_LOSSES = words("""
AbsoluteError ExponentialLoss HalfBinomialLoss HalfGammaLoss HalfMultinomialLoss
HalfPoissonLoss HalfSquaredError HalfTweedieLoss HalfTweedieLossIdentity HuberLoss PinballLoss
""")
_SKLEARN_METRICS = words("""
BrayCurtis Canberra Chebyshev Dice Euclidean Hamming Haversine Jaccard Kulsinski Mahalanobis
Manhattan Matching Minkowski RogersTanimoto RussellRao SEuclidean SokalMichener SokalSneath
""")
LIBRARY_REBUILDS = frozenset(
    [f"numpy.{core}.numeric._frombuffer" for core in ("core", "_core")]
    + [f"numpy.random._pickle.__{kind}_ctor" for kind in ("bit_generator", "generator",
                                                          "randomstate")]
    + words("""
numpy.random._pcg64.PCG64 numpy.random._pcg64.PCG64DXSM numpy.random._mt19937.MT19937
numpy.random._philox.Philox numpy.random._sfc64.SFC64
numpy.random.bit_generator.SeedSequence numpy.random.bit_generator.SeedlessSeedSequence
numpy.random.bit_generator.__pyx_unpickle_SeedSequence
numpy.random.bit_generator.__pyx_unpickle_SeedlessSeedSequence
sklearn.tree._tree.Tree
sklearn.linear_model._sgd_fast.Hinge sklearn.linear_model._sgd_fast.SquaredHinge
sklearn.linear_model._sgd_fast.ModifiedHuber sklearn.linear_model._sgd_fast.EpsilonInsensitive
sklearn.linear_model._sgd_fast.SquaredEpsilonInsensitive
sklearn.metrics._dist_metrics.newObj sklearn.neighbors._kd_tree.newObj
sklearn.neighbors._ball_tree.newObj numpy.ma.core._mareconstruct numpy.ma.core.MaskedArray
numpy.ma.MaskedArray
""")
    + [f"sklearn._loss._loss.Cy{loss}" for loss in _SKLEARN_LOSSES]
    + [f"sklearn.metrics._dist_metrics.{metric}Distance{bits}"
       for metric in _SKLEARN_METRICS for bits in ("32", "64")]
    + [f"sklearn.neighbors._{module}.{tree}{bits}" for module, tree in (
        ("kd_tree", "KDTree"), ("ball_tree", "BallTree")) for bits in ("", "32", "64")]
)


# torch's struct-sequence result types (`x.max(0)`, `topk`, `sort`...): C tuple types torch
# makes from `torch._C._return_types`, so their names cannot be read from torch's Python source.
# A call of one (`max((values, indices), {})`, what their __reduce__ writes) only stores the
# sequence's items: tests/test_scan_rt55_pickle_data_types.py holds each name to the installed
# type. torch.return_types' own helpers (pytree_register_structseq) are not among them.
STRUCT_SEQUENCES = frozenset(f"torch.return_types.{name}" for name in words("""
_fake_quantize_per_tensor_affine_cachemask_tensor_qparams _fused_moving_avg_obs_fq_helper
_linalg_det _linalg_det_out _linalg_eigh _linalg_eigh_out _linalg_slogdet _linalg_slogdet_out
_linalg_solve_ex _linalg_solve_ex_out _linalg_svd _linalg_svd_out _lu_with_info
_scaled_dot_product_cudnn_attention _scaled_dot_product_efficient_attention
_scaled_dot_product_flash_attention _scaled_dot_product_flash_attention_for_cpu _unpack_dual
aminmax aminmax_out cummax cummax_out cummin cummin_out frexp frexp_out geqrf geqrf_out histogram
histogram_out histogramdd kthvalue kthvalue_out linalg_cholesky_ex linalg_cholesky_ex_out
linalg_eig linalg_eig_out linalg_eigh linalg_eigh_out linalg_inv_ex linalg_inv_ex_out
linalg_ldl_factor linalg_ldl_factor_ex linalg_ldl_factor_ex_out linalg_ldl_factor_out linalg_lstsq
linalg_lstsq_out linalg_lu linalg_lu_factor linalg_lu_factor_ex linalg_lu_factor_ex_out
linalg_lu_factor_out linalg_lu_out linalg_qr linalg_qr_out linalg_slogdet linalg_slogdet_out
linalg_solve_ex linalg_solve_ex_out linalg_svd linalg_svd_out lu_unpack lu_unpack_out max max_out
median median_out min min_out mode mode_out nanmedian nanmedian_out qr qr_out slogdet slogdet_out
sort sort_out svd svd_out topk topk_out triangular_solve triangular_solve_out
"""))

# Plain data classes of modules the deny list names whole (`policy.CAPABILITIES`): the class
# gives a pickle none of its module's capability, so an import of one is as suspicious as any
# name outside weights_only's allowlist, not dangerous; every other name of its module stays
# denied. What each does was read in the installed class by
# tests/test_scan_rt55_pickle_data_types.py, never by running a pickle.
DATA_CLASSES: dict[str, str] = {
    "uuid.UUID": "a UUID value (uuid's program-running helpers are not reached from it): its "
                 "pickle is NEWOBJ and a BUILD whose __setstate__ only sets its int and "
                 "is_safe fields",
    "types.SimpleNamespace": "the C attribute-namespace type (what sys.implementation is): "
                             "calling and BUILDing one only sets attributes",
    "torch._C.Generator": "torch.Generator, a random-number generator: its pickle calls it "
                          "with a device and BUILDs it with a seed, an offset and a state "
                          "tensor its C __setstate__ sets",
    "platform.uname_result": "what platform.uname() returns, a named tuple of five texts: its "
                             "pickle calls it with them (reading its processor field later runs "
                             "the fixed program `uname -p`, none of the pickle's choosing)",
    **{f"os.{kind}": "a C struct sequence of os's results (STDLIB_STRUCT_SEQUENCES): calling it "
                     "only stores the sequence's items" for kind in words(
                         "stat_result statvfs_result terminal_size times_result uname_result")},
}

# The standard library's struct-sequence types (C tuple types, as torch's STRUCT_SEQUENCES) that
# benign saves hold (`time.localtime()`, `os.stat(path)`, `os.uname()`): their pickle calls the
# type with the items and a dict of the extra fields, which it only stores.
STDLIB_STRUCT_SEQUENCES = frozenset(["time.struct_time"] + [f"os.{kind}" for kind in words(
    "stat_result statvfs_result terminal_size times_result uname_result")])

# Callables benign saves call only with literal arguments, with the pattern the call's shown
# arguments (`values.render`: repr of text, digits of a number) must match whole; with anything
# else (an instance, an import, a value made while loading) the call is judged as any call
# outside the allow-list. re._compile is what a compiled pattern pickles itself as
# (`re._pickle`): it compiles its text with its int flags, calling nothing of the pickle's.
_TEXT = r"""b?(?:'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")"""
LITERAL_CALLS: dict[str, str] = {
    "re._compile": rf"\({_TEXT}, \d{{1,10}}\)",
    # random.Random's __reduce__ calls it with nothing; its C-backed state comes by BUILD
    "random.Random": r"\(\)",
    "platform.uname_result": rf"\({_TEXT}(?:, {_TEXT}){{4}}\)",
    # ZoneInfo._unpickle(key, from_cache) reads a time-zone file under the tz path by key (the
    # key is checked against absolute paths and `..`); a plain key only, no dot
    "zoneinfo.ZoneInfo._unpickle": r"\('[\w+/-]{1,64}', [01]\)",
}

# Callables benign saves call (REDUCE): torch's and NumPy's rebuild functions, the plain
# containers their pickles build, the factory of a pickled GradScaler's per-optimizer state,
# and the libraries' own rebuilds above; everything else a pickle calls is dangerous
# (`call_verdict`), whatever its name. Classes rebuilt through copyreg (NEWOBJ, or
# _reconstructor and BUILD) are not calls of the class: they stay as suspicious as the class's
# import.
CALL_ALLOWED = frozenset(words("""
copyreg._reconstructor builtins.object
builtins.set builtins.frozenset builtins.bytearray builtins.bytes builtins.complex builtins.slice
builtins.range builtins.list builtins.dict builtins.tuple builtins.int builtins.float
builtins.str builtins.bool collections.OrderedDict collections.defaultdict collections.deque
collections.Counter _codecs.encode datetime.datetime datetime.date datetime.time
datetime.timedelta datetime.timezone decimal.Decimal fractions.Fraction
numpy.core.multiarray._reconstruct numpy._core.multiarray._reconstruct numpy.dtype
numpy.core.multiarray.scalar numpy._core.multiarray.scalar numpy.ndarray
torch._tensor._rebuild_from_type_v2 torch._utils._rebuild_tensor_v2
torch.jit._pickle.build_intlist torch.jit._pickle.build_doublelist
torch.jit._pickle.build_boollist torch.jit._pickle.build_tensorlist
torch.jit._pickle.build_complexlist torch.jit._pickle.restore_type_tag
torch.amp.grad_scaler._refresh_per_optimizer_state types.SimpleNamespace torch._C.Generator
array.array array._array_reconstructor
""")) | LIBRARY_REBUILDS | STRUCT_SEQUENCES | STDLIB_STRUCT_SEQUENCES


@dataclass(frozen=True)
class CalledArgument:
    """One argument an allowed callable calls while loading, by position and parameter name.

    `method` names what is called on the argument (`data.to(...)`); empty when the argument
    itself is called or constructed. Whatever arrives there is judged as a REDUCE target is."""

    position: int
    name: str
    how: str
    method: str = ""
    # the position of the tuple the argument is called with (`func(*args)`): an allowed
    # callable arriving there is held to its own declarations over those arguments;
    # `UNSEEN`: with values the scan does not keep (an iterable's items)
    args_at: int = -1
    # where the argument is a class its source shows to be a NumPy array subclass (anything
    # else fails the call before it runs), the methods an instance of it has run: judged from
    # that source as the unpickler's own implicit methods are, not as a call of the class
    array_runs: tuple[str, ...] = ()


UNSEEN = -2  # `CalledArgument.args_at` of a callable called with what the scan cannot see


# What each allowed callable does with its arguments, beside the allow-list entries above: the
# argument positions it calls, constructs or calls a method of. A callable that arrives there is
# judged under the same call allow-list as a REDUCE target (`call_allowed`), so an allowed name
# cannot lend its trust to what it is handed. `tests/test_scan_called_arguments.py` reads each
# allowed callable's source and fails on a call of a parameter not declared here. Dunder
# protocols a builtin runs on an instance it is handed (`int(x)` calls `x.__int__`) are not
# declared: an instance in any allowed callable's arguments has them judged from its class's
# source (`WalkState.handled`, `opcodes.HANDED`).
CALLS_ARGUMENTS: dict[str, tuple[CalledArgument, ...]] = {
    "torch._tensor._rebuild_from_type_v2": (CalledArgument(0, "func", "calls", args_at=2),),
    "copyreg._reconstructor": (
        CalledArgument(1, "base", "constructs and initialises (base.__new__, base.__init__)"),),
    "collections.defaultdict": (
        CalledArgument(0, "default_factory", "calls on every missing key after the load"),),
    "torch._utils._rebuild_device_tensor_from_cpu_tensor": (
        CalledArgument(0, "data", "calls a method of", "to"),),
    "torch.nn.parameter.Parameter": (CalledArgument(0, "data", "calls a method of", "detach"),),
    "fractions.Fraction": (
        CalledArgument(0, "numerator", "calls a method of", "as_integer_ratio"),),
    "omegaconf.nodes.EnumNode": (
        CalledArgument(0, "enum_type", "calls a method of", "__members__"),),
    **{f"numpy.{core}.multiarray._reconstruct": (
        CalledArgument(0, "subtype", "makes an instance of and runs a method of",
                       "__array_finalize__", array_runs=("__array_finalize__", "__del__")),)
       for core in ("core", "_core")},
    "array._array_reconstructor": (
        CalledArgument(0, "arraytype", "makes an instance (arraytype.__new__) of", "__new__"),),
    "numpy.ma.core._mareconstruct": (
        CalledArgument(0, "subtype", "makes an instance of (subtype.__new__)", "__new__"),
        CalledArgument(1, "baseclass", "makes an instance of (ndarray.__new__) and runs a "
                       "method of", "__array_finalize__")),
    **{f"numpy.ma{core}.MaskedArray": (CalledArgument(1, "mask", "calls a method of", "any"),)
       for core in ("", ".core")},
    **{f"numpy.random._pickle.__{kind}_ctor": (
        CalledArgument(0, "bit_generator_name", "constructs (when it is a class, through its "
                       "default bit_generator_ctor) or wraps", "capsule"),
        CalledArgument(1, "bit_generator_ctor", "calls")) for kind in ("generator", "randomstate")},
    "numpy.random._pickle.__bit_generator_ctor": (
        CalledArgument(0, "bit_generator", "constructs (when it is a class)"),),
    **{f"numpy.random.bit_generator.__pyx_unpickle_{cls}": (
        CalledArgument(0, "__pyx_type", f"makes an instance ({cls}.__new__) of"),)
       for cls in ("SeedSequence", "SeedlessSeedSequence")},
    **{f"sklearn.{module}.newObj": (
        CalledArgument(0, "obj", "makes an instance (obj.__new__(obj)) of"),)
       for module in ("metrics._dist_metrics", "neighbors._kd_tree", "neighbors._ball_tree")},
}

# Allowed rebuilds that hand their `state` argument to the object they make, as a BUILD does
# (position of the state, and of the class whose own `__setstate__` gets it, or -1): torch's
# `_set_obj_state` sets each name of the state on the object, so a stored `__setstate__` or
# `append` is called by a later BUILD or APPEND as one a BUILD stored would be.
SETS_STATE: dict[str, tuple[int, int]] = {
    "torch._tensor._rebuild_from_type_v2": (3, 1),
    "torch._utils._rebuild_parameter_with_state": (3, -1),
}

# Allowed rebuilds whose result is not an object of their own making: the argument they hand
# back (position, True: `restore_type_tag(value, tag)` returns `value`), or the class at a
# position their result is an instance of (position, False). A later BUILD, APPEND or SETITEMS
# on the result runs that object's or class's methods, judged as they would be on it.
RETURNS: dict[str, tuple[int, bool]] = {
    "torch.jit._pickle.restore_type_tag": (0, True),
    "torch._tensor._rebuild_from_type_v2": (1, False),
    **{f"numpy.{core}.multiarray._reconstruct": (0, False) for core in ("core", "_core")},
    "array._array_reconstructor": (0, False),
}



def _later(position: int, name: str, when: str) -> CalledArgument:
    return CalledArgument(position, name, f"calls later ({when})", args_at=UNSEEN)


_ITERATED = "on each item once iterated"
# Types whose instances hold a callable they were built with and call it later: once iterated
# (what `builtins.list(x)`, `tuple` or `deque` do at load), once their referent is collected
# (a weak reference's callback), or once called or looked up through a class. Their own C
# `__new__` stores the callable, so building one by any path (NEWOBJ runs `cls.__new__(cls,
# *args)`, NEWOBJ_EX with keywords too) is a call of that argument, judged as a REDUCE of it
# is (`call_verdict`); a class whose source derives from one is built by its `__new__`
# (`policy.deferred_calls`). tests/test_scan_rt56_deferred_calls.py builds every public type of
# builtins, itertools, functools, collections and weakref with a recording callable in each
# position and fails on a position that calls it not declared here. Called with items the
# scan does not keep, an allowed callable that calls its own arguments cannot be checked there.
DEFERRED_CALLS: dict[str, tuple[CalledArgument, ...]] = {
    "builtins.map": (_later(0, "func", _ITERATED),),
    "builtins.filter": (_later(0, "function", _ITERATED),),
    "itertools.starmap": (_later(0, "function", _ITERATED),),
    "itertools.filterfalse": (_later(0, "function", _ITERATED),),
    "itertools.dropwhile": (_later(0, "predicate", _ITERATED),),
    "itertools.takewhile": (_later(0, "predicate", _ITERATED),),
    "itertools.accumulate": (_later(1, "func", _ITERATED),),
    "itertools.groupby": (_later(1, "key", _ITERATED),),
    "builtins.property": tuple(_later(i, name, "on attribute access through a class")
                               for i, name in enumerate(("fget", "fset", "fdel"))),
    **{f"builtins.{kind}": (_later(0, "function", "when called"),)
       for kind in ("staticmethod", "classmethod")},
    "_functools._lru_cache_wrapper": (_later(0, "user_function", "when called"),
                                     _later(3, "cache_info_type", "on cache_info()")),
    **{f"_weakref.{kind}": (_later(1, "callback", "once its referent is collected"),)
       for kind in ("ref", "ReferenceType")},
    "weakref.KeyedRef": (_later(1, "callback", "once its referent is collected"),),
    "weakref.finalize": (_later(1, "func", "once its referent is collected"),),
    "functools.partialmethod": (_later(0, "func", "once looked up and called"),),
    "functools._HashedSeq": (_later(1, "hash", "when built"),),
    "weakref.WeakMethod": (_later(1, "callback", "once its method's object is collected"),),
}
