"""The CPU bundle: model.o + model.h + weights.bin, with an example main.c and Makefile.

    OUT/model.o       the compiled model (host triple unless --triple/--cpu), one global symbol
    OUT/model.h       sizes, alignment, input/output offsets (macros) and the entry point
    OUT/weights.bin   the constant weights, exactly NAME_WEIGHTS_SIZE bytes
    OUT/main.c        an example caller: loads weights.bin, runs, prints or writes outputs
    OUT/Makefile      `make` builds ./main with gcc; `make run` runs it

The caller owns all memory: three regions, each NAME_ALIGNMENT-aligned. The entry
point allocates nothing and calls nothing outside model.o.
"""

from __future__ import annotations

import re
import struct
import textwrap

from hwc import __version__

HEADER_DOC = """\
/* {name}: {model} compiled by hwc {version} for {triple} (cpu {cpu}, {simd}-bit vectors).
 * Generated file: do not edit.
 *
 * Memory (the caller owns all of it; every pointer must be {upper}_ALIGNMENT-aligned):
 *   constant_weights  {upper}_WEIGHTS_SIZE bytes: the contents of weights.bin, never written
 *   mutable_io        {upper}_IO_SIZE bytes: inputs are read from it and outputs written to it,
 *                     at the offsets below (each tensor is dense, row-major, in the ONNX
 *                     model's own layout and element type)
 *   activations       {upper}_ACTIVATIONS_SIZE bytes of scratch (contents need not persist)
 *
 * {calls}
 */"""


def _macro(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9]", "_", name).upper()


def io_macros(io: list[dict]) -> list[tuple[dict, str]]:
    """(spec, macro stem) per input/output, unique even when names differ only in punctuation."""
    out, seen = [], set()
    for spec in io:
        stem = f"{spec['kind'].upper()}_{_macro(spec['name'])}"
        base, k = stem, 1
        while stem in seen:
            stem = f"{base}_{k}"
            k += 1
        seen.add(stem)
        out.append((spec, stem))
    return out


_CTYPE = {"float32": "float", "int8": "int8_t", "uint8": "uint8_t", "int32": "int32_t", "int64": "int64_t",
          "bool": "uint8_t"}


