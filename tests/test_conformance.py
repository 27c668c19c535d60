"""ONNX's backend node test suite through the importer and the reference interpreter.

The data is regenerated once from onnx's own generators into a cache folder (see
hwc.frontend.conformance). Every case hwc imports must give ONNX's expected outputs;
every case it does not import must be rejected with a clean UnsupportedError.
"""

from hwc.frontend.conformance import run_suite

#: Cases hwc imported with onnx 1.23.2 when this floor was set: raise it when support
#: grows, never lower it to get a green run.
MIN_SUPPORTED = 535


def _lines(results, n=20):
    return "\n".join(f"  {r.name}: {r.detail.splitlines()[0][:300]}" for r in results[:n])


def test_onnx_node_conformance():
    s = run_suite()
    counts = s.counts()
    print(f"\nONNX node tests: {'  '.join(f'{k} {v}' for k, v in counts.items())} "
          f"({s.seconds:.1f} s)")
    print("ONNX ops in the suite hwc does not support (cases using them): "
          + ", ".join(f"{op} ({n})" for op, n in s.unsupported_ops()))

    assert s.found > 1500, f"only {s.found} node cases found: is the data folder complete?"
    assert not s.crashed, f"{s.crashed} case(s) crashed:\n{_lines(s.cases('crash'))}"
    assert not s.failed, (f"{s.failed} supported case(s) give wrong outputs:\n"
                          f"{_lines(s.cases('failed'))}")
    bad = s.misdiagnosed()
    assert not bad, (f"{len(bad)} valid suite model(s) rejected with an error other than "
                     f"UnsupportedError:\n{_lines(bad)}")
    assert s.supported >= MIN_SUPPORTED, (
        f"only {s.supported} cases supported, the floor is {MIN_SUPPORTED}: a regression")
    assert s.passed == s.supported
