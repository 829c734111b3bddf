"""The checks 00_setup runs: each must pass on a working machine and fail where it should."""

from __future__ import annotations

import numpy as np

from fwbench.families.setup import setup_checks as setup


def test_a_missing_package_fails_its_import_check_with_the_reason(monkeypatch):
    monkeypatch.setattr(setup, "REQUIRED", ("numpy", "fwbench_no_such_package"))
    monkeypatch.setattr(setup, "OPTIONAL", ())
    present, missing = setup.check_imports()
    assert present.passed and present.detail == np.__version__
    assert not missing.passed and missing.detail.startswith("ModuleNotFoundError")


def test_a_missing_index_engine_passes_and_says_where_to_index(monkeypatch):
    # a GPU node's offline kit carries no DuckDB: its runs are indexed elsewhere, not refused
    monkeypatch.setattr(setup, "REQUIRED", ())
    monkeypatch.setattr(setup, "OPTIONAL", ("fwbench_no_such_index_engine",))
    (check,) = setup.check_imports()
    assert check.passed and check.detail.startswith("absent (ModuleNotFoundError")
    assert "fwbench ingest" in check.detail


def test_the_matmul_check_tells_fp32_from_tf32_rounding():
    a, b, ref = setup._reference_matmul(128, seed=1)
    fp32 = a @ b
    assert setup._matmul_check("numpy", "cpu", fp32, ref, 0.0).passed
    # TF32 keeps 10 mantissa bits: inputs rounded that way land near 1e-3 relative, and must fail
    tf32 = lambda x: (x.view(np.uint32) & np.uint32(0xFFFFE000)).view(np.float32)  # noqa: E731
    rounded = tf32(a.copy()) @ tf32(b.copy())
    check = setup._matmul_check("numpy", "cpu", rounded, ref, 0.0)
    assert not check.passed and "max rel err" in check.detail


def test_torch_matmul_runs_with_tf32_off_whatever_was_set_before():
    import torch

    torch.backends.cuda.matmul.allow_tf32 = True
    torch.set_float32_matmul_precision("high")
    check = setup.check_torch_matmul("cpu", size=64)
    assert check.passed, check.detail
    assert torch.backends.cuda.matmul.allow_tf32 is False
    assert torch.get_float32_matmul_precision() == "highest"


def test_jax_matmul_and_xla_compile_pass_on_the_cpu():
    import jax

    cpu = jax.devices("cpu")[0]
    assert setup.check_jax_matmul(cpu, "cpu", size=64).passed
    compiled = setup.check_xla_compile(cpu, "cpu")
    assert compiled.passed, compiled.detail


def test_the_xla_check_asks_for_fp32_matmuls_where_a_gpu_would_round_to_tf32(monkeypatch):
    # a GPU's default rounds fp32 matmuls to TF32 (the check read 26.2252 for 26.2140 on an
    # H200); a CPU ignores the request, so the program XLA is given is what is checked
    import jax
    from jax._src import stages

    programs = []
    compile_lowered = stages.Lowered.compile

    def remember(self, *args, **kwargs):
        programs.append(self.as_text())
        return compile_lowered(self, *args, **kwargs)

    monkeypatch.setattr(stages.Lowered, "compile", remember)
    check = setup.check_xla_compile(jax.devices("cpu")[0], "cpu")
    assert check.passed, check.detail
    (program,) = programs
    assert "precision = [HIGHEST, HIGHEST]" in program
