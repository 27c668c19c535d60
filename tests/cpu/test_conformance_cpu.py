"""ONNX's backend node test cases through the compiled CPU path (hwc.backends.cpu.conformance):
every case the importer supports and the CPU backend compiles must give ONNX's expected
outputs (the suite's own tolerances); the others are counted, never silently skipped."""

from hwc.backends.cpu.conformance import run_suite_cpu

#: Cases compiled and passed with onnx 1.23.2 when this floor was set: raise it when
#: support grows, never lower it to get a green run.
MIN_PASSED = 507


def test_node_cases_compiled():
    s = run_suite_cpu()
    counts = s.counts()
    print(f"\nONNX node tests through the CPU backend: {counts} ({s.seconds:.1f} s)")
    bad = s.cases("failed") + s.cases("crash")
    assert not bad, "\n".join(f"{r.name}: {r.status}: {r.detail.splitlines()[0][:300]}" for r in bad[:20])
    assert counts.get("passed", 0) >= MIN_PASSED, f"only {counts.get('passed', 0)} cases pass (floor {MIN_PASSED})"
