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
}

# Callables benign saves call only with literal arguments, with the pattern the call's shown
# arguments (`values.render`: repr of text, digits of a number) must match whole; with anything
# else (an instance, an import, a value made while loading) the call is judged as any call
# outside the allow-list. re._compile is what a compiled pattern pickles itself as
# (`re._pickle`): it compiles its text with its int flags, calling nothing of the pickle's.
_TEXT = r"""b?(?:'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")"""
LITERAL_CALLS: dict[str, str] = {
    "re._compile": rf"\({_TEXT}, \d{{1,10}}\)",
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
torch.amp.grad_scaler._refresh_per_optimizer_state types.SimpleNamespace
""")) | LIBRARY_REBUILDS | STRUCT_SEQUENCES


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
    # callable arriving there is held to its own declarations over those arguments
    args_at: int = -1


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
                       "__array_finalize__"),) for core in ("core", "_core")},
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
}

