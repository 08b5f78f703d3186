"""optim: every update rule against a hand-written numpy reference (and torch.optim if present)."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

import minidist as md
from minidist import backend
from minidist.optim import SGD, AdaGrad, Adam, Lookahead, LRScheduler, schedules

SHAPES = [(3, 4), (4,)]
STEPS = 6


def make_params(dtype=np.float64, seed=0) -> list[md.nn.Parameter]:
    rng = np.random.default_rng(seed)
    return [md.nn.Parameter(rng.standard_normal(s).astype(dtype)) for s in SHAPES]


def gradient_sequence(dtype=np.float64, seed=1) -> list[list[np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [[rng.standard_normal(s).astype(dtype) for s in SHAPES] for _ in range(STEPS)]


def run_optimizer(opt, params, grads) -> list[np.ndarray]:
    for step_grads in grads:
        for p, g in zip(params, step_grads, strict=True):
            p.grad = backend.xp().array(g)  # a copy, on the device the test runs on
        opt.step()
    return [p.numpy().copy() for p in params]


# ---- numpy references: the formulas of each docstring, written plainly --------------------

def sgd_reference(w, grads, lr, momentum=0.0, weight_decay=0.0, nesterov=False):
    w, buf = w.copy(), None
    for g in grads:
        g = g + weight_decay * w
        if momentum:
            buf = g.copy() if buf is None else momentum * buf + g
            g = g + momentum * buf if nesterov else buf
        w = w - lr * g
    return w


def adam_reference(w, grads, lr, b1, b2, eps, weight_decay=0.0):
    w, v, s = w.copy(), np.zeros_like(w), np.zeros_like(w)
    for t, g in enumerate(grads, start=1):
        g = g + weight_decay * w
        v = b1 * v + (1 - b1) * g
        s = b2 * s + (1 - b2) * g**2
        v_hat, s_hat = v / (1 - b1**t), s / (1 - b2**t)
        w = w - lr * v_hat / (np.sqrt(s_hat) + eps)
    return w


def adagrad_reference(w, grads, lr, eps, initial):
    w, total = w.copy(), np.full_like(w, initial)
    for g in grads:
        total = total + g**2
        w = w - lr * g / (np.sqrt(total) + eps)
    return w


CASES = [
    (lambda p: SGD(p, lr=0.1), lambda w, g: sgd_reference(w, g, 0.1)),
    (lambda p: SGD(p, lr=0.1, momentum=0.9),
     lambda w, g: sgd_reference(w, g, 0.1, momentum=0.9)),
    (lambda p: SGD(p, lr=0.05, momentum=0.8, weight_decay=0.01, nesterov=True),
     lambda w, g: sgd_reference(w, g, 0.05, 0.8, 0.01, nesterov=True)),
    (lambda p: Adam(p, lr=0.01), lambda w, g: adam_reference(w, g, 0.01, 0.9, 0.999, 1e-8)),
    (lambda p: Adam(p, lr=0.02, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.1),
     lambda w, g: adam_reference(w, g, 0.02, 0.8, 0.99, 1e-6, 0.1)),
    (lambda p: AdaGrad(p), lambda w, g: adagrad_reference(w, g, 0.05, 1e-8, 0.0)),
    (lambda p: AdaGrad(p, lr=0.3, initial_accumulator=0.1),
     lambda w, g: adagrad_reference(w, g, 0.3, 1e-8, 0.1)),
]


@pytest.mark.parametrize("make, reference", CASES)
def test_update_rules_match_numpy_reference(make, reference):
    params, grads = make_params(), gradient_sequence()
    got = run_optimizer(make(params), params, grads)
    for i, w0 in enumerate(make_params()):
        expected = reference(w0.numpy(), [step[i] for step in grads])
        np.testing.assert_allclose(got[i], expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("make, reference", CASES)
def test_float32_stays_float32_and_in_place(make, reference):
    params = make_params(np.float32)
    arrays = [p.data for p in params]
    opt = make(params)
    got = run_optimizer(opt, params, gradient_sequence(np.float32))
    assert all(p.data is a and p.dtype == np.float32 for p, a in zip(params, arrays, strict=True))
    state_arrays = [v for entry in opt.state.values() for v in entry.values()
                    if hasattr(v, "dtype")]
    assert all(v.dtype == np.float32 for v in state_arrays)
    for i, w0 in enumerate(make_params()):
        expected = reference(w0.numpy().astype(np.float32).astype(np.float64),
                             [step[i].astype(np.float64) for step in gradient_sequence()])
        np.testing.assert_allclose(got[i], expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("make, reference", CASES)
def test_a_gradient_of_another_shape_is_named(make, reference):
    wrong = md.nn.Parameter(np.ones((2, 3)))
    wrong.grad = np.ones(3)
    with pytest.raises(ValueError, match=r"parameter of shape \(2, 3\) has a gradient of "
                                         r"shape \(3,\)"):
        make([wrong]).step()


@pytest.mark.parametrize("make, reference", CASES[:5])
def test_updates_run_on_blocks_of_any_shape_and_layout(make, reference, monkeypatch):
    """SGD and Adam run on blocks of a parameter (rows of its first axis, BLOCK weights,
    here 10): several blocks, a row longer than a block, 0-d, empty, transposed."""
    monkeypatch.setattr("minidist.optim.optimizer.BLOCK", 10)
    rng = np.random.default_rng(3)
    shapes = [(), (3, 7), (25,), (2, 3, 4), (0, 4)]
    starts = [rng.standard_normal(s) for s in shapes] + [rng.standard_normal((9, 5)).T]
    grads = [[rng.standard_normal(w.shape) for w in starts] for _ in range(3)]
    params = [md.nn.Parameter(w.copy()) for w in starts]
    got = run_optimizer(make(params), params, grads)
    for i, w0 in enumerate(starts):
        expected = reference(w0, [step[i] for step in grads])
        np.testing.assert_allclose(got[i], expected, rtol=1e-12, atol=1e-12)


TORCH_CASES = [
    (lambda p: SGD(p, lr=0.05, momentum=0.8, weight_decay=0.01, nesterov=True),
     lambda t, p: t.optim.SGD(p, lr=0.05, momentum=0.8, weight_decay=0.01, nesterov=True)),
    (lambda p: Adam(p, lr=0.02, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.1),
     lambda t, p: t.optim.Adam(p, lr=0.02, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.1)),
    (lambda p: AdaGrad(p, lr=0.3, initial_accumulator=0.1),
     lambda t, p: t.optim.Adagrad(p, lr=0.3, initial_accumulator_value=0.1, eps=1e-8)),
]


@pytest.mark.parametrize("make, make_torch", TORCH_CASES)
def test_update_rules_match_torch_optim(make, make_torch):
    torch = pytest.importorskip("torch")
    params, grads = make_params(), gradient_sequence()
    got = run_optimizer(make(params), params, grads)
    torch_params = [torch.nn.Parameter(torch.from_numpy(p.numpy().copy()))
                    for p in make_params()]
    opt = make_torch(torch, torch_params)
    for step_grads in grads:
        for p, g in zip(torch_params, step_grads, strict=True):
            p.grad = torch.from_numpy(g.copy())
        opt.step()
    for mine, theirs in zip(got, torch_params, strict=True):
        np.testing.assert_allclose(mine, theirs.detach().numpy(), rtol=1e-10, atol=1e-12)


def test_parameters_without_gradient_are_skipped():
    params = make_params()
    before = params[1].numpy().copy()
    opt = Adam(params, lr=0.1)
    params[0].grad = backend.xp().ones(SHAPES[0])
    opt.step()
    np.testing.assert_array_equal(params[1].numpy(), before)
    assert id(params[1]) not in opt.state
    opt.zero_grad()
    assert all(p.grad is None for p in params)


def test_param_groups_have_their_own_hyper_parameters():
    params, grads = make_params(), gradient_sequence()
    opt = SGD([{"params": [params[0]]}, {"params": [params[1]], "lr": 0.5}], lr=0.1)
    got = run_optimizer(opt, params, grads)
    for i, lr in enumerate((0.1, 0.5)):
        expected = sgd_reference(make_params()[i].numpy(), [step[i] for step in grads], lr)
        np.testing.assert_allclose(got[i], expected, rtol=1e-12)
    with pytest.raises(ValueError, match="more than one group"):
        SGD([{"params": [params[0]]}, {"params": [params[0]]}], lr=0.1)
    with pytest.raises(ValueError, match="empty"):
        Adam([])


def test_optimizer_state_dict_resumes_exactly():
    grads = gradient_sequence()
    params = make_params()
    opt = Adam(params, lr=0.01)
    run_optimizer(opt, params, grads[:3])
    saved_params, saved_state = [p.numpy().copy() for p in params], opt.state_dict()
    assert saved_state["state"][0]["step"] == 3
    assert isinstance(saved_state["state"][0]["exp_avg"], np.ndarray)
    final = run_optimizer(opt, params, grads[3:])

    resumed = [md.nn.Parameter(w.copy()) for w in saved_params]
    opt2 = Adam(resumed, lr=0.5)  # lr comes back from the checkpoint
    opt2.load_state_dict(saved_state)
    assert opt2.param_groups[0]["lr"] == 0.01
    for a, b in zip(run_optimizer(opt2, resumed, grads[3:]), final, strict=True):
        np.testing.assert_array_equal(a, b)


def test_adam_minimises_a_quadratic_through_autograd():
    target = md.Tensor(np.array([1.0, -2.0, 3.0]))  # on the device the test runs on
    w = md.nn.Parameter(np.zeros(3))
    opt = Adam([w], lr=0.1)
    for _ in range(300):
        opt.zero_grad()
        ((w - target) * (w - target)).sum().backward()
        opt.step()
    np.testing.assert_allclose(w.numpy(), target.numpy(), atol=1e-3)


def test_lookahead_matches_reference():
    k, alpha, lr = 3, 0.5, 0.1
    params, grads = make_params(), gradient_sequence()
    got = run_optimizer(Lookahead(SGD(params, lr=lr), k=k, alpha=alpha), params, grads)
    for i, w0 in enumerate(make_params()):
        fast = slow = w0.numpy().copy()
        for t, step in enumerate(grads, start=1):
            fast = fast - lr * step[i]
            if t % k == 0:
                slow = slow + alpha * (fast - slow)
                fast = slow.copy()
        np.testing.assert_allclose(got[i], fast, rtol=1e-12)
    # alpha = 1 is the plain base optimiser
    params = make_params()
    plain = run_optimizer(Lookahead(SGD(params, lr=lr), k=2, alpha=1.0), params, grads)
    for i, w0 in enumerate(make_params()):
        expected = sgd_reference(w0.numpy(), [s[i] for s in grads], lr)
        np.testing.assert_allclose(plain[i], expected, rtol=1e-12)


NAN = float("nan")
BAD = [(lambda ps: SGD(ps, lr=-1.0), "lr"), (lambda ps: SGD(ps, 0.1, nesterov=True), "Nesterov"),
       (lambda ps: SGD(ps, 0.1, momentum=NAN), "momentum"),
       (lambda ps: SGD(ps, 0.1, momentum=1.5), "momentum"),
       (lambda ps: SGD(ps, 0.1, weight_decay=NAN), "weight_decay"),
       (lambda ps: Adam(ps, betas=(0.9, 1.0)), "betas"), (lambda ps: Adam(ps, eps=NAN), "eps"),
       (lambda ps: Adam(ps, betas=(NAN, 0.9)), "betas"),
       (lambda ps: Adam(ps, betas=(0.9,)), "betas"),
       (lambda ps: Adam(ps, weight_decay=NAN), "weight_decay"),
       (lambda ps: AdaGrad(ps, eps=NAN), "eps"), (lambda ps: AdaGrad(ps, lr=[NAN, 1.0]), "lr"),
       (lambda ps: Lookahead(SGD(ps, 0.1), k=0), "k must"),
       (lambda ps: Lookahead(SGD(ps, 0.1), k=2.5), "k must"),
       (lambda ps: Lookahead(SGD(ps, 0.1), alpha=NAN), "alpha"),
       (lambda ps: Lookahead(SGD(ps, 0.1), alpha=0.0), "alpha"),
       (lambda ps: LRScheduler(SGD(ps, 0.1), schedules.cosine(NAN, 10)), "at step 0"),
       (lambda ps: LRScheduler(SGD(ps, 0.1), lambda t: 0.1 - t), "at step 1")]


@pytest.mark.parametrize("make, words", BAD)
def test_invalid_hyper_parameters_are_rejected_by_name(make, words):
    with pytest.raises(ValueError, match=words):  # not quietly trained to NaN weights
        make(make_params()).step()


CHANGED = [(SGD, "lr", NAN), (SGD, "lr", -1.0), (SGD, "lr", math.inf), (SGD, "momentum", 1.0),
           (SGD, "weight_decay", NAN), (Adam, "lr", NAN), (Adam, "eps", math.inf),
           (Adam, "betas", (0.9, NAN)), (AdaGrad, "lr", NAN), (AdaGrad, "eps", -1.0)]


@pytest.mark.parametrize("cls, name, value", CHANGED)
def test_hyper_parameters_set_by_hand_after_construction_are_checked_at_each_step(cls, name,
                                                                                  value):
    """``opt.param_groups[0]["lr"] = nan`` went unchecked: training went on to NaN weights."""
    params = make_params()
    opt = cls([{"params": params[:1]}, {"params": params[1:]}], lr=0.1)
    for p, g in zip(params, gradient_sequence()[0], strict=True):
        p.grad = backend.xp().array(g)
    before = [p.numpy().copy() for p in params]
    opt.param_groups[1][name] = value
    with pytest.raises(ValueError, match=rf"param_groups\[1\]: {name} must .*got "
                                         rf"{re.escape(repr(value))}"):
        opt.step()
    for p, b in zip(params, before, strict=True):  # no group moved, not even the good one
        np.testing.assert_array_equal(p.numpy(), b)
    opt.param_groups[1][name] = opt.defaults[name]
    opt.step()  # the same optimiser goes on once the value is put right


def test_a_group_of_its_own_with_a_bad_value_is_refused_when_added():
    params = make_params()
    with pytest.raises(ValueError, match=r"param_groups\[1\]: momentum must be a finite"):
        SGD([{"params": params[:1]}, {"params": params[1:], "momentum": NAN}], lr=0.1)

# ---- schedules ---------------------------------------------------------------------------------

def test_schedule_formulas():
    assert [schedules.constant(0.3)(t) for t in (0, 100)] == [0.3, 0.3]
    decay = schedules.step_decay(1.0, step_size=10, gamma=0.5)
    assert [decay(t) for t in (0, 9, 10, 25)] == [1.0, 1.0, 0.5, 0.25]
    cos = schedules.cosine(1.0, total_steps=100, min_lr=0.1)
    assert cos(0) == pytest.approx(1.0) and cos(100) == pytest.approx(0.1)
    assert cos(50) == pytest.approx(0.55) and cos(500) == pytest.approx(0.1)
    assert cos(25) == pytest.approx(0.1 + 0.9 * (1 + math.cos(math.pi / 4)) / 2)
    warm = schedules.linear_warmup(0.4, warmup_steps=4)
    assert [warm(t) for t in range(6)] == pytest.approx([0.0, 0.1, 0.2, 0.3, 0.4, 0.4])
    warm_cos = schedules.with_warmup(schedules.cosine(1.0, 10), warmup_steps=5, start_lr=0.5)
    assert warm_cos(0) == 0.5 and warm_cos(5) == pytest.approx(1.0)
    assert warm_cos(10) == pytest.approx(0.5) and warm_cos(15) == pytest.approx(0.0)


def test_linear_scaling_rule_with_gradual_warmup():
    assert schedules.scaled_lr(0.1, 8192, 256) == pytest.approx(3.2)
    rule = schedules.linear_scaling(0.1, batch_size=1024, base_batch_size=256, warmup_steps=10)
    assert rule(0) == pytest.approx(0.1)          # starts at the small-batch lr
    assert rule(5) == pytest.approx(0.1 + 0.3 * 5 / 10)
    assert rule(10) == pytest.approx(0.4) and rule(1000) == pytest.approx(0.4)
    decayed = schedules.linear_scaling(0.1, 512, warmup_steps=2,
                                       after=lambda lr: schedules.step_decay(lr, 10))
    assert decayed(2) == pytest.approx(0.2) and decayed(12) == pytest.approx(0.02)


def test_lr_scheduler_drives_every_group():
    params = make_params()
    opt = SGD([{"params": [params[0]]}, {"params": [params[1]]}], lr=1.0)
    scheduler = LRScheduler(opt, schedules.linear_warmup(0.4, warmup_steps=4))
    seen = []
    for _ in range(5):
        seen.append([g["lr"] for g in opt.param_groups])
        opt.step()
        scheduler.step()
    np.testing.assert_allclose(seen, [[0.0, 0.0], [0.1, 0.1], [0.2, 0.2], [0.3, 0.3], [0.4, 0.4]])
    assert scheduler.last_lr == pytest.approx(0.4)
    lookahead = Lookahead(Adam(make_params(), lr=1.0))
    LRScheduler(lookahead, schedules.constant(0.01))
    assert lookahead.param_groups[0]["lr"] == 0.01
