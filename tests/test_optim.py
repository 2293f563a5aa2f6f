"""The encoder optimiser: fused AdamW, with weight decay on matrices only, equal to torch's loop AdamW."""

import pytest

torch = pytest.importorskip("torch")

from xmtc.neural.optim import adamw  # noqa: E402


def _model(seed):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.LayerNorm(5), torch.nn.Linear(5, 3))


def test_fused_on_cpu_and_decay_on_matrices_only():
    net = _model(0)
    extra = torch.nn.Parameter(torch.ones(4, 2))
    opt = adamw(net.parameters(), 1e-3, 0.01, [{"params": [extra], "lr": 1e-2, "weight_decay": 0.0}])
    assert opt.defaults["fused"] is True
    decayed, plain, dense = opt.param_groups
    assert [tuple(p.shape) for p in decayed["params"]] == [(5, 6), (3, 5)]
    assert decayed["weight_decay"] == 0.01 and plain["weight_decay"] == 0.0
    assert sorted(tuple(p.shape) for p in plain["params"]) == [(3,), (5,), (5,), (5,)]
    assert dense["params"] == [extra] and dense["lr"] == 1e-2


def test_fused_steps_equal_the_loop_adamw():
    """Ten steps with a changing rate (as the warm-up/decay schedule sets it) from the same start."""
    a, b = _model(1), _model(1)
    fast = adamw(a.parameters(), 1e-2, 0.1)
    pa = list(b.parameters())
    ref = torch.optim.AdamW([{"params": [p for p in pa if p.ndim >= 2], "weight_decay": 0.1},
                             {"params": [p for p in pa if p.ndim < 2], "weight_decay": 0.0}], lr=1e-2,
                            foreach=False, fused=False)
    x = torch.randn(16, 6, generator=torch.Generator().manual_seed(2))
    for step in range(10):
        for net, opt in ((a, fast), (b, ref)):
            for g in opt.param_groups:
                g["lr"] = 1e-2 * (step + 1) / 10
            opt.zero_grad()
            net(x).pow(2).sum().backward()
            opt.step()
    moved = sum(float((p - q).detach().abs().sum()) for p, q in zip(a.parameters(), _model(1).parameters()))
    assert moved > 0.1  # the updates are real, so equality below says something
    for p, q in zip(a.parameters(), b.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6)


def test_not_fused_on_a_device_without_the_kernel():
    w = torch.nn.Parameter(torch.ones(3, 3))
    opt = adamw([w], 1e-3, 0.0)
    assert opt.defaults["fused"] is True
    meta = torch.nn.Parameter(torch.ones(2, 2, device="meta"))
    assert not adamw([meta], 1e-3, 0.0).defaults["fused"]
