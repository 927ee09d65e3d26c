"""Whether an Adam-family optimizer's moments are ones its own update could have written.

Adam, AdamW, NAdam, RAdam and SparseAdam keep, per element and from zero,

    m_t = b1 * m_(t-1) + (1 - b1) * g_t        v_t = b2 * v_(t-1) + (1 - b2) * g_t^2

so, by Cauchy-Schwarz over the gradient history and whatever the gradients were,
|m_t| <= C * sqrt(v_t) with C = (1 - b1) / sqrt((1 - b2) * (1 - b1^2 / b2)) whenever
b1^2 < b2 (7.27 for the default betas; a gradient growing by b2/b1 a step reaches it), and
amsgrad's `max_exp_avg_sq` is never below `exp_avg_sq`. A state outside these was changed
outside the optimizer step: an exponent flip that enlarges `exp_avg`, or shrinks, negates or
overflows `exp_avg_sq`. The guard sees such a flip only at the next step, through the weight it
moves, after the save was sealed; this check reads the state being saved and needs no history.

The bound checked is 2C against sqrt(v + the dtype's smallest normal): rounding takes bfloat16
states to 1.004 C and float16 subnormals to 1.7 C. Not caught: a flip that enlarges `exp_avg_sq`
(it freezes its element) or shrinks `exp_avg`, and other optimizers' state (SGD's momentum has no
such bound); a parameter's state holding keys beyond Adam's is left alone, its rule unknown.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import torch

from inspector.core.termtext import counted

ADAM_KEYS = frozenset({"step", "exp_avg", "exp_avg_sq", "max_exp_avg_sq", "mu_product"})
MARGIN = 2.0
FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
"""The floating-point dtypes the state's checks reduce (`_foreach_norm`'s, and torch.finfo's)."""
_CHUNK = 1 << 22  # elements per pass: bounds the temporaries of a large tensor
_DEPTH = 4


def adam_problems(obj: Any) -> list[str]:
    """Every Adam-family moment in `obj`'s optimizer state dicts its update could not have
    written, one line per parameter (empty when all hold)."""
    found: list[str] = []
    for where, state in _state_dicts(obj, "", 0):
        for pid, (b1, b2), moments in _adam_params(state):
            found += _param_problems(f"{where}parameter {pid}", _bound(b1, b2), moments)
    return found


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


def _state_dicts(obj: Any, where: str, depth: int) -> Iterator[tuple[str, dict]]:
    """Every optimizer state dict in `obj` (dicts, lists and tuples, a few levels deep), with
    where it is (`optimizer_states.0.`)."""
    if isinstance(obj, dict):
        if isinstance(obj.get("state"), dict) and isinstance(obj.get("param_groups"), list):
            yield where, obj
            return
        items = obj.items()
    elif isinstance(obj, (list, tuple)):
        items = enumerate(obj)
    else:
        return
    if depth < _DEPTH:
        for key, value in items:
            yield from _state_dicts(value, f"{where}{key}.", depth + 1)


def _adam_params(state: dict) -> Iterator[tuple[Any, tuple[float, float], dict]]:
    """(parameter id, betas, its moments) for each parameter whose state is Adam's."""
    for group in state["param_groups"]:
        betas = _betas(group.get("betas")) if isinstance(group, dict) else None
        if betas is None:
            continue
        for pid in group.get("params", ()):
            moments = state["state"].get(pid)
            if (isinstance(moments, dict) and "exp_avg" in moments and "exp_avg_sq" in moments
                    and ADAM_KEYS.issuperset(moments) and _same_kind(moments)):
                yield pid, betas, moments


def _betas(betas: Any) -> tuple[float, float] | None:
    """Two betas the bound holds for (b1 in [0, 1), b2 in (0, 1), b1^2 < b2), else None."""
    if not isinstance(betas, (tuple, list)) or len(betas) != 2:
        return None
    try:
        b1, b2 = (float(b) for b in betas)
    except (TypeError, ValueError, RuntimeError):
        return None
    return (b1, b2) if 0 <= b1 < 1 and 0 < b2 < 1 and b1 * b1 < b2 else None