def undefined_symbols(obj: bytes) -> list[str]:
    """Names model.o needs from outside (ELF symbols with an undefined section), sorted."""
    if obj[:4] != b"\x7fELF":
        return []
    is64, little = obj[4] == 2, obj[5] == 1
    e = "<" if little else ">"
    if is64:
        shoff, = struct.unpack_from(e + "Q", obj, 0x28)
        shentsize, shnum = struct.unpack_from(e + "HH", obj, 0x3A)
    else:
        shoff, = struct.unpack_from(e + "I", obj, 0x20)
        shentsize, shnum = struct.unpack_from(e + "HH", obj, 0x2E)
    secs = []
    for i in range(shnum):
        o = shoff + i * shentsize
        if is64:
            _, typ, _, _, off, size, link, _, _, entsize = struct.unpack_from(e + "IIQQQQIIQQ", obj, o)
        else:
            _, typ, _, _, off, size, link, _, _, entsize = struct.unpack_from(e + "IIIIIIIIII", obj, o)
        secs.append((typ, off, size, link, entsize))
    names = set()
    for typ, off, size, link, entsize in secs:
        if typ != 2 or not entsize:  # SHT_SYMTAB
            continue
        stroff = secs[link][1]
        for k in range(1, size // entsize):
            o = off + k * entsize
            if is64:
                st_name, info, _, shndx = struct.unpack_from(e + "IBBH", obj, o)
            else:
                st_name, _, _, info, _, shndx = struct.unpack_from(e + "IIIBBH", obj, o)
            if shndx == 0 and st_name:
                end = obj.index(b"\0", stroff + st_name)
                names.add(obj[stroff + st_name:end].decode())
    return sorted(names)


def header(name: str, model: str, io: list[dict], sizes: dict, cpu: dict, needs: list[str] = ()) -> str:
    up = name.upper()
    calls = (f"{name}() returns 0, or 1 (doing nothing) when a pointer is not aligned. It allocates nothing "
             + ("and calls nothing outside model.o (no libc, no libm)." if not needs else
                "and calls nothing outside model.o except these helpers of the compiler's run-time library "
                "(libgcc or compiler-rt, linked by default; this target has no double-precision unit): "
                + ", ".join(needs) + ".")
             + " Reentrant for distinct mutable_io/activations buffers; constant_weights may be shared.")
    calls = "\n * ".join(textwrap.wrap(calls, 86, break_on_hyphens=False))
    lines = [HEADER_DOC.format(name=name, model=model, version=__version__, triple=cpu["triple"], cpu=cpu["cpu"],
                               simd=cpu["simd_bits"], upper=up, calls=calls),
             f"#ifndef HWC_{up}_H", f"#define HWC_{up}_H", "", "#include <stdint.h>", "",
             "#ifdef __cplusplus", 'extern "C" {', "#endif", "",
             f"#define {up}_ALIGNMENT {cpu['alignment']}",
             f"#define {up}_WEIGHTS_SIZE {sizes['weights']}",
             f"#define {up}_IO_SIZE {sizes['io']}",
             f"#define {up}_ACTIVATIONS_SIZE {sizes['activations']}",
             f"#define {up}_NUM_INPUTS {sum(s['kind'] == 'input' for s in io)}",
             f"#define {up}_NUM_OUTPUTS {sum(s['kind'] == 'output' for s in io)}", ""]
    for spec, stem in io_macros(io):
        dims = "x".join(map(str, spec["shape"])) or "scalar"
        n = spec["bytes"] // max(1, _itemsize(spec["dtype"]))
        lines += [f"/* {spec['kind']} {spec['name']!r}: {spec['dtype']}[{dims}] ({_CTYPE[spec['dtype']]}) */",
                  f"#define {up}_{stem}_OFFSET {spec['offset']}",
                  f"#define {up}_{stem}_SIZE {spec['bytes']}",
                  f"#define {up}_{stem}_COUNT {n}", ""]
    lines += ["/* Runs the model once: inputs from mutable_io, outputs to mutable_io. */",
              f"int {name}(const uint8_t *constant_weights, uint8_t *mutable_io, uint8_t *activations);", "",
              "#ifdef __cplusplus", "}", "#endif", f"#endif /* HWC_{up}_H */", ""]
    return "\n".join(lines)


def _itemsize(dtype: str) -> int:
    return {"float32": 4, "int8": 1, "uint8": 1, "int32": 4, "int64": 8, "bool": 1}[dtype]


MAIN_C = """\
/* Example caller of {name}() (generated by hwc): loads weights.bin, fills the inputs,
 * runs the model and prints (or writes) the outputs.
 *
 *   ./main [-w weights.bin] [-n RUNS] [input.bin [output.bin]]
 *
 * input.bin holds the inputs' bytes back to back in header order (each dense, in the
 * model's element type); without it the inputs are zero. output.bin receives the outputs
 * the same way. With -n RUNS the model runs that many times and the median time is printed.
 */
#define _POSIX_C_SOURCE 199309L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "model.h"

/* The activations are left uninitialized on purpose: the model must write before it reads
   (valgrind's memcheck would report anything else). */
static uint8_t *hwc_alloc_region(size_t size, int zero) {{
    size_t rounded = (size + {up}_ALIGNMENT - 1) / {up}_ALIGNMENT * {up}_ALIGNMENT;
    uint8_t *p = aligned_alloc({up}_ALIGNMENT, rounded ? rounded : {up}_ALIGNMENT);
    if (!p) {{ fprintf(stderr, "out of memory\\n"); exit(1); }}
    if (zero) memset(p, 0, rounded ? rounded : {up}_ALIGNMENT);
    return p;
}}

static int hwc_read_file(const char *path, uint8_t *dst, size_t size) {{
    FILE *f = fopen(path, "rb");
    if (!f) {{ fprintf(stderr, "cannot open %s\\n", path); return -1; }}
    size_t got = size ? fread(dst, 1, size, f) : 0;
    fclose(f);
    if (got != size) {{ fprintf(stderr, "%s: expected %zu bytes, got %zu\\n", path, size, got); return -1; }}
    return 0;
}}

static double hwc_now(void) {{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}}

static int hwc_cmp(const void *a, const void *b) {{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}}

/* The entry point, called from main through this wrapper (main's locals cannot shadow it). */
static int hwc_run(const uint8_t *hwc_w, uint8_t *hwc_io, uint8_t *hwc_act) {{
    return {name}(hwc_w, hwc_io, hwc_act);
}}

struct hwc_tensor {{ const char *name; size_t offset, size, count; int is_float; }};
static const struct hwc_tensor hwc_inputs[] = {{
{inputs}}};
static const struct hwc_tensor hwc_outputs[] = {{
{outputs}}};

int main(int argc, char **argv) {{
    const char *wpath = "weights.bin", *in = NULL, *out = NULL;
    int runs = 0;
    for (int i = 1; i < argc; i++) {{
        if (!strcmp(argv[i], "-w") && i + 1 < argc) wpath = argv[++i];
        else if (!strcmp(argv[i], "-n") && i + 1 < argc) runs = atoi(argv[++i]);
        else if (!in) in = argv[i];
        else out = argv[i];
    }}
    uint8_t *w = hwc_alloc_region({up}_WEIGHTS_SIZE, 0), *io = hwc_alloc_region({up}_IO_SIZE, 1);
    uint8_t *act = hwc_alloc_region({up}_ACTIVATIONS_SIZE, 0);
    if (hwc_read_file(wpath, w, {up}_WEIGHTS_SIZE)) return 1;
    if (in) {{
        FILE *f = fopen(in, "rb");
        if (!f) {{ fprintf(stderr, "cannot open %s\\n", in); return 1; }}
        for (size_t i = 0; i < {up}_NUM_INPUTS; i++)
            if (fread(io + hwc_inputs[i].offset, 1, hwc_inputs[i].size, f) != hwc_inputs[i].size) {{
                fprintf(stderr, "%s: too short for input %s\\n", in, hwc_inputs[i].name); return 1;
            }}
        fclose(f);
    }}
    int rc = hwc_run(w, io, act);
    if (rc != 0) {{ fprintf(stderr, "{name} returned %d\\n", rc); return 1; }}
    if (runs > 0) {{
        double *t = malloc(sizeof(double) * runs);
        for (int r = 0; r < runs; r++) {{ double t0 = hwc_now(); hwc_run(w, io, act); t[r] = hwc_now() - t0; }}
        qsort(t, runs, sizeof(double), hwc_cmp);
        printf("median of %d runs: %.2f us\\n", runs, t[runs / 2] * 1e6);
        free(t);
    }}
    for (size_t i = 0; i < {up}_NUM_OUTPUTS; i++) {{
        printf("%s:", hwc_outputs[i].name);
        for (size_t k = 0; k < hwc_outputs[i].count && k < 8; k++) {{
            if (hwc_outputs[i].is_float) printf(" %g", ((const float *)(io + hwc_outputs[i].offset))[k]);
            else printf(" %d", (int)((const int8_t *)(io + hwc_outputs[i].offset))[k]);
        }}
        printf("%s\\n", hwc_outputs[i].count > 8 ? " ..." : "");
    }}
    if (out) {{
        FILE *f = fopen(out, "wb");
        if (!f) {{ fprintf(stderr, "cannot write %s\\n", out); return 1; }}
        for (size_t i = 0; i < {up}_NUM_OUTPUTS; i++) fwrite(io + hwc_outputs[i].offset, 1, hwc_outputs[i].size, f);
        fclose(f);
    }}
    free(w); free(io); free(act);
    return 0;
}}
"""

MAKEFILE = """\
# Builds the example caller of {name}() (generated by hwc).
CC ?= gcc
CFLAGS ?= -O2 -std=c11 -Wall -Wextra

main: main.c model.o model.h
\t$(CC) $(CFLAGS) -o $@ main.c model.o

run: main
\t./main -n 100

clean:
\trm -f main

.PHONY: run clean
"""


def main_c(name: str, io: list[dict]) -> str:
    up = name.upper()

    def rows(kind):
        out = []
        for spec, stem in io_macros(io):
            if spec["kind"] == kind:
                out.append(f'    {{"{spec["name"]}", {up}_{stem}_OFFSET, {up}_{stem}_SIZE, {up}_{stem}_COUNT, '
                           f'{int(spec["dtype"] == "float32")}}},\n')
        return "".join(out) or '    {"", 0, 0, 0, 0},\n'
    return MAIN_C.format(name=name, up=up, inputs=rows("input"), outputs=rows("output"))


def makefile(name: str) -> str:
    return MAKEFILE.format(name=name)


def bundle_files(name: str, model: str, io: list[dict], sizes: dict, cpu: dict, obj: bytes,
                 weights: bytes) -> dict[str, bytes]:
    """Every file of the bundle, by name."""
    return {
        "model.o": obj,
        "weights.bin": weights,
        "model.h": header(name, model, io, sizes, cpu, undefined_symbols(obj)).encode(),
        "main.c": main_c(name, io).encode(),
        "Makefile": makefile(name).encode(),
    }
