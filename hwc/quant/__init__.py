"""Quantization: float graph -> int8 graph with integer-only arithmetic, and its accuracy search.

    arith      the integer semantics (requantize, add_requantize, LUTs, ...): THE definition
               every backend implements bit for bit, with worked examples
    runner     run a batch-1 graph on N samples at once (calibration, search)
    calibrate  histograms of every tensor; range methods minmax / percentile / entropy / mse
    quantize   prepare (split LUT activations, prune) and the quantizer proper: float graph +
               encodings -> int8 graph of QConv/QGemm/QAdd/..., decisions and encodings in
               graph.metadata["quant"]
    biascorr   sequential empirical bias correction on the calibration data
    qdq        import of already-quantized (QDQ) models with their own scales
    config     the quant-config (JSON) knobs
    search     the staged, parallel accuracy search behind `hwc quant-search`
    build      what `hwc build --int8` runs: optimize, quantize (or QDQ import), report
    cli        the `quant-search` command and `--quant-config`

The int8 reference interpreter is hwc.ref.int8 (kernels registered into hwc.ref.interp).
"""
