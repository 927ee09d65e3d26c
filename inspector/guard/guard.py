"""The training guard: after backward and before the optimizer step, check the step's numbers,
name what went wrong, re-run the step to tell the data from the device, and act.

    guard = Guard(RUN_DIR)               # one per process (rank)
    verdict = guard.step(loss, model)    # after loss.backward(), before optimizer.step()
    if verdict.take_step: optimizer.step()

or, with the step as a closure (which makes re-run attribution possible):

    guard.run_step(closure, model, optimizer)   # closure: zero_grad, forward, backward, loss

Cost when nothing fires: one fused norm over the gradients, the weights' reading (`weights`:
an exact fingerprint after each optimizer step and before the next check, a fused norm, the
largest |w|) and one device sync for all of it (`numerics`); with a spare CPU core most of the
weights' reading runs on a background thread (`weights.fingerprint`). An optimizer step retakes
the fingerprints of the watched tensors it holds, only those (a global `torch.optim` post-hook;
a pre-hook waits for the background reads first), so weights that change between two steps, or
two optimizers' steps, are named with their tensor, once; code that edits weights on purpose
calls `accept_weights`.

An alarm writes one `guard.alarm` record to the run journal, prints one rate-limited line on
stderr (`console`), and then takes the action: `warn` goes on, `skip` drops the step's
gradients (so `optimizer.step()` changes nothing), `halt` writes a scene (`scene`) and raises
`GuardHalt`, a `SystemExit` with `EXIT_HALTED`. A non-finite loss or gradient is skipped even
under `warn` (`skip_nonfinite`, as GradScaler does), so NaN never reaches the weights unsaid.
The guard registers its health check with `run.health_gate`, so the ledger asks it before
sealing a checkpoint of its run folder (or a folder inside it) or of a model it watches.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import torch
from torch import nn
from torch.optim.optimizer import (
    register_optimizer_step_post_hook,
    register_optimizer_step_pre_hook,
)

from inspector.core import strict_json
from inspector.core.errors import CodedError
from inspector.gpu.device_state import XidWatch, device_state
from inspector.guard import baseline, inject
from inspector.guard.alarm_record import AlarmConsole, append_alarm
from inspector.guard.inject import BitFlip
from inspector.guard.numerics import StepNumbers, bad_samples, step_numbers
from inspector.guard.optimizer_steps import OptimizerSteps, weak_hook
from inspector.guard.rules import Breach, RuleSet
from inspector.guard.scene import (
    Scene,
    batch_hash,
    load_scene,
    model_fingerprint,
    read_scene,
    restore_rng,
    rng_states,
    write_scene,
)
from inspector.guard.settings import NORM_RULE, SETTING_RULE, SettingsWatch, said
from inspector.guard.weights.members import ORPHAN_RULE, REPLACED_RULE, STOPPED_RULE
from inspector.guard.weights.models import Models
from inspector.guard.weights.replicas import RULE as REPLICA_RULE
from inspector.guard.weights.rules import HELD_RULES, WINDOWED_RULES
from inspector.run import health_gate, journal
from inspector.run.blocklog import BlockWriter
from inspector.run.metrics import METRICS_KIND, metrics_path

# Megatron-LM exits 17 when a validation failure ends the job; a halted guard means the same.
EXIT_HALTED = 17

Action = Literal["warn", "skip", "halt"]
NONFINITE_RULES = frozenset({"loss-nonfinite", "grad_norm-nonfinite"})
Attribution = Literal["reproducible", "transient", "device"]
DEVICE_RULES = frozenset({"weights-changed", "replica-differs"})
"""Rules that fire only when bytes changed where no computation of the step wrote them."""
RECENT_ALARMS = 10
"""How many steps back a loss or gradient alarm (whose step was taken) or a statistical weight
alarm (`WINDOWED_RULES`, skipped or not) fails the guard's health check: a save then holds
weights the guard named; `run latest` takes the one before."""
NONFINITE_STREAK = 3
"""How many `guard.step`s in a row skipped for a non-finite loss or gradient fail the health
check while the streak lasts: one NaN batch is routine (skipped, as GradScaler skips), but a
state that computes no finite loss step after step (an Inf in a frozen teacher, a NaN in a
tensor no rule reads) is not one to resume from."""
HELD_SHOWN = 3
"""How many held corruption alarms the health check names one by one (the rest counted)."""
NOT_RESUMED = HELD_RULES | WINDOWED_RULES | {SETTING_RULE}
"""Rules whose scene holds weights or an optimizer not to be resumed from."""


class GuardHalt(SystemExit):
    """The guard stopped the run at an alarm; `scene` is the folder it wrote."""

    def __init__(self, scene: Path, message: str) -> None:
        super().__init__(EXIT_HALTED)
        self.scene = scene
        self.message = message

    def __str__(self) -> str:
        return self.message


@dataclass
class GuardConfig:
    """What the guard checks and does; every field has the issue's default."""

    action: Action = "warn"
    k_max: float = 10.0
    k_ema: float = 10.0
    warmup: int = 100
    rerun: bool = True
    rerun_rtol: float = 0.0
    report_params: int = 8
    faults: Sequence[BitFlip] = ()
    k_median: float = 30.0
    fingerprint_every: int = 1
    """Take the weights' fingerprint after every N-th optimizer step (0: never)."""
    largest_every: int = 8
    """Read each tensor's largest |w| at every N-th check (always before a ledger save)."""
    replica_every: int = 100
    """Under data parallelism (a process group of 2+ ranks), compare every tensor's
    fingerprint across the ranks every N steps (0: never)."""
    k_largest: float = 8.0
    k_update: float = 50.0
    skip_nonfinite: bool = True
    """Skip the optimizer step on a non-finite loss or gradient even when `action` is warn."""
    console: bool = True
    """Print one rate-limited line per alarm kind on stderr."""
    overlap: bool | None = None
    """Read the weights' norms and the check's fingerprint on a background thread (None: when
    the weights are on the CPU and a core is spare; see `weights.fingerprint`)."""
    resume_baseline: bool = True
    """Start from the rules' numbers an earlier session journaled in the run folder
    (`baseline`); False starts them afresh (a new task trained in the same folder)."""


