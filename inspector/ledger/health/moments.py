"""Whether an optimizer's per-parameter state is one its own update could have written.

Each optimizer family below keeps, per element and from zero (Adagrad from its initial value),
running moments whose relations hold whatever the gradients were, so a state outside them was
changed outside the optimizer step. No history is needed: the check reads the state being saved.
The guard sees such a flip only at the next step, through the weight it moves, after the save
was sealed.

- **Adam** (Adam, AdamW, NAdam, RAdam, SparseAdam): `m = b1 m + (1 - b1) g`, `v = b2 v +
  (1 - b2) g^2`. By Cauchy-Schwarz over the gradient history, |m| <= C sqrt(v) with
  C = (1 - b1) / sqrt((1 - b2) (1 - b1^2 / b2)) whenever b1^2 < b2 (7.27 for the default betas;
  a gradient growing by b2/b1 a step reaches it), and amsgrad's `max_exp_avg_sq` is never below
  `exp_avg_sq`.
- **Adamax**: `m` as Adam's, `u = max(b2 u, |g| + eps)`, so |g| a step back k is at most
  u / b2^k and |m| <= (1 - b1) / (1 - b1 / b2) u whenever b1 < b2 (1.01 for the defaults).
  Betas outside those ranges (a flipped beta2 torch admits: 0.999 -> 0.24975) leave |m|
  unbounded; every other check below still holds and runs (the guard names beta2's change).
- **RMSprop**: `square_avg` a running mean of g^2 with weights summing to at most one, and a
  centred one's `grad_avg` the mean of g with the same weights, so grad_avg^2 <= square_avg
  (C = 1; also for a TF-style square_avg that starts at one).
- **Adadelta** (`square_avg`, `acc_delta`) and **Adagrad** (`sum`, from the group's
  `initial_accumulator_value`, to which only squares are added): never negative, never below
  their start.

Every moment of these is finite, and a `step` count is a whole number from zero (a flipped sign
or mantissa makes the bias corrections negative or odd). Every parameter group's
hyper-parameters (of any optimizer) must lie where torch's constructors admit them, and be
finite (`group_problems`, by `run.optimizer_settings`, which the guard also checks after each
step). The bound checked is 2C against sqrt(v + the dtype's smallest normal): rounding takes
bfloat16 states to 1.004 C and float16 subnormals to 1.7 C. Not caught: a flip that enlarges a
second moment (it freezes its element) or shrinks a first one, or that enlarges a step count by
a power of two, a finite flip in SGD's momentum (no such bound) or RMSprop's; a state holding
keys beyond its family's, or a group without its family's hyper-parameters, is left alone, its
rule unknown (an Inf in any optimizer's state is named by `ledger.health`, whatever its
family).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch

from inspector.core.flatten import dicts_in, is_optimizer_state
from inspector.core.termtext import counted
from inspector.run.optimizer_settings import refused, saved_problems

MARGIN = 2.0
FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
"""The floating-point dtypes the state's checks reduce (`_foreach_norm`'s, and torch.finfo's)."""
_CHUNK = 1 << 22  # elements per pass: bounds the temporaries of a large tensor


@dataclass(frozen=True)
class Family:
    """What one optimizer family's update lets a parameter's state hold."""

    name: str
    keys: frozenset[str]
    """Every key its state may hold: a state with another key is some other optimizer's."""
    scales: tuple[str, ...]
    """Moments that are never negative nor below the group's `floor`; the first is the scale
    of `moment`'s bound."""
    limit: Callable[[dict], float | None]
    """The bound's factor K from the parameter group (0: no bound on `moment`, which is then
    checked for finiteness only, as every scale for its range), or None when the group's
    hyper-parameters are not this family's."""
    moment: str | None = None
    """The moment bounded by |moment| <= K sqrt(scale) (K scale for a running maximum)."""
    needs_moment: bool = False
    squared: bool = True
    """Whether the first scale is a mean of squares (else a running maximum of |g|)."""
    ceiling: str | None = None
    """A running maximum of the first scale, so never below it (amsgrad)."""
    floor: Callable[[dict], float] = lambda group: 0.0

    def matches(self, state: dict) -> bool:
        """Whether a parameter's state is this family's, in plain dense float tensors."""
        needed = {*self.scales, *((self.moment,) if self.needs_moment else ())}
        if not (needed <= state.keys() and self.keys.issuperset(state)):
            return False
        checked = [state[k] for k in (*self.scales, self.moment, self.ceiling) if k in state]
        first = checked[0]
        return all(type(t) in (torch.Tensor, torch.nn.Parameter) and t.dtype in FLOATS
                   and t.layout == torch.strided and t.device.type != "meta"
                   and t.shape == first.shape and t.device == first.device for t in checked)