def _same_kind(moments: dict) -> bool:
    """Whether the moments are plain dense floating-point tensors of one shape and device."""
    tensors = [moments[k] for k in ("exp_avg", "exp_avg_sq", "max_exp_avg_sq") if k in moments]
    first = tensors[0]
    return all(type(t) in (torch.Tensor, torch.nn.Parameter) and t.dtype in FLOATS
               and t.layout == torch.strided and t.device.type != "meta"
               and t.shape == first.shape and t.device == first.device for t in tensors)


def _bound(b1: float, b2: float) -> float:
    """MARGIN x C, the largest |m| / sqrt(v) checked."""
    return MARGIN * (1 - b1) / math.sqrt((1 - b2) * (1 - b1 * b1 / b2))


def _param_problems(name: str, k: float, moments: dict) -> list[str]:
    """One parameter's broken moments: a fast float32 pass, then exact counts where it failed."""
    m, v = (moments[key].detach().reshape(-1) for key in ("exp_avg", "exp_avg_sq"))
    top = moments.get("max_exp_avg_sq")
    top = top.detach().reshape(-1) if top is not None else None
    tiny = torch.finfo(v.dtype).tiny
    if not _suspect(m, v, top, k, tiny):
        return []
    counts = _count(m, v, top, k, tiny)
    said = [f"{what} in {counted(n, 'value')}" for what, n in counts if n]
    if not said:
        return []
    return [f"Adam state of {name} ({_shape(moments['exp_avg'])}) not written by its update: "
            + ", ".join(said)]


def _suspect(m: torch.Tensor, v: torch.Tensor, top: torch.Tensor | None, k: float,
             tiny: float) -> bool:
    """Whether any element may break the bound: m^2 - k^2 v above k^2 tiny, NaN, or -Inf (an
    infinite v), in float32, or a `max_exp_avg_sq` below `exp_avg_sq`."""
    buf = torch.empty(min(m.numel(), _CHUNK), dtype=torch.float32, device=m.device)
    for start in range(0, m.numel(), _CHUNK):
        mc, vc = m[start:start + _CHUNK], v[start:start + _CHUNK]
        room = torch.mul(vc, -k * k, out=buf[:vc.numel()]).addcmul_(mc, mc)
        low, high = torch.aminmax(room)
        if not (float(high) <= k * k * tiny and float(low) > -math.inf):
            return True
        if top is not None and bool(torch.lt(top[start:start + _CHUNK], vc).any()):
            return True
    return False


def _count(m: torch.Tensor, v: torch.Tensor, top: torch.Tensor | None, k: float,
           tiny: float) -> list[tuple[str, int]]:
    """How many elements break each rule, in float64 (no square overflows there)."""
    tally = {"exp_avg_sq negative": 0, "exp_avg_sq infinite": 0, "exp_avg infinite": 0,
             f"|exp_avg| above {k:.3g} x sqrt(exp_avg_sq)": 0,
             "max_exp_avg_sq below exp_avg_sq": 0}
    rules = list(tally)
    for start in range(0, m.numel(), _CHUNK):
        mc = m[start:start + _CHUNK].double()
        vc = v[start:start + _CHUNK].double()
        finite = torch.isfinite(mc) & torch.isfinite(vc) & (vc >= 0)
        tally[rules[0]] += int((vc < 0).sum())
        tally[rules[1]] += int(torch.isinf(vc).sum())
        tally[rules[2]] += int(torch.isinf(mc).sum())
        tally[rules[3]] += int((finite & (mc * mc > k * k * (vc + tiny))).sum())
        if top is not None:
            tally[rules[4]] += int(torch.lt(top[start:start + _CHUNK].double(), vc).sum())
    return list(tally.items())


def _shape(t: torch.Tensor) -> str:
    return "x".join(str(n) for n in t.shape) or "scalar"
