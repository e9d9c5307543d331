"""The learning-rate schedule of the ``toolgym fit-*`` loops: warm-up and decay sized to the
steps a time budget allows, never lr 0 (hand-computed factors, and a budget-cut optimiser run)."""
import pytest

from toolgym.fitting.common import Budget, BudgetedWarmupDecay, budgeted_schedule, warmup_decay_factor


def test_warmup_decay_factor_hand_computed():
    # w = 2, T = 6: warm-up (s+1)/(w+1) = 1/3, 2/3; decay (T-s)/(T-w) = 4/4, 3/4, 2/4, 1/4.
    assert [warmup_decay_factor(s, 2, 6) for s in range(6)] == pytest.approx([1 / 3, 2 / 3, 1.0, 0.75, 0.5, 0.25])
    # Past the end the last step's factor stays: never 0.
    assert warmup_decay_factor(9, 2, 6) == pytest.approx(0.25)
    # No warm-up: 3/3, 2/3, 1/3; a warm-up longer than the run is cut to T - 1.
    assert [warmup_decay_factor(s, 0, 3) for s in range(3)] == pytest.approx([1.0, 2 / 3, 1 / 3])
    assert [warmup_decay_factor(s, 50, 3) for s in range(3)] == pytest.approx([1 / 3, 2 / 3, 1.0])
    assert warmup_decay_factor(0, 0, 0) == 1.0


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_schedule_shrinks_to_the_steps_the_budget_allows():
    clock = FakeClock()
    budget = Budget(1.0)  # 60 s
    budget.elapsed = lambda: clock.now  # the budget and the schedule read one fake clock
    schedule = BudgetedWarmupDecay(planned=1000, warmup_ratio=0.1, budget=budget, clock=clock)
    assert schedule(0) == pytest.approx(1 / 101)  # before any timing: warm-up of 100 planned steps, step 0 > 0
    factors = []
    for done in range(1, 12):
        clock.now = 5.0 * done  # 5 s per step -> 12 steps fit in 60 s
        factors.append(schedule(done))
    assert schedule.total == 12
    # From the first timed step on, warm-up is round(0.1 * 12) = 1 step, then decay over 12: (12 - s) / 11.
    assert factors == pytest.approx([(12 - s) / 11 for s in range(1, 12)])
    # Timing only after three steps keeps the planned warm-up for those: (s + 1) / 101.
    late = BudgetedWarmupDecay(planned=1000, warmup_ratio=0.1, budget=budget, estimate_after=3, clock=clock)
    clock.now = 10.0
    assert late(2) == pytest.approx(3 / 101)


def test_no_budget_spans_the_planned_steps():
    schedule = BudgetedWarmupDecay(planned=10, warmup_ratio=0.2, budget=Budget(0))
    assert [schedule(s) for s in range(10)] == pytest.approx([warmup_decay_factor(s, 2, 10) for s in range(10)])


def test_budget_cut_optimiser_run_steps_at_positive_lr():
    """A run planned for 10,000 steps whose budget ends after a few: every step moves the weights.

    Under the old schedule (warm-up = 10 % of the planned steps) the first step had lr 0 and the
    fifth 4e-4 of the base rate."""
    import time

    import torch

    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    budget = Budget(0.5 / 60)  # half a second
    scheduler = budgeted_schedule(optimizer, 10_000, 0.1, budget)
    lrs, moved = [], []
    while not budget.spent():
        before = model.weight.detach().clone()
        lrs.append(optimizer.param_groups[0]["lr"])  # the lr this step uses
        model(torch.randn(8, 4)).pow(2).mean().backward()
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()
        moved.append(not torch.equal(before, model.weight))
        time.sleep(0.05)
    assert len(lrs) >= 4
    assert all(lr > 0 for lr in lrs) and all(moved)
    # Sized to the ~10 steps that fit, the run reaches a real fraction of the base rate.
    assert max(lrs) > 0.3 * 1e-2


def test_time_inside_paused_does_not_count_against_the_budget():
    import time

    from toolgym.fitting.common import Budget

    budget = Budget(1.0)
    with budget.paused():
        time.sleep(0.2)
    assert budget.elapsed() < 0.1 and not budget.spent()  # the 0.2 s of evaluation is not training time
