"""The alarm rules on plain numbers: warm-up, Megatron's max-of-first, EMA, non-finite, state."""

from __future__ import annotations

import math

from inspector.guard.rules import EmaSpike, MaxOfFirst, NonFinite, RuleSet


def test_non_finite_fires_on_nan_and_inf_only():
    rule = NonFinite("loss")
    assert rule.check(1e30) is None
    assert rule.check(math.nan).rule == "loss-nonfinite"
    assert rule.check(-math.inf).threshold is None


def test_max_of_first_waits_for_its_warm_up_then_fires_at_k_times_the_largest():
    rule = MaxOfFirst("grad_norm", k=10, warmup=3)
    for v in (1.0, -2.0, 1.5):
        assert rule.check(100.0) is None  # still warming up
        rule.learn(v)
    assert rule.check(19.9) is None
    breach = rule.check(20.0)
    assert breach is not None and breach.threshold == 20.0
    rule.learn(5.0)  # after the warm-up the bar no longer moves
    assert rule.check(20.0) is not None


def test_ema_fires_above_k_times_the_average_and_an_alarm_is_not_learned():
    rules = RuleSet([EmaSpike("loss", k=10, warmup=5, beta=0.9)])
    for _ in range(5):
        assert rules.check({"loss": 1.0, "grad_norm": 0}) == []
        rules.learn({"loss": 1.0, "grad_norm": 0})
    assert rules.check({"loss": 9.0, "grad_norm": 0}) == []
    [breach] = rules.check({"loss": 11.0, "grad_norm": 0})
    assert breach.rule == "loss-spike-ema" and math.isclose(breach.threshold, 10.0)


def test_rule_state_round_trips():
    a = RuleSet.default(warmup=2)
    for v in (1.0, 3.0, 2.0):
        a.learn({"loss": v, "grad_norm": v})
    b = RuleSet.default(warmup=2)
    b.load_state_dict(a.state_dict())
    assert b.check({"loss": 30.0, "grad_norm": 29.0}) == a.check({"loss": 30.0, "grad_norm": 29.0})
    assert [x.rule for x in b.check({"loss": 30.0, "grad_norm": 1.0})] == ["loss-spike-max",
                                                                          "loss-spike-ema"]
