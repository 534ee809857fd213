#!/usr/bin/python3
"""Under an ISA cap (LOCKSTEP_MAX_CPU_ISA or ONEDNN_MAX_CPU_ISA) bench/harness.py caps its PyTorch
peers the same way: ATen's vectorized kernels through ATEN_CPU_CAPABILITY (whose values are
"default", "avx2" and "avx512"), PyTorch's oneDNN through its own variables; without a cap it sets
none of them, so PyTorch picks what the CPU has."""
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.dont_write_bytecode = True


def env_under(harness, variables):
    saved = {k: os.environ.pop(k, None) for k in ("LOCKSTEP_MAX_CPU_ISA", "ONEDNN_MAX_CPU_ISA")}
    try:
        os.environ.update(variables)
        return harness.torch_isa_env()
    finally:
        for k in ("LOCKSTEP_MAX_CPU_ISA", "ONEDNN_MAX_CPU_ISA"):
            os.environ.pop(k, None)
            if saved[k] is not None:
                os.environ[k] = saved[k]


def main():
    sys.path.insert(0, os.path.join(ROOT, "bench"))
    import harness  # noqa: E402
    failures = []
    cases = [({}, {}),
             ({"LOCKSTEP_MAX_CPU_ISA": "AVX2"},
              {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2",
               "DNNL_MAX_CPU_ISA": "AVX2"}),
             ({"ONEDNN_MAX_CPU_ISA": "sse41"},
              {"ATEN_CPU_CAPABILITY": "default", "ONEDNN_MAX_CPU_ISA": "SSE41",
               "DNNL_MAX_CPU_ISA": "SSE41"}),
             ({"LOCKSTEP_MAX_CPU_ISA": "AVX512_CORE_BF16"},
              {"ATEN_CPU_CAPABILITY": "avx512", "ONEDNN_MAX_CPU_ISA": "AVX512_CORE_BF16",
               "DNNL_MAX_CPU_ISA": "AVX512_CORE_BF16"})]
    for variables, expected in cases:
        got = env_under(harness, variables)
        if got != expected:
            failures.append("under %s: expected %s, got %s" % (variables, expected, got))
    for f in failures:
        print("FAIL:", f)
    if failures:
        sys.exit(1)
    print("ok: %d caps" % len(cases))


if __name__ == "__main__":
    main()