def _betas(group: dict) -> tuple[float, float] | None:
    """The group's two betas, each in [0, 1) (b2 above 0), else None."""
    betas = group.get("betas")
    if not isinstance(betas, (tuple, list)) or len(betas) != 2:
        return None
    try:
        b1, b2 = (float(b) for b in betas)
    except (TypeError, ValueError, RuntimeError):
        return None
    return (b1, b2) if 0 <= b1 < 1 and 0 < b2 < 1 else None


def _adam_limit(group: dict) -> float | None:
    betas = _betas(group)
    if betas is None:
        return None
    b1, b2 = betas
    if b1 * b1 >= b2:  # no bound (a flipped beta2 torch admits); the rest is still checked
        return 0.0
    return MARGIN * (1 - b1) / math.sqrt((1 - b2) * (1 - b1 * b1 / b2))


def _adamax_limit(group: dict) -> float | None:
    betas = _betas(group)
    if betas is None:
        return None
    b1, b2 = betas
    if b1 >= b2:
        return 0.0
    return MARGIN * (1 - b1) / (1 - b1 / b2)


def _named(*names: str, factor: float = 0.0) -> Callable[[dict], float | None]:
    """A family known by its group's hyper-parameter `names`, with `factor` as K."""
    return lambda group: factor if all(n in group for n in names) else None


def _initial(group: dict) -> float:
    value = group.get("initial_accumulator_value", 0.0)
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else 0.0


FAMILIES: tuple[Family, ...] = (
    Family("Adam", frozenset({"step", "exp_avg", "exp_avg_sq", "max_exp_avg_sq", "mu_product"}),
           ("exp_avg_sq",), _adam_limit, "exp_avg", needs_moment=True,
           ceiling="max_exp_avg_sq"),
    Family("Adamax", frozenset({"step", "exp_avg", "exp_inf"}), ("exp_inf",), _adamax_limit,
           "exp_avg", needs_moment=True, squared=False),
    Family("RMSprop", frozenset({"step", "square_avg", "momentum_buffer", "grad_avg"}),
           ("square_avg",), _named("alpha", factor=MARGIN), "grad_avg"),
    Family("Adadelta", frozenset({"step", "square_avg", "acc_delta"}),
           ("square_avg", "acc_delta"), _named("rho")),
    Family("Adagrad", frozenset({"step", "sum"}), ("sum",), _named("lr_decay"),
           floor=_initial),
)
"""The optimizer families whose state is checked (docstring above), in the order tried."""


def moment_problems(obj: Any) -> list[str]:
    """Every optimizer state in `obj`'s optimizer state dicts that its update could not have
    written, one line per parameter (empty when all hold)."""
    found: list[str] = []
    for where, state in _state_dicts(obj, "", 0):
        for pid, family, limit, floor, moments in _checked_params(state):
            found += _param_problems(f"{where}parameter {pid}", family, limit, floor, moments)
    return found


def group_problems(obj: Any) -> list[str]:
    """Every parameter group in `obj`'s optimizer state dicts holding a hyper-parameter out of
    its bounds (`run.optimizer_settings.BOUNDS`), one line per group."""
    found = []
    for where, state in _state_dicts(obj, "", 0):
        for i, group in enumerate(state["param_groups"]):
            bad = refused(group)
            if bad:
                said = ", ".join(f"{key} {value:g}" for key, value in bad)
                found.append(f"{where}param group {i}: {said}, out of the bounds its "
                             "optimizer admits")
    return found


