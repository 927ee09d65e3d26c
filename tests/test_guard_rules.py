"""The alarm rules on plain numbers: warm-up, Megatron's max-of-first, EMA, non-finite, state."""

from __future__ import annotations

import math

from inspector.guard.rules import RULES, EmaSpike, MaxOfFirst, MedianSpike, NonFinite, RuleSet


def test_non_finite_fires_on_nan_and_inf_only():
    rule = NonFinite("loss")
    assert rule.judge(1e30) is None
    assert rule.judge(math.nan).rule == "loss-nonfinite"
    assert rule.judge(-math.inf).threshold is None


def test_max_of_first_waits_for_its_warm_up_then_fires_at_k_times_the_largest():
    rule = MaxOfFirst("grad_norm", k=10, warmup=3)
    for v in (1.0, -2.0, 1.5):
        assert rule.judge(100.0) is None  # still warming up
        rule.learn(v)
    assert rule.judge(19.9) is None
    breach = rule.judge(20.0)
    assert breach is not None and breach.threshold == 20.0
    rule.learn(5.0)  # after the warm-up the bar no longer moves
    assert rule.judge(20.0) is not None


def test_ema_fires_above_k_times_the_average_and_an_alarm_is_not_learned():
    rules = RuleSet([EmaSpike("loss", k=10, warmup=5, beta=0.9)])
    for _ in range(5):
        assert rules.judge({"loss": 1.0, "grad_norm": 0}) == []
        rules.learn({"loss": 1.0, "grad_norm": 0})
    assert rules.judge({"loss": 9.0, "grad_norm": 0}) == []
    [breach] = rules.judge({"loss": 11.0, "grad_norm": 0})
    assert breach.rule == "loss-spike-ema" and math.isclose(breach.threshold, 10.0)


def test_rule_state_round_trips():
    a = RuleSet.default(warmup=2)
    for v in (1.0, 3.0, 2.0):
        a.learn({"loss": v, "grad_norm": v})
    b = RuleSet.default(warmup=2)
    b.load_state_dict(a.state_dict())
    assert b.judge({"loss": 30.0, "grad_norm": 29.0}) == a.judge({"loss": 30.0, "grad_norm": 29.0})
    assert [x.rule for x in b.judge({"loss": 30.0, "grad_norm": 1.0})] == ["loss-spike-max",
                                                                          "loss-spike-ema"]


def test_the_median_rule_judges_from_its_fifth_value_and_follows_a_falling_loss():
    rule = MedianSpike("loss", k=30, early=5, window=5)
    for v in (5.0, 3.0, 1.0, 0.5):
        assert rule.judge(1e6) is None  # fewer than `early` values
        rule.learn(v)
    for _ in range(5):
        rule.learn(0.05)  # the window now holds the recent, low losses only
    assert rule.judge(1.4) is None
    breach = rule.judge(0.05 * 300)
    # the bar: 30 x the median 0.05, but not below half the largest of the first five values
    assert breach is not None and math.isclose(breach.threshold, 2.5)
    assert rule.judge(2.4) is None


def test_every_registered_rule_is_named_by_its_kind_and_judges_through_the_rule_set():
    assert set(RULES) == {"nonfinite", "spike-max", "spike-ema", "spike-median",
                          "spike-journaled"}
    for kind, cls in RULES.items():
        rule = cls("loss")
        assert rule.name == f"loss-{kind}" and rule.judge(1.0) is None
        rule.load_state_dict(rule.state_dict())
    assert {r.kind for r in RuleSet.default().rules} == set(RULES)