@dataclass
class Alarm:
    """One alarmed step: the rules it broke, who to blame, what the re-run said, what was done."""

    step: int
    breaches: list[Breach]
    action: Action
    params: list[str]
    worst: list[tuple[str, float]]
    attribution: Attribution | None = None
    samples: list = field(default_factory=list)
    """On a non-finite loss or gradient: the batch's samples to blame (`numerics.bad_samples`)."""
    rerun: dict | None = None
    device: dict | None = None
    scene: Path | None = None


@dataclass
class StepVerdict:
    """The outcome of one guarded step."""

    step: int
    loss: float
    grad_norm: float
    alarm: Alarm | None = None
    take_step: bool = True


@dataclass
class _Pending:
    """What `begin` captured for the step about to run."""

    rng: dict[str, Any]
    batch: Any = None
    sample_ids: Sequence | None = None


@dataclass
class Guard:
    """Checks every step of one process's training; see the module docstring."""

    run_dir: Path
    config: GuardConfig = field(default_factory=GuardConfig)
    rank: int = field(default_factory=lambda: int(os.environ.get("RANK", "0")))
    step_index: int = 0
    ledger: Any = None  # an order.OrderLedger: the scene's default sample ids and loader state

    def __post_init__(self) -> None:
        if self.config.action not in ("warn", "skip", "halt"):
            raise CodedError("bad-action", f"guard action {self.config.action!r} is not one of "
                             "warn, skip, halt")
        self.run_dir = Path(self.run_dir)
        self.journal = journal.journal_path(self.run_dir)
        read = baseline.read_journal(self.journal)  # refuses a damaged one
        self._fresh_rules()
        self._baseline_step: int | None = None  # the step this session last journaled them at
        if self.config.resume_baseline and (seed := baseline.latest(read, self.rank)):
            try:  # an earlier session's numbers, the rules afresh where they do not fit
                self._load_rules(seed.rules)
                self.rules.new_session()
            except (TypeError, ValueError, KeyError, AttributeError):
                self._fresh_rules()
        self._held: dict[tuple[str, str, str | None], str] = {}
        """Each definitive weight alarm (`HELD_RULES`) by model, rule and tensor, in words: the
        weights still hold what it named, whatever the rules learned since, so the health
        check names it until `accept_weights` (or `resume`) says the weights are intended."""
        self.console = AlarmConsole(self.rank) if self.config.console else None
        self._steps = OptimizerSteps(self.models)  # `total`: `Owners.judge` waits for one
        self.settings = SettingsWatch(self.run_dir)
        """Every optimizer that stepped since this guard began: its settings are checked."""
        self._post_hook = register_optimizer_step_post_hook(
            weak_hook(self, "_after_optimizer_step"))
        self._pre_hook = register_optimizer_step_pre_hook(
            weak_hook(self, "_before_optimizer_step"))
        health_gate.register(self.run_dir, self.health, self.models.holds, self._steps.saved)
        self.alarms: list[Alarm] = []
        self._nonfinite_skips = 0  # how many `guard.step`s in a row, to the last, skipped one
        self._pending: _Pending | None = None
        self._xids: XidWatch | None = XidWatch() if torch.cuda.is_available() else None
        self._metrics: BlockWriter | None = None

    def _fresh_rules(self) -> None:  # the rules with nothing learned
        self.rules = RuleSet.default(self.config.k_max, self.config.k_ema, self.config.warmup,
                                     self.config.k_median)
        self.models = Models(self.config.fingerprint_every, self.config.largest_every,
                             self.config.overlap, self.config.k_largest, self.config.k_update)
        """Each guarded model's watch and learned numbers (`weights.models`)."""

    def _journal_baseline(self) -> None:
        """Journal the rules' learned numbers once per step, after this session judged one."""
        if self._metrics is not None and self.step_index != self._baseline_step:
            baseline.record(self.run_dir, self.rank, self.step_index, self._rules_state())
            self._baseline_step = self.step_index

    def begin(self, model: nn.Module | None = None, batch: Any = None,
              sample_ids: Sequence | None = None) -> None:
        """Mark the start of a step: keep the RNG state (for a re-run) and the batch."""
        self._pending = _Pending(rng_states(), batch, sample_ids)
        if model is not None:
            inject.apply(list(self.config.faults), model, self.step_index, "weight", rerun=False)

    def step(self, loss: torch.Tensor | float, model: nn.Module,
             optimizer: torch.optim.Optimizer | None = None, *,
             closure: Callable[[], torch.Tensor] | None = None, batch: Any = None,
             sample_ids: Sequence | None = None, data_state: Any = None,
             step: int | None = None,
             sample_losses: Callable[[], torch.Tensor] | None = None) -> StepVerdict:
        """Check this step (after backward, before optimizer.step) and act on an alarm;
        `sample_losses()` (one loss per sample of the batch) helps name a bad sample whose
        inputs are finite."""
        self.step_index = self.step_index if step is None else step
        pending, self._pending = self._pending, None
        if pending is not None:
            batch = pending.batch if batch is None else batch
            sample_ids = pending.sample_ids if sample_ids is None else sample_ids
        if self.ledger is not None:
            self.ledger.trained()
            if sample_ids is None and self.ledger.last is not None:
                sample_ids = self.ledger.last.ids
            batch = self.ledger.last_batch if batch is None else batch
            data_state = self.ledger.state_dict if data_state is None else data_state
        inject.apply(list(self.config.faults), model, self.step_index, "grad", rerun=False)
        watched, swapped = self.models.watch(model)
        watch = watched.watch
        reading = watch.reading()
        numbers = step_numbers(loss, model, reading.vector)
        weights = watch.values(reading, numbers.extra)
        values = {"loss": numbers.loss, "grad_norm": numbers.grad_norm}
        lists = self._groups(optimizer)
        weights.rates = watched.owners.rates(watch.named_params, lists.values())
        breaches = (swapped + watched.rules.judge(watch.names, weights)
                    + self.rules.judge(values) + self.settings.judge(lists, model)
                    + watched.owners.judge(watch.named_params, lists.values(),
                                           self._steps.total)
                    + watched.stopped.judge(numbers.names, self.step_index))
        every = self.config.replica_every
        if every and self.step_index % every == 0:
            breaches = watched.replicas.compare(watch) + breaches
        verdict = StepVerdict(self.step_index, numbers.loss, numbers.grad_norm)
        self._record_metrics(verdict, breaches)
        skipped = (any(b.rule in NONFINITE_RULES for b in breaches)
                   and self._action(breaches) != "warn")
        self._nonfinite_skips = self._nonfinite_skips + 1 if skipped else 0
        if not breaches:
            self.rules.learn(values)
            watched.rules.learn(watch.names, weights)
        else:
            watched.rules.rebase(watch.names, weights)
            blamed = [b.param for b in breaches if b.param is not None]
            params = list(dict.fromkeys(blamed + numbers.nonfinite_params(
                self.config.report_params)))[:self.config.report_params]
            alarm = Alarm(self.step_index, breaches, self._action(breaches), params,
                          numbers.worst_params(self.config.report_params))
            if any(b.rule in NONFINITE_RULES for b in breaches):
                alarm.samples = bad_samples(batch, sample_ids, sample_losses)
            if any(b.rule in DEVICE_RULES for b in breaches):
                alarm.attribution, alarm.device = "device", device_state(self._xids)
            if (closure is not None and pending is not None and self.config.rerun
                    and alarm.attribution is None):
                self._attribute(alarm, numbers, closure, model, pending)
            verdict.alarm = alarm
            self.alarms.append(alarm)
            self._hold(alarm, watched.label)
            self._act(alarm, verdict, model, optimizer, batch, sample_ids, data_state)
        self.step_index += 1
        return verdict

    def run_step(self, closure: Callable[[], torch.Tensor], model: nn.Module,
                 optimizer: torch.optim.Optimizer, *, batch: Any = None,
                 sample_ids: Sequence | None = None, data_state: Any = None) -> StepVerdict:
        """Run one step given as a closure (zero_grad, forward, backward, return the loss):
        check it, re-run it on an alarm, and take the optimizer step unless skipped."""
        self.begin(model, batch, sample_ids)
        loss = closure()
        verdict = self.step(loss, model, optimizer, closure=closure, data_state=data_state)
        if verdict.take_step:
            optimizer.step()
        return verdict

    def resume(self, scene_dir: str | os.PathLike[str], model: nn.Module,
               optimizer: torch.optim.Optimizer | None = None, *,
               skip_bad_samples: bool = True) -> Scene:
        """Load a halted step's scene into model and optimizer and continue at that step; a
        scene whose weights or optimizer settings were the fault is refused, naming them:
        resume from the newest healthy checkpoint (`ckpt-inspector run latest`) instead. With
        a linked order ledger, the samples the scene blames are left out of later batches."""
        corrupt = [a for a in read_scene(scene_dir).alarms if a.get("rule") in NOT_RESUMED]
        if first := (corrupt or [None])[0]:
            what = "optimizer" if first["rule"] == SETTING_RULE else "weights"
            raise CodedError("scene-weights-corrupt", f"{scene_dir} holds the {what} the guard "
                             f"alarmed on ({first['rule']} on {first.get('param')}); resume "
                             f"from the checkpoint `ckpt-inspector run latest {self.run_dir}` "
                             "names instead")
        scene = load_scene(scene_dir, model, optimizer)
        if skip_bad_samples and scene.bad_samples and self.ledger is not None:
            self.ledger.skip_samples(scene.bad_samples)
        self._load_rules(scene.rules_state)
        self.step_index = scene.step
        self.accept_weights(model)
        return scene

    def accept_weights(self, model: nn.Module | None = None) -> None:
        """The weights now are intended (a load, a deliberate edit, parameters replaced):
        watch the model's tensors as they are now (every watched model's without `model`),
        retake the fingerprint, and drop the corruption alarms held so far."""
        every = [self.models.watch(model)[0]] if model is not None else self.models.all()
        self.settings.norms.accept(model)  # its norm layers as they are now (one replaced)
        for watched in every:
            self._held = {k: v for k, v in self._held.items() if k[0] != watched.label}
            watch = watched.watch
            watch.accept()
            reading = watch.reading(largest=True)
            watched.rules.accept(watch.names, watch.values(reading, reading.vector().tolist()))

    def accept_settings(self) -> None:
        """The optimizers' and norm layers' settings now are intended (`SettingsWatch.accept`)."""
        self.settings.accept(self._groups(None))

    def health(self) -> list[str]:
        """The weights' health now, one line per problem: non-finite, past their learned
        largest |w|, or changed since the last optimizer step; a learning rate still collapsed
        or a setting no schedule writes that changed (`settings`; the ledger checks what torch
        refuses in the state itself);
        a definitive weight alarm since the last `accept_weights`; a loss, gradient or
        weight-statistics alarm in the last `RECENT_ALARMS` steps; the last `NONFINITE_STREAK`
        or more steps all skipped as non-finite (what the ledger asks); first journals the
        rules' numbers (`baseline`), for a session resumed from this save."""
        self._journal_baseline()
        found = []
        for watched in self.models.all():
            watch = watched.watch
            reading = watch.reading(largest=True)
            values = watch.values(reading, reading.vector().tolist())
            found += [(watched.label, b) for b in watched.rules.judge(watch.names, values)
                      if b.rule != "update-size"]
        return [f"{b.rule} on {label}{b.param} (value {b.value:.4g}"
                + (f", bound {b.threshold:.4g})" if b.threshold is not None else ")")
                for label, b in found] + [
            f"{b.rule}: {said(b)}" for b in self.settings.problems(self._groups(None))
        ] + self._held_alarms({(label, b.rule, b.param) for label, b in found}
                              ) + self._recent_alarms() + self._nonfinite_streak()

    def _nonfinite_streak(self) -> list[str]:
        """A line when the last `NONFINITE_STREAK` or more steps were all skipped as
        non-finite: the state no longer computes a finite loss."""
        return [f"the last {self._nonfinite_skips} steps were all skipped for a non-finite "
                "loss or gradient: the state no longer computes a finite loss"
                ] if self._nonfinite_skips >= NONFINITE_STREAK else []

    def _hold(self, alarm: Alarm, label: str) -> None:
        """Keep the alarm's definitive weight breaches for the health check: the bytes it named
        stay in the weights, skipped step or not, after the rules learned them as normal."""
        for b in alarm.breaches:
            if b.rule in HELD_RULES:
                self._held.setdefault((label, b.rule, b.param),
                                      f"{label}{_said(b)} at step {alarm.step}")

    def _held_alarms(self, now: set[tuple[str, str, str | None]]) -> list[str]:
        """The held corruption alarms not already found in the weights `now`, in words; a
        buffer's change is no longer held once a second one showed its writer (`written`)."""
        written = {(w.label, "weights-changed", n) for w in self.models.all()
                   for n in w.watch.constants.written}
        lines = [f"{key[1]}: {line} (held until guard.accept_weights)"
                 for key, line in self._held.items() if key not in now | written]
        more = len(lines) - HELD_SHOWN
        return lines[:HELD_SHOWN] + ([f"and {more} more corruption alarms"] if more > 0 else [])

    def _recent_alarms(self) -> list[str]:
        """The loss and gradient alarms of the last `RECENT_ALARMS` steps whose step was
        taken, and the statistical weight alarms (`WINDOWED_RULES`) of those steps: the
        weights now were computed by, or right after, a step the guard named."""
        since = self.step_index - RECENT_ALARMS
        lines = [f"{b.rule} on {b.param or 'the ' + b.signal} at step {a.step} "
                 f"(value {b.value:.4g}"
                 + (f", bound {b.threshold:.4g})" if b.threshold is not None else ")")
                 for a in self.alarms if a.step >= since
                 for b in a.breaches if b.rule in WINDOWED_RULES
                 or (b.signal in ("loss", "grad_norm") and a.action != "skip")]
        if len(lines) > 1:
            return [f"{lines[-1]} and {len(lines) - 1} more loss, gradient or weight-statistics "
                    f"alarms in the last {RECENT_ALARMS} steps"]
        return lines

    def state_dict(self) -> dict:
        """The guard's own state, to save in a checkpoint beside the model's."""
        return {"step": self.step_index, "rules": self._rules_state()}

    def load_state_dict(self, state: dict) -> None:
        """Continue from a checkpoint's guard state."""
        self.step_index = int(state["step"])
        self._load_rules(state["rules"])

    def close(self) -> None:
        """Flush the per-step metrics file, print the alarm counts, unhook from the optimizers
        and the ledger, and stop the XID listener (if a GPU was there); journal the rules'
        numbers for the next session (`baseline`)."""
        self._journal_baseline()
        self._post_hook.remove()
        self._pre_hook.remove()
        self.models.close()
        health_gate.unregister(self.run_dir, self.health)
        if self.console is not None:
            self.console.close()
        if self._metrics is not None:
            self._metrics.close()
        if self._xids is not None:
            self._xids.close()
            self._xids = None

    def _before_optimizer_step(self, optimizer: torch.optim.Optimizer) -> None:
        self._steps.stepping(optimizer)
        for watched in self.models.all():
            watched.watch.settle()

    def _after_optimizer_step(self, optimizer: torch.optim.Optimizer) -> None:
        # the fingerprints of the tensors this optimizer steps, only those, are retaken
        self._steps.stepped(optimizer)
        for watched in self.models.all():
            if (held := watched.watch.held_by(optimizer)) != []:
                watched.watch.after_step(held)

    def _groups(self, optimizer: torch.optim.Optimizer | None) -> dict[int, list]:
        """The param groups of every optimizer that stepped and the one given, by their list:
        the settings each `guard.step` checks before the step they would steer (a few µs)."""
        # a wrapper (accelerate's, Lightning's) shares its optimizer's param_groups: read once
        return {id(groups): groups for opt in [*self._steps, optimizer]
                if isinstance(groups := getattr(opt, "param_groups", None), list)}

    def _action(self, breaches: list[Breach]) -> Action:
        """The configured action; `skip` for a non-finite loss or gradient under `warn`."""
        nonfinite = any(b.rule in NONFINITE_RULES for b in breaches)
        if self.config.action == "warn" and nonfinite and self.config.skip_nonfinite:
            return "skip"
        return self.config.action

    def _rules_state(self) -> dict:
        first, *more = self.models.state_dict() or [{}]  # more: the models after the first
        return {**self.rules.state_dict(), "weights": first,
                **({"weights_more": more} if more else {})}

    def _load_rules(self, state: dict) -> None:
        self.rules.load_state_dict(state)
        self.models.load_state_dict([state.get("weights", {}), *state.get("weights_more", [])])

    def _record_metrics(self, verdict: StepVerdict, breaches: list[Breach]) -> None:
        """One line per step (loss, grad norm, the first rule broken) in the rank's metrics file,
        for charts; the journal names the file once."""
        if self._metrics is None:
            path = metrics_path(self.run_dir, self.rank)
            self._metrics = BlockWriter(path)
            journal.append(self.journal, METRICS_KIND,
                           {"path": str(path.relative_to(self.run_dir)), "rank": self.rank,
                            "time": time.time()})
        self._metrics.write({"s": verdict.step, "loss": strict_json.strict_float(verdict.loss),
                             "gn": strict_json.strict_float(verdict.grad_norm),
                             "a": breaches[0].rule if breaches else None})

    def _attribute(self, alarm: Alarm, first: StepNumbers, closure: Callable[[], torch.Tensor],
                   model: nn.Module, pending: _Pending) -> None:
        """Re-run the step from the state before it, on the same batch, and compare."""
        after = rng_states()
        restore_rng(pending.rng)
        model.zero_grad(set_to_none=True)
        loss = closure()
        inject.apply(list(self.config.faults), model, self.step_index, "grad", rerun=True)
        again = step_numbers(loss, model)
        restore_rng(after)
        same = (_same(first.loss, again.loss, self.config.rerun_rtol)
                and _same(first.grad_norm, again.grad_norm, self.config.rerun_rtol))
        alarm.attribution = "reproducible" if same else "transient"
        alarm.rerun = {"loss": again.loss, "grad_norm": again.grad_norm}
        if not same:
            alarm.device = device_state(self._xids)

    def _act(self, alarm: Alarm, verdict: StepVerdict, model: nn.Module,
             optimizer: torch.optim.Optimizer | None, batch: Any, sample_ids: Sequence | None,
             data_state: Any) -> None:
        if alarm.action == "skip":
            verdict.take_step = False
            for param in model.parameters():
                param.grad = None
        if alarm.action == "halt":
            verdict.take_step = False
            state = data_state() if callable(data_state) else data_state
            scene = Scene(step=alarm.step, alarms=[_breach_json(b) for b in alarm.breaches],
                          model_fingerprint=model_fingerprint(model),
                          sample_ids=list(sample_ids) if sample_ids is not None else None,
                          bad_samples=alarm.samples,
                          input_hash=batch_hash(batch), worst_grads=alarm.worst,
                          nonfinite_params=alarm.params, data_state=state,
                          rules_state=self._rules_state())
            alarm.scene = write_scene(self.run_dir, scene, model, optimizer, rng_states())
        self._journal(alarm)
        if alarm.action == "halt":
            assert alarm.scene is not None and self._metrics is not None
            self._metrics.flush()
            raise GuardHalt(alarm.scene, f"guard halted at step {alarm.step}: "
                            f"{alarm.breaches[0].rule} (scene {alarm.scene}); resume with "
                            "Guard.resume(SCENE, model, optimizer)")

    def _journal(self, alarm: Alarm) -> None:
        first = alarm.breaches[0]
        if self.console is not None:
            for rule in dict.fromkeys(b.rule for b in alarm.breaches):
                b = next(x for x in alarm.breaches if x.rule == rule)
                self.console.alarm(rule, alarm.step, alarm.action, _said(b))
        extra: dict[str, Any] = {"also": [_breach_json(b) for b in alarm.breaches[1:]],
                                 "worst": [[n, v] for n, v in alarm.worst]}
        if alarm.samples:
            extra["bad_samples"] = alarm.samples
        if alarm.rerun is not None:
            extra["rerun"] = alarm.rerun
        if alarm.device is not None:
            extra["device"] = alarm.device
        if first.param is not None:
            extra["param"] = first.param
        append_alarm(self.run_dir, step=alarm.step, rule=first.rule, value=first.value,
                     threshold=first.threshold, action=alarm.action, rank=self.rank,
                     params=alarm.params, attribution=alarm.attribution, scene=alarm.scene,
                     **extra)