def journaled_problems(obj: Any, run_dir: Any) -> list[str]:
    """Every optimizer state dict in `obj` whose settings no schedule writes differ from the
    run's journaled first values (`run.optimizer_settings.saved_problems`): a value flipped in
    the state being saved is never sealed, nor learned as the baseline by a resumed run."""
    return [f"{where}{line}" for where, state in _state_dicts(obj, "", 0)
            for line in saved_problems(state["param_groups"], run_dir, where)]


def local_state(optimizer: Any) -> dict | None:
    """`optimizer`'s state as its state dict lays it out, read from this process's own copy (no
    collective call, as a sharded optimizer's `state_dict` may make); None when it is not a
    torch optimizer, itself or wrapped (`.optimizer`, as accelerate and Lightning wrap)."""
    for _ in range(3):
        if isinstance(optimizer, torch.optim.Optimizer):
            break
        optimizer = getattr(optimizer, "optimizer", None)
    else:
        return None
    index: dict[int, int] = {}
    groups = []
    for group in optimizer.param_groups:
        ids = [index.setdefault(id(p), len(index)) for p in group["params"]]
        groups.append({**{k: v for k, v in group.items() if k != "params"}, "params": ids})
    by_id = {id(p): s for p, s in optimizer.state.items()}
    return {"state": {i: by_id[pid] for pid, i in index.items() if pid in by_id},
            "param_groups": groups}


def optimizer_prefixes(obj: Any) -> tuple[str, ...]:
    """Where the per-parameter state of each optimizer state dict in `obj` lies, as the
    prefix of its tensors' dotted keys (`optimizer.state.`)."""
    return tuple(f"{where}state." for where, _ in _state_dicts(obj, "", 0))


def _state_dicts(obj: Any, where: str, depth: int) -> Iterator[tuple[str, dict]]:
    """Every optimizer state dict in `obj`, with where it is (`optimizer_states.0.`)."""
    return dicts_in(obj, is_optimizer_state, where, depth)


def _checked_params(state: dict) -> Iterator[tuple[Any, Family, float, float, dict]]:
    """(parameter id, family, K, floor, its state) for each parameter of a known family."""
    for group in state["param_groups"]:
        if not isinstance(group, dict):
            continue
        for pid in group.get("params", ()):
            moments = state["state"].get(pid)
            if not isinstance(moments, dict):
                continue
            family = next((f for f in FAMILIES if f.matches(moments)), None)
            limit = family.limit(group) if family is not None else None
            if limit is not None:
                yield pid, family, limit, family.floor(group), moments


def _param_problems(name: str, family: Family, k: float, floor: float,
                    moments: dict) -> list[str]:
    """One parameter's broken state: a fast float32 pass, then exact counts where it failed."""
    flat = {key: moments[key].detach().reshape(-1)
            for key in (*family.scales, family.moment, family.ceiling) if key in moments}
    # a start the state was filled with in its own dtype (float16 holds 0.1 as 0.09998)
    floor = float(torch.tensor(floor, dtype=flat[family.scales[0]].dtype))
    said = _bad_step(moments.get("step"))
    if _suspect(family, flat, k, floor):
        said += [f"{what} in {counted(n, 'value')}"
                 for what, n in _count(family, flat, k, floor) if n]
    if not said:
        return []
    first = moments[family.scales[0]]
    return [f"{family.name} state of {name} ({_shape(first)}) not written by its update: "
            + ", ".join(said)]


def _bad_step(step: Any) -> list[str]:
    """The state's step count, when `step += 1` from zero cannot have written it: negative,
    fractional or not finite (a flipped sign or mantissa; the bias corrections divide by it)."""
    one = isinstance(step, torch.Tensor) and step.numel() == 1
    if not (one or (isinstance(step, (int, float)) and not isinstance(step, bool))):
        return []
    value = float(step)
    if math.isfinite(value) and value >= 0 and value == math.floor(value):
        return []
    return [f"step {value:g}, not a count"]


