"""Which torch.optim optimizer or LR scheduler saved a state dict, from the names it saved.

A state dict never names its class, but each class saves the settings its constructor took
and state of its own, and some of those names belong to one class only (`dampening`: SGD;
`T_max`: CosineAnnealingLR). The first rule that fits wins, so a name several classes save
(`gamma`, `betas`) comes after the names that single one of them out. Adam and AdamW save the
same names; `decoupled_weight_decay` (saved since torch 2.6) is True for AdamW, and without it
the class is "Adam or AdamW". A state dict that fits no rule gets "". Read from the inspect
contract's records (dotted keys); no torch.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from inspector.checkpoint.tensor_stats import ObjectLeaf, TensorStats

_OPTIMIZERS = (("Adafactor", "beta2_decay"), ("Muon", "ns_steps"), ("LBFGS", "history_size"),
               ("ASGD", "t0"), ("Rprop", "etas"), ("Adagrad", "lr_decay"), ("Adadelta", "rho"),
               ("NAdam", "momentum_decay"), ("RMSprop", "centered"), ("Adamax", "exp_inf"),
               ("SGD", "dampening"))
_SCHEDULERS = (("CosineAnnealingWarmRestarts", "T_mult"), ("CosineAnnealingLR", "T_max"),
               ("OneCycleLR", "_schedule_phases"), ("CyclicLR", "max_lrs"),
               ("ReduceLROnPlateau", "patience"), ("SequentialLR", "_milestones"),
               ("ChainedScheduler", "_schedulers"), ("MultiStepLR", "milestones"),
               ("StepLR", "step_size"), ("LinearLR", "start_factor"), ("PolynomialLR", "power"),
               ("ConstantLR", "factor"), ("LambdaLR or MultiplicativeLR", "lr_lambdas"),
               ("ExponentialLR", "gamma"))
# A setting's first name segment: `betas` is saved as `betas.0` and `betas.1`.
_GROUP_SETTING = re.compile(r"^(.*?)param_groups\.0\.(\w+)")
_STATE_NAME = re.compile(r"^(.*?)state\.\d+\.(\w+)")
_SCHEDULER_EPOCH = re.compile(r"^(.*sched[^.]*(?:\.\d+)?\.)last_epoch$")


def optimizer_type(settings: dict[str, str], state_names: Iterable[str]) -> str:
    """The optimizer class from its first group's settings (name -> repr) and its state names."""
    names = set(settings) | set(state_names)
    found = next((cls for cls, name in _OPTIMIZERS if name in names), "")
    if found or "betas" not in names:
        return found
    if "amsgrad" in names:
        return {"True": "AdamW", "False": "Adam"}.get(settings.get("decoupled_weight_decay", ""),
                                                      "Adam or AdamW")
    return "RAdam" if "decoupled_weight_decay" in names else (
        "" if "weight_decay" in names else "SparseAdam")


def scheduler_type(names: Iterable[str]) -> str:
    """The LR scheduler class from the names its state dict holds at the top."""
    names = set(names)
    return next((cls for cls, name in _SCHEDULERS if name in names), "")


def optimizer_types(tensors: Iterable[TensorStats], objects: Iterable[ObjectLeaf]
                    ) -> dict[str, str]:
    """{dotted key of each optimizer state dict ('optimizer_states.0.'): its class or ''}."""
    settings: dict[str, dict[str, str]] = {}
    for o in objects:
        match = _GROUP_SETTING.match(o.key)
        if match:
            settings.setdefault(match.group(1), {}).setdefault(match.group(2), str(o.repr))
    state: dict[str, set[str]] = {}
    for t in tensors:
        key = t.key
        # A substring test first: a regex match costs microseconds a key, on 16,000 keys.
        match = _STATE_NAME.match(key) if "state." in key else None
        if match and match.group(1) in settings:
            state.setdefault(match.group(1), set()).add(match.group(2))
    return {prefix: optimizer_type(found, state.get(prefix, ()))
            for prefix, found in settings.items()}


def scheduler_types(tensors: Iterable[TensorStats], objects: Iterable[ObjectLeaf]
                    ) -> dict[str, str]:
    """{dotted key of each LR scheduler state dict ('lr_schedulers.0.'): its class or ''}."""
    keys = [r.key for r in [*tensors, *objects]]
    epochs = (_SCHEDULER_EPOCH.match(k) for k in keys if k.endswith("last_epoch"))
    found = [m.group(1) for m in epochs if m]
    # SequentialLR keeps its schedulers' state dicts inside its own: only the outer one counts
    prefixes = [p for p in found if not any(p != q and p.startswith(q) for q in found)]
    return {p: scheduler_type(k[len(p):].split(".", 1)[0] for k in keys if k.startswith(p))
            for p in prefixes}