def _same(a: float, b: float, rtol: float) -> bool:
    if not (math.isfinite(a) and math.isfinite(b)):  # NaN is NaN's twin, Inf only itself
        return a == b or (math.isnan(a) and math.isnan(b))
    return abs(a - b) <= rtol * max(abs(a), abs(b))


def _said(b: Breach) -> str:
    """A breach in words, for the console line."""
    if b.rule == REPLICA_RULE:
        return f"rank {int(b.value)}'s {b.param} differs from the other replicas"
    if b.rule in (SETTING_RULE, NORM_RULE):
        return said(b)
    if b.rule == REPLACED_RULE:
        return (f"{b.param} is not the tensor the guard watched (replaced, added or removed "
                "without guard.accept_weights(model))")
    if b.rule == STOPPED_RULE:
        return (f"{b.param} had gradients and got none for the last {b.value:.0f} steps "
                "(requires_grad off, a branch cut from the graph): it stopped learning")
    if b.rule == ORPHAN_RULE:
        return (f"{b.param} gets gradients (norm {b.value:.4g}) but no optimizer that steps "
                "the model holds it: it never learns")
    where = f" on {b.param}" if b.param else ""
    bar = f" (bound {b.threshold:.4g})" if isinstance(b.threshold, float) else ""
    return f"{b.signal}{where} is {b.value:.4g}{bar}"


def _breach_json(b: Breach) -> dict:
    return {"rule": b.rule, "signal": b.signal, "value": b.value, "threshold": b.threshold,
            **({"param": b.param} if b.param is not None else {})}