def _room(family: Family, m: torch.Tensor, v: torch.Tensor, k: float,
          out: torch.Tensor) -> torch.Tensor:
    """m^2 - k^2 v (k^2 v^2 for a running maximum), into `out`."""
    if family.squared:
        return torch.mul(v, -k * k, out=out).addcmul_(m, m)
    return torch.mul(v, v, out=out).mul_(-k * k).addcmul_(m, m)


def _suspect(family: Family, flat: dict[str, torch.Tensor], k: float, floor: float) -> bool:
    """Whether any element may break a rule, in float32: a scale below its floor, infinite or
    NaN, m^2 - k^2 v above k^2 tiny (or -Inf: an infinite v), or the ceiling below its scale."""
    scale = flat[family.scales[0]]
    m, top = flat.get(family.moment), flat.get(family.ceiling)
    tiny = torch.finfo(scale.dtype).tiny
    buf = torch.empty(min(scale.numel(), _CHUNK), dtype=torch.float32, device=scale.device)
    # m^2 - k^2 v already exceeds its bound where a mean of squares is negative, and is -Inf
    # or NaN where it is infinite or NaN: a second pass over it would only double the cost
    ranged = family.scales[1:] if m is not None and family.squared and k else family.scales
    for start in range(0, scale.numel(), _CHUNK):
        part = slice(start, start + _CHUNK)
        for key in ranged:
            low, high = torch.aminmax(flat[key][part])
            if not (float(low) >= floor and float(high) < math.inf):
                return True
        vc = scale[part]
        if m is not None and k:
            low, high = torch.aminmax(_room(family, m[part], vc, k, buf[:vc.numel()]))
            if not (float(high) <= k * k * tiny and float(low) > -math.inf):
                return True
        elif m is not None:  # no bound: the moment finite (NaN fails both comparisons)
            low, high = torch.aminmax(m[part])
            if not (float(low) > -math.inf and float(high) < math.inf):
                return True
        if top is not None and bool(torch.lt(top[part], vc).any()):
            return True
    return False


def _count(family: Family, flat: dict[str, torch.Tensor], k: float,
           floor: float) -> list[tuple[str, int]]:
    """How many elements break each rule, in float64 (no square overflows there)."""
    scale_key, moment = family.scales[0], family.moment
    tiny = torch.finfo(flat[scale_key].dtype).tiny
    below = "negative" if floor == 0 else f"below its start {floor:.3g}"
    tally = {}
    for key in family.scales:
        tally[(key, "low")] = (f"{key} {below}", 0)
        tally[(key, "inf")] = (f"{key} infinite", 0)
    if moment in flat:
        size = f"sqrt({scale_key})" if family.squared else scale_key
        tally[(moment, "inf")] = (f"{moment} infinite", 0)
        if k:
            tally[(moment, "bound")] = (f"|{moment}| above {k:.3g} x {size}", 0)
    if family.ceiling in flat:
        tally[(family.ceiling, "low")] = (f"{family.ceiling} below {scale_key}", 0)

    def add(rule: tuple[str, str], n: torch.Tensor) -> None:
        what, total = tally[rule]
        tally[rule] = (what, total + int(n))

    for start in range(0, flat[scale_key].numel(), _CHUNK):
        part = {key: t[start:start + _CHUNK].double() for key, t in flat.items()}
        for key in family.scales:
            add((key, "low"), (part[key] < floor).sum())
            add((key, "inf"), torch.isinf(part[key]).sum())
        vc = part[scale_key]
        if moment in part:
            mc = part[moment]
            add((moment, "inf"), torch.isinf(mc).sum())
            if k:
                finite = torch.isfinite(mc) & torch.isfinite(vc) & (vc >= 0)
                size = (vc + tiny) if family.squared else (vc + tiny) ** 2
                add((moment, "bound"), (finite & (mc * mc > k * k * size)).sum())
        if family.ceiling in part:
            add((family.ceiling, "low"), torch.lt(part[family.ceiling], vc).sum())
    return list(tally.values())


def _shape(t: torch.Tensor) -> str:
    return "x".join(str(n) for n in t.shape) or "scalar"
