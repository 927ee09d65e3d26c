"""The guard's background reader while DataLoader workers fork: forking a process that has a
thread is the classic way to inherit a lock held by that thread, so a training loop whose
loader forks new workers every epoch must neither hang nor lose the guard's detection.

The loop runs in a child process with a time limit, so a hang fails the test instead of
holding the suite."""

from __future__ import annotations

import json
import subprocess
import textwrap

SCRIPT = textwrap.dedent("""
    import json, struct, sys, threading
    import torch
    from torch import nn
    from torch.utils.data import DataLoader, TensorDataset
    from inspector.guard.guard import Guard, GuardConfig

    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 64), nn.Tanh(), nn.Linear(64, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-2)
    data = TensorDataset(torch.randn(256, 32), torch.randn(256, 1))
    loader = DataLoader(data, batch_size=16, shuffle=True, num_workers=2,
                        multiprocessing_context="fork")
    guard = Guard(sys.argv[1], GuardConfig(overlap=True, console=False))
    steps, readers_at_fork, alarms = 0, [], []
    for epoch in range(3):
        readers_at_fork.append(any(t.name.startswith("guard-weights")
                                   for t in threading.enumerate()))
        for x, y in loader:  # a fresh pair of forked workers each epoch
            if epoch == 2 and steps == 40:
                weight = model[0].weight.detach().view(-1)
                bits = struct.unpack("<I", struct.pack("<f", float(weight[7])))[0]
                weight[7] = struct.unpack("<f", struct.pack("<I", bits ^ (1 << 30)))[0]
            optimizer.zero_grad(set_to_none=True)
            loss = nn.functional.mse_loss(model(x), y)
            loss.backward()
            verdict = guard.step(loss, model, optimizer)
            if verdict.alarm:
                alarms.append([steps, sorted({(b.rule, b.param)
                                              for b in verdict.alarm.breaches})])
            if verdict.take_step:
                optimizer.step()
            steps += 1
    guard.close()
    print(json.dumps({"steps": steps, "readers_at_fork": readers_at_fork, "alarms": alarms}))
""")


def test_loader_workers_fork_beside_the_background_reader_and_a_flip_is_still_named(
        tmp_path, python_exe):
    done = subprocess.run([python_exe, "-c", SCRIPT, str(tmp_path / "run")],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["steps"] == 3 * 16
    # epochs 2 and 3 forked their workers while the guard's reader thread was alive
    assert result["readers_at_fork"][1:] == [True, True]
    first_step, first_breaches = result["alarms"][0]  # none before the flip
    assert first_step == 40
    assert ["weights-changed", "0.weight"] in first_breaches
