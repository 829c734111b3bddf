"""Two CPUs under one marketing name are told apart by family and model, and records say which."""

from fwbench.measure import device
from fwbench.pipeline import environment
from fwbench.results import layout

ZEN3 = """processor\t: 0
vendor_id\t: AuthenticAMD
cpu family\t: 25
model\t\t: 1
model name\t: AMD EPYC
stepping\t: 1
flags\t\t: fpu sse4_2 fma avx avx2

processor\t: 1
vendor_id\t: GenuineIntel
model\t\t: 99
"""
ZEN4 = ZEN3.replace("model\t\t: 1\n", "model\t\t: 17\n").replace(
    "avx2", "avx2 avx512f avx512_vnni avx512_bf16"
)


def test_the_first_processor_is_parsed_with_its_isa():
    zen3 = device.parse_cpuinfo(ZEN3)
    assert zen3 == {
        "name": "AMD EPYC",
        "vendor": "AuthenticAMD",
        "family": 25,
        "model": 1,
        "stepping": 1,
        "isa": ["avx2", "fma"],
    }
    assert device.parse_cpuinfo(ZEN4)["isa"] == [
        "avx2",
        "fma",
        "avx512f",
        "avx512_vnni",
        "avx512_bf16",
    ]


def test_same_name_other_model_is_another_machine():
    zen3 = {"cpu": device.parse_cpuinfo(ZEN3), "gpus": []}
    zen4 = {"cpu": device.parse_cpuinfo(ZEN4), "gpus": []}
    assert layout.machine_words(zen4) == "AMD EPYC (family 25, model 17)"
    no_nvml = {**zen4, "gpus": [{"unavailable": "NVML: NVML Shared Library Not Found"}]}
    assert layout.machine_words(no_nvml) == "AMD EPYC (family 25, model 17)"
    assert environment.resume_problem(zen3, zen3) is None
    assert "family 25, model 1) and this machine is AMD EPYC (family 25, model 17)" in (
        environment.resume_problem(zen3, zen4)
    )
    assert "does not record" in environment.resume_problem({"cpu_model": "AMD EPYC"}, zen4)
    with_gpu = {**zen3, "gpus": [{"name": "NVIDIA H100 80GB HBM3"}]}
    assert environment.resume_problem(zen3, with_gpu)


def test_records_name_this_cpu_with_its_family_and_model():
    ident = device.cpu_identity()
    name = device.device_name("torch", "cpu")
    assert name.startswith(ident["name"])
    if ident["family"] is not None:
        assert f"(family {ident['family']}, model {ident['model']})" in name
