"""The training family: matched optimizers, train steps per framework, parity, convergence, speed.

``notebooks/11_training.py`` orchestrates these; each module reads on its own:

- ``optim``: one optimizer description built as ``torch.optim`` and as optax, term for term.
- ``steps``: ``TorchTrainer`` (eager / torch.compile) and ``JaxTrainer`` (jit, state threaded).
- ``batches``: one seeded sampler over synthetic data, digits or ImageNet-100.
- ``parity``: K fp32 steps on both frameworks from the same weights and batches, compared.
- ``convergence``: a few epochs on both, train loss and validation top-1.
- ``speed``: steady-state step time, images/s, compile time, memory and energy.
- ``records``: all of the above as tidy records and charts.
"""
