"""`hwc build MODEL --target tile8x8`: the int8 graph scheduled onto the tile.

The artifact holds the int8 graph (the host part runs in the int8 reference), the tile
program and DRAM image, and everything needed to run it in the Python tile model (fast,
the default) or in the RTL (cocotb + Icarus), with the exact same inputs and outputs.
"""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path

import numpy as np

from hwc import isa
from hwc.artifact import Artifact, register
from hwc.errors import UnsupportedError, UserError
from hwc.ir.graph import Graph
from hwc.ir.serialize import load_graph, save_graph
from hwc.ref.interp import run_graph, run_node
from hwc.tile import host
from hwc.tile.bands import fit_act, recomputed_macs
from hwc.tile.codegen import Codegen, TileProgram
from hwc.tile.layers import (
    HOST_COPIES,
    VIEWED,
    TilePlan,
    copy_plan,
    dw_post_flat,
    host_im2col,
    im2col_first_layer,
    im2row_first_layer,
    partition,
    space_to_depth,
    windows_first_layer,
)
from hwc.tile.views import host_sources, host_work, row_views


def schedule(g: Graph, target: dict, *, im2col: bool = True, stack: bool = True, double_buffer: bool = True,
             pin: list[dict] | None = None, jobs: int | None = None, cache: dict | None = None,
             sources: bool = True) -> list[tuple[TilePlan, TileProgram, dict]]:
    """Partition the int8 graph and generate one tile program per tile segment, with the choices made
    (im2col, tiling and load policies: `pin`, a previous build's report["schedule"], repeats them: an
    ablation then changes one thing only). A thin first layer is built both with and without the host
    im2col (it fills more lanes but loads a bigger input), and stacked tensors with and without shifted
    alignments (`layers.space_to_depth`): the cycle model keeps the fastest. The candidates are generated
    and timed in `jobs` processes (`search_jobs`); the result does not depend on it.

    Segment k's data and program follow segment k-1's in external memory (one address space), after the host
    tensors whose row bands the segments read in place (`views.host_sources`, with `sources`; where no segment
    reads one in place, e.g. its bands take the host im2col, the build is scheduled again without). `cache`: a dict
    kept across calls on rewrites of one graph (`bands.fit_act`): a segment the same as one scheduled before (its
    layers, tensors, DRAM base and pin) is not scheduled again."""
    n = target["array"]["rows"]
    out = []
    base = 0
    plans = partition(g, n)
    # in external memory before the segments (`views.row_views`): the host tensors whose row bands the tile reads
    # in place (written once by the host, first in memory), then each segment's outputs
    stored: dict[str, dict] = {}
    for name, d in (host_sources(g, plans, n) if sources else {}).items():
        stored[name] = dict(d, dram=base)
        base += -(-host.packed_bytes(d["c"], d["h"], d["w"], n) // 64) * 64
    for k, plan in enumerate(plans):
        fixed = pin[k] if pin and k < len(pin) else None
        plan.views = row_views(g, plan.inputs, stored)
        key = _segment_key(plan, base, fixed, im2col, stack, double_buffer) if cache is not None else None
        if key in (cache or {}):
            done, prog, choice = cache[key]
            out.append((dataclasses.replace(done, graph=g, pre=plan.pre, post=plan.post, decisions=plan.decisions),
                        prog, choice))
        else:
            out.append(_schedule_segment(plan, target, fixed, im2col, stack, double_buffer, base, jobs))
            if cache is not None:
                cache[key] = out[-1]
        done, prog = out[-1][:2]
        stored.update({name: {"dram": prog.outputs[name], "c": done.tensors[name].c, "h": done.tensors[name].h,
                              "w": done.tensors[name].w, "s2d": done.tensors[name].s2d} for name in done.outputs})
        end = host.program_offset(prog.dram_bytes) + len(prog.program) * isa.INSN_BYTES
        base = -(-end // 64) * 64
    made = {name for plan in plans for name in plan.outputs}
    read = {p.src for _, prog, _ in out for pieces in prog.views.values() for p in pieces}
    if any(name not in made and name not in read for name in stored):   # (a host tensor no segment reads)
        return schedule(g, target, im2col=im2col, stack=stack, double_buffer=double_buffer, pin=pin, jobs=jobs,
                        cache=cache, sources=False)
    return out


def _schedule_segment(plan: TilePlan, target: dict, fixed, im2col: bool, stack: bool, double_buffer: bool,
                      base: int, jobs) -> tuple[TilePlan, TileProgram, dict]:
    """One segment's (plan as laid out, program, choices): the fastest of its variants (`schedule`)."""
    n = target["array"]["rows"]
    starts = []   # (plan with stacking applied, im2col, shift tried, flat): the variants, in order of preference
    # flat: with features.dw_post, the inputs of depthwise layers PPU.dw could take laid out for it
    # (`layers.dw_post_flat`), which may unstack the layers around them too: all of them (True), or only those
    # of N channels ("blocks"; the thinner ones stacked, for PPU.dwf), beside the default stacking
    pairs, only_pairs = dw_post_flat(plan, target) if stack else ({}, frozenset())
    mids = frozenset(pairs) - only_pairs
    blocks = frozenset(m for m in mids if plan.tensors[m].c == n)
    # (and thin ones of a stride-2 depthwise layer, which PPU.dwf does not take stacked, padded to N channels)
    thin2 = frozenset(m for m in mids if plan.tensors[m].c < n and (pairs[m].plain or pairs[m]).strides == (2, 2))
    # ("pairs": those thin ones stacked, their blocks of two pixels written in pixel order, PPU.dwf = 1; rows of
    # up to twice the row buffers' positions)
    halves = frozenset(m for m in thin2 | only_pairs if 2 * plan.tensors[m].c == n)
    flats = [(False, frozenset(), frozenset(), frozenset()), (True, mids, frozenset(), frozenset()),
             ("blocks", blocks | thin2, thin2, frozenset()), ("pairs", blocks | halves, frozenset(), halves)]
    flats = [x for x in flats if x[0] is False or (x[1] and (x[0] != "pairs" or halves))]
    if fixed is not None:
        flats = [next((x for x in flats if x[0] == fixed.get("flat", False)), flats[0])]
    # expand: the host im2col of a thin first layer (True), of its rows into stacked outputs ("rows"), of a 1-d
    # signal into windows ("windows"), or none
    for expand in ([True, "rows", "windows", False] if im2col else [False]):
        if fixed is not None and expand != fixed["im2col"]:
            continue
        start = copy_plan(plan)
        if expand is True and not im2col_first_layer(start, n, target["scratchpad"]["act_lines"]):
            continue  # no thin first layer to expand
        if expand == "windows" and not windows_first_layer(start, n, target["scratchpad"]["act_lines"]):
            continue  # no strided 1-d first layer wider than a line's window
        if expand == "rows" and not stack:
            continue
        layouts = set()
        for flat_kind, flat, padded, loose, keep in _with_views(flats, start, stack, fixed):
            for shift in ([fixed.get("shift", False)] if fixed is not None else [True, False]):
                p = copy_plan(start)
                if stack:
                    space_to_depth(p, n, shift=shift, flat=flat, padded=padded, loose=loose, keep=keep)
                if expand == "rows" and not im2row_first_layer(p, start, n, target["scratchpad"]["act_lines"]):
                    continue  # no thin first layer with a stacked output
                layout = (tuple((name, t.s2d, t.shift, t.c) for name, t in sorted(p.tensors.items())),
                          tuple(getattr(layer, "plain", None) is None for layer in p.layers))
                if layout in layouts:
                    break  # the same build as one already tried (nothing to shift, or nothing kept flat)
                layouts.add(layout)
                used = any(t.shift for t in p.tensors.values())
                starts.append((p, expand, shift, used, flat_kind, bool(keep)))
                if not used:
                    break  # nothing to shift: the other build is the same
    variants = []
    for (_, expand, shift, used, flat, keep), found in zip(starts, _search(starts, target, double_buffer, base,
                                                                           fixed, jobs)):
        if isinstance(found, UnsupportedError):
            if not variants and not expand and not shift and not flat and not keep:
                raise found
            continue
        variants += [(c, bp, prog, dict(choice, shift=used, flat=flat, **({"keep": True} if keep else {})))
                     for c, bp, prog, choice in found]
    if not variants:  # a pinned im2col that does not apply here
        p = copy_plan(plan)
        if stack:
            space_to_depth(p, n, shift=bool(fixed and fixed.get("shift")), flat=flats[0][1], padded=flats[0][2],
                       loose=flats[0][3])
        used = any(t.shift for t in p.tensors.values())
        variants += [(c, bp, prog, dict(choice, shift=used, flat=flats[0][0]))
                     for c, bp, prog, choice in _programs(p, target, double_buffer, base, fixed)]
    _, plan, prog, choice = _pick(variants)
    if isinstance(prog.program, bytes):  # (from a worker process)
        prog = dataclasses.replace(prog, program=isa.from_bytes(prog.program))
    kinds = {how.get("kind", True) for how in plan.im2col.values()}
    return plan, prog, dict(choice, im2col=next((k for k in ("rows", "windows") if k in kinds), bool(kinds)))


def _with_views(flats: list[tuple], plan: TilePlan, stack: bool, fixed) -> list[tuple]:
    """The stacking variants (`flats`), each also with the inputs an earlier segment stored one pixel per line
    kept so (`space_to_depth(keep=)`): then the tile reads them where they are (`hwc.tile.views`) instead of the
    host writing them again (a variant where keeping changes nothing is the same layout as one tried already:
    `_schedule_segment` skips it). (flat kind, flat, padded, loose, keep) each."""
    out = [(*x, frozenset()) for x in flats]
    keep = frozenset(name for name, pieces in plan.views.items()   # (an input the host im2col expands is no more)
                     if name in plan.inputs and pieces[0].layout == (plan.tensors[name].c, plan.tensors[name].w, 1))
    if not stack or not keep or (fixed is not None and not fixed.get("keep")):   # (pinned: as the build it repeats)
        return out
    return ([] if fixed is not None else out) + [(*x, keep) for x in flats]


def _segment_key(plan: TilePlan, base: int, fixed, *flags) -> str:
    """What a segment's schedule depends on besides the target: its layers (names, kinds, windows, the tensors they
    read and write: a band's node keeps its name across rewrites, its rows and pads change), its tensors' shapes
    and zero points, its inputs and outputs, its DRAM base and pin (weights: by node name, unchanged by rewrites)."""
    layers = [(type(x).__name__, x.name, getattr(x, "src", None), getattr(x, "a", None), x.dst,
               getattr(x, "strides", None), getattr(x, "pads", None), getattr(x, "kernel", None))
              for x in plan.layers]
    tensors = sorted((t.name, t.c, t.h, t.w, t.zp, tuple(t.graph_shape)) for t in plan.tensors.values())
    return repr((layers, tensors, plan.inputs, plan.outputs, sorted(plan.aliases.items()), sorted(plan.views.items()),
                 base, fixed, flags))


#: The candidate search runs in worker processes for a segment of at least this many ideal cycles (MACs / array
#: size; ResNet-8 on tile8x8: 195k cycles, 3.4 -> 2.1 s; DS-CNN on tile32x32: 2.6k, 0.17 s either way).
PARALLEL_MIN_CYCLES = 20_000


def search_jobs(jobs: int | None = None) -> int:
    """Processes for the candidate search: `jobs`, else $HWC_JOBS, else the CPUs this process may use. Forked
    workers only (Linux), and only from a process with one thread (forking a threaded process can deadlock) that
    is not itself a daemonic worker (e.g. of a multiprocessing.Pool, which may not start processes)."""
    import multiprocessing
    import os
    import threading

    if jobs is None:
        env = os.environ.get("HWC_JOBS", "").strip()
        if env and not (env.isdigit() and int(env) > 0):
            raise UserError(f"HWC_JOBS={env!r} is not a number of processes: set it to a positive whole number "
                            f"(1 keeps the tile scheduler's candidate search in one process) or unset it.")
        cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
        jobs = int(env) if env else cpus
    if jobs > 1 and ("fork" not in multiprocessing.get_all_start_methods() or threading.active_count() > 1
                     or multiprocessing.current_process().daemon):
        return 1
    return max(1, jobs)


def _search(starts: list[tuple], target: dict, double_buffer: bool, base: int, fixed: dict | None,
            jobs: int | None) -> list:
    """`_programs` of every variant, in order: a list of candidates or the UnsupportedError it raised. With
    more than one job the (variant, tiling policy) pairs run in forked worker processes."""
    policies = _policies(target, fixed)
    tasks = [(p, pol) for p, *_ in starts for pol in policies]
    small = starts and sum(layer.macs for layer in starts[0][0].layers) < \
        PARALLEL_MIN_CYCLES * target["array"]["rows"] * target["array"]["cols"]
    n_jobs = search_jobs(jobs)   # (which also checks $HWC_JOBS)
    if small and jobs is None:   # a small model, unless asked: starting the workers costs more than they save
        n_jobs = 1
    jobs = min(n_jobs, len(tasks))
    args = [(p, target, double_buffer, base, fixed, pol) for p, pol in tasks]
    if jobs <= 1:
        results = [_policy_task(a) for a in args]
    else:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        with ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("fork")) as pool:
            results = list(pool.map(_policy_task, args, [True] * len(args)))
    out = []
    for k in range(len(starts)):
        mine = results[k * len(policies):(k + 1) * len(policies)]
        err = next((r for r in mine if isinstance(r, UnsupportedError)), None)
        out.append(err if err is not None else [c for r in mine for c in r])
    return out


def _policy_task(args: tuple, packed: bool = False):
    """One (variant, tiling policy) pair of the search: its candidates, or the UnsupportedError it raised.
    `packed` (a worker's answer): each program as its bytes, which pickle 10x faster than the instructions."""
    plan, target, double_buffer, base, fixed, policy = args
    try:
        found = _programs(plan, target, double_buffer, base, fixed, policies=(policy,))
    except UnsupportedError as e:
        return e
    if packed:
        found = [(c, p, dataclasses.replace(prog, program=isa.to_bytes(prog.program)), choice)
                 for c, p, prog, choice in found]
    return found


def _timed(target: dict, prog: TileProgram, base: int):
    """The program in the tile model (timing does not depend on the data): its Result."""
    from hwc.sim.model import TileModel

    program = isa.to_bytes(prog.program)
    po = host.program_offset(prog.dram_bytes)   # (data=False reads the program only: no constants copied in)
    res = TileModel(target).run(program, bytearray(po + len(program)), po // isa.INSN_BYTES, data=False)
    if res.error:   # (a candidate's cycles up to an error would look fast)
        raise AssertionError(f"scheduler produced an invalid program: {res.error.name} at {res.error_pc}")
    return res


#: The `prefetch` candidate is tried when the fastest one's array waits for weight LOADs at least this share of its
#: cycles (it saves at most that): MobileNetV1-0.25 tile32x32 8%, the FC autoencoder on tile8x8 25%; not tried on
#: ResNet-8, DS-CNN and MobileNet on tile8x8 (0.4-0.8%, where it gained nothing and took a fifth of the build).
PREFETCH_MIN_SHARE = 0.01


def _weight_stalls(program: list, res) -> int:
    """Cycles the array waits before GEMMs that wait for a weight LOAD (the last LOAD before them), by `res`."""
    stalls, last, end = 0, None, 0
    for k, i in enumerate(program):
        if i.op == isa.Op.LOAD:
            last = i
        elif i.op == isa.Op.GEMM:
            if i.wait & isa.Wait.LOAD and last is not None and last.get("mem") == isa.Mem.WGT:
                stalls += max(0, int(res.start[k]) - end)
            end = int(res.start[k]) + i.get("n_outer") * i.get("n_inner")
    return stalls


def _policies(target: dict, fixed: dict | None) -> tuple[str, ...]:
    """The pixel-tiling policies the search tries: all three with a post-processing unit (or the pinned one)."""
    policies = ("cost", "quarter", "max") if target["features"]["post_unit"] else ("cost",)
    return tuple(p for p in policies if fixed is None or p == fixed["tiling"])


#: The first weight group in pieces is tried when its load is at least this share of the fastest candidate's
#: cycles (it saves at most that load; ResNet-8 and MobileNet on tile8x8: 0.07% and 0.04%, not tried).
SPLIT_MIN_SHARE = 0.005


def _programs(plan: TilePlan, target: dict, double_buffer: bool, base: int, fixed: dict | None = None,
              policies: tuple[str, ...] | None = None) -> list:
    """Generate the segment's candidate programs: with a post-processing unit, each pixel-tiling policy with
    both LOAD placements (and with bus-bound weight groups grown, `bus_groups`, where there are any), and the
    faster of those with the first weight group loaded in pieces (`split`, Codegen.finalize), then the fastest
    with later groups' weights prefetched by its timeline (`prefetch`, where its array waits for weights), all
    timed by the cycle model (it runs a program in a fraction of a second; `schedule` keeps one, `_pick`).
    `fixed`: the policies to use instead; `policies`: only these tiling policies.
    Returns [(cycles, plan, program, choice)]."""
    found, timed = [], {}
    made = {}   # id(program) -> the (bus_groups, fuse_pools, col_chunks) of the Codegen that made it (`gens`)

    def cycles(prog):
        timed[id(prog)] = _timed(target, prog, base)
        return timed[id(prog)].cycles

    for policy in (policies if policies is not None else _policies(target, fixed)):
        mine, gens = [], {}
        # bus_groups: weight groups behind a bus-bound one grown (Codegen.weighted), tried when some group is
        # (MobileNet tile32x32's tail is, and it is faster without; the FC autoencoder faster with).
        # fuse_pools: max pools run during the conv before them (Codegen._fusable_pools), tried both ways where
        # there are any (small layers can be slower fused: the VECs then delay the next layer's GEMMs)
        # col_chunks: a one-row input of a folded conv loads in column chunks (Codegen.in_cols), tried both ways
        # where there is one (the chunks share ACT's second port with POST: slower where that port is the bottleneck)
        for fuse, cols in ([(fixed.get("fuse_pools", True), fixed.get("col_chunks", True))] if fixed is not None
                           else [(True, True), (False, True), (True, False), (False, False)]):
            for bus in ([fixed.get("bus_groups", False)] if fixed is not None else [False, True]):
                if bus and (False, fuse, cols) in gens and not gens[False, fuse, cols][0].bus_bound:
                    continue
                if not fuse and (bus, True, cols) in gens and not gens[bus, True, cols][0].fused_pools:
                    continue   # (no pool to fuse: the same program)
                if not cols and fixed is None and (bus, fuse, True) not in gens:
                    continue   # (the program it would differ from was not built)
                if not cols and fixed is None and not gens[bus, fuse, True][0].in_cols:
                    continue   # (no one-row input in column chunks: the same program)
                p = copy_plan(plan)
                cg = Codegen(p, target, double_buffer=double_buffer, dram_base=base, tiling=policy, bus_groups=bus,
                             fuse_pools=fuse, col_chunks=cols)
                gens[bus, fuse, cols] = cg, p
                eager = cg.run()
                for loads in ("eager", "paced"):
                    if fixed is not None and loads != fixed["loads"]:
                        continue
                    prog = eager if loads == "eager" else cg.refinalize(loads)
                    made[id(prog)] = bus, fuse, cols
                    mine.append((cycles(prog), p, prog, {"tiling": policy, "loads": loads, "split": False,
                                                         "bus_groups": bus, "prefetch": False,
                                                         "fuse_pools": bool(fuse and cg.fused_pools),
                                                         "col_chunks": bool(cg.in_cols)}))
        # the fastest, and the fastest of the other input chunking (column chunks change when the first weights are
        # needed: the first weight group in pieces may pay on either), each with the first weight group in pieces
        heads = [min((c for c in mine if c[3]["col_chunks"] == k), key=lambda c: c[0])
                 for k in {c[3]["col_chunks"] for c in mine}]
        splits = []
        for best in sorted(heads, key=lambda c: c[0]):
            cg, p = gens[made[id(best[2])]]
            first = next((i for i in best[2].program if i.op == isa.Op.LOAD and i.get("mem") == isa.Mem.WGT), None)
            # (splitting saves at most the first group's load: not tried when that is a small share of the run)
            pinned = fixed is not None and fixed.get("split")
            if pinned or (fixed is None and first is not None
                          and first.get("rows") * first.get("row_beats") >= SPLIT_MIN_SHARE * best[0]):
                prog = cg.refinalize(best[3]["loads"], split=True)
                made[id(prog)] = made[id(best[2])]
                if prog.program != best[2].program:   # (a single piece: the same program)
                    splits.append((cycles(prog), p, prog, dict(best[3], split=True)))
        if splits:
            mine = splits if fixed is not None else [*mine, *splits]
        if double_buffer and (fixed is None or fixed.get("prefetch")):
            # the fastest again, with later groups' weights prefetched where its LOAD unit idles (finalize), where
            # its array waits for weights long enough to matter (or pinned)
            c0, p, prog0, choice = min(mine, key=lambda c: c[0])
            res = timed[id(prog0)]
            if fixed is not None or _weight_stalls(prog0.program, res) >= PREFETCH_MIN_SHARE * c0:
                prog = gens[made[id(prog0)]][0].refinalize(choice["loads"], choice["split"], (prog0, res.issue))
                if prog.program != prog0.program:
                    pre = (cycles(prog), p, prog, dict(choice, prefetch=True))
                    mine = [pre] if fixed is not None else [*mine, pre]
        found += mine
    return found


#: Candidates within this share of the fastest count as equally fast: the one with the fewest instructions is
#: kept (each is 16 bytes fetched from external memory: 2.6 nJ at the default energy prices, the MAC energy of
#: about 180 cycles of tile8x8). ResNet-8 on tile8x8: "quarter" is 0.76% faster than "max" with 6.4x the
#: program (9,165 against 1,436 instructions), 65.3 against 44.5 uJ per inference; at 0.5% it was kept.
SAME_SPEED = 0.01


#: Programs within this share of the smallest count as equally small: the fastest of them is kept (DS-CNN on
#: tile8x8: the first weight group in pieces, 5 more instructions (0.8%), 87 cycles fewer).
SAME_SIZE = 0.01


def _pick(candidates: list[tuple]):
    """(cycles, plan, program, choice) candidates -> the fastest, or among those within SAME_SPEED of it (and of
    those, the ones with the fewest input beats the host writes) the smallest program (the fastest of those within
    SAME_SIZE of the smallest)."""
    fastest = min(c[0] for c in candidates)
    near = [c for c in candidates if c[0] <= fastest * (1 + SAME_SPEED)]
    least = min(_host_beats(c[1], c[2]) for c in near)   # (the host's work between segments first)
    near = [c for c in near if _host_beats(c[1], c[2]) == least]
    smallest = min(len(c[2].program) for c in near)
    small = [c for c in near if len(c[2].program) <= smallest * (1 + SAME_SIZE)]
    return min(small, key=lambda c: (c[0], len(c[2].program)))


def _host_beats(plan: TilePlan, prog: TileProgram) -> int:
    """Beats (lines) of the segment's inputs the host writes (those the tile reads where they already are in
    external memory cost the host nothing)."""
    return sum(plan.tensors[name].cb * plan.tensors[name].h * plan.tensors[name].w for name in plan.inputs
               if name not in prog.views)


def tile_outputs(ios: list[dict]) -> set[str]:
    """The tile segments' outputs (`tile_io` of each): in external memory where the tile stored them."""
    return {t["name"] for io in ios for t in io["outputs"]}


def tile_io(plan: TilePlan, prog: TileProgram) -> dict:
    """What the host needs to drive the tile (kept in model.json)."""
    def desc(name, dram):
        t = plan.tensors[name]
        return {"name": name, "c": t.c, "h": t.h, "w": t.w, "dram": dram, "shape": list(t.graph_shape),
                "zero_point": t.zp, "s2d": t.s2d}

    views: dict[str, list[str]] = {}
    for v, base in plan.aliases.items():
        views.setdefault(base, []).append(v)
    return {
        "pre": [n.name for n in plan.pre],
        "post": [n.name for n in plan.post],
        # (an input the tile reads where earlier segments stored it: its rows' pieces, no DRAM region of its own)
        "inputs": [dict(desc(n, prog.inputs.get(n)), im2col=plan.im2col.get(n),
                        **({"view": [dataclasses.asdict(p) for p in prog.views[n]]} if n in prog.views else {}))
                   for n in plan.inputs],
        "outputs": [dict(desc(n, prog.outputs[n]), views=sorted(views.get(n, []))) for n in plan.outputs],
        # every view (a free Reshape/Identity the segment holds), also of a tensor the host wrote
        "aliases": dict(sorted(plan.aliases.items())),
        "dram_base": prog.dram_regions[0]["offset"],
        "io_end": prog.dram_bytes,
        "prog_offset": host.program_offset(prog.dram_bytes),
        "instructions": len(prog.program),
    }


@register("tile")
class TileArtifact(Artifact):
    engines = ("auto", "model", "reference", "rtl")

    def __init__(self, target, graph, report=None, info=None, *, program: bytes = b"", const: bytes = b"",
                 memory_map: dict | None = None, tile_v: str | None = None):
        super().__init__(target, graph, report, info)
        self.program = program
        self.const = const
        self.memory_map = memory_map or {}
        self.tile_v = tile_v
        self.last_run: dict = {}

    # ---- running -----------------------------------------------------------------------------
    def _run_one(self, feeds, engine):
        """Host nodes and tile segments in order; every segment's program runs on the same memory image."""
        if engine == "reference":
            return run_graph(self.graph, feeds)
        segments = self.info["tile"]["segments"]
        n = self.target["array"]["rows"]
        env = self._host_env(feeds, [])
        mem = self.memory_image()
        total = 0
        t0 = time.perf_counter()
        written = tile_outputs(segments)   # (host sources written, and the tile's outputs: never the host's)
        for k, io in enumerate(segments):
            self._host_run(env, io["pre"])
            for t in io["inputs"]:   # host tensors the tile reads rows of in place (`views.host_sources`): once
                for p in t.get("view", ()):
                    if p["src"] in env and p["src"] not in written:
                        c, w, s2d = p["layout"]
                        data = host.pack(host.stack_pixels(env[p["src"]], s2d), c, p["pitch"], w, n)
                        mem[p["dram"]:p["dram"] + len(data)] = data
                        written.add(p["src"])
            for t in io["inputs"]:
                if t.get("view"):   # (the tile reads its rows where an earlier segment stored them)
                    continue
                src = t["im2col"]["src"] if t.get("im2col") else t["name"]
                x = env[src]
                if t.get("im2col"):
                    x = host_im2col(x, t["im2col"])
                x = host.stack_pixels(x, t["s2d"])
                data = host.pack(x, t["c"], t["h"], t["w"], n)
                mem[t["dram"]:t["dram"] + len(data)] = data
            if engine == "rtl":
                mem, cycles = self._run_rtl(mem, io, self.vcd_path(k))
            else:
                mem, cycles = self._run_model(mem, io)
            total += cycles
            for t in io["outputs"]:
                if not t.get("host", True):   # (only later segments' LOADs read it)
                    continue
                nbytes = host.packed_bytes(t["c"], t["h"], t["w"], n)
                y = host.unpack(bytes(mem[t["dram"]:t["dram"] + nbytes]), t["c"], t["h"], t["w"], n,
                                tuple(t["shape"]), t["s2d"])
                env[t["name"]] = y
                for v in t["views"]:
                    env[v] = y.reshape(self.graph.type(v).shape)
            for v, base in io.get("aliases", {}).items():   # (e.g. an output that is an Identity of an input)
                if v not in env and base in env:
                    env[v] = env[base].reshape(self.graph.type(v).shape)
            self._host_run(env, io["post"])
        self.last_run = {"engine": engine, "cycles": total, "seconds": time.perf_counter() - t0,
                         "segments": len(segments)}
        return {o: env[o] for o in self.graph.outputs}

    def memory_image(self) -> bytearray:
        """External memory before a run: each segment's constants and program at their addresses."""
        segs = self.info["tile"]["segments"]
        mem = bytearray(max(io["prog_offset"] + io["instructions"] * isa.INSN_BYTES for io in segs))
        for io in segs:
            c0, c1 = io["const_range"]
            p0, p1 = io["program_range"]
            mem[io["dram_base"]:io["dram_base"] + c1 - c0] = self.const[c0:c1]
            mem[io["prog_offset"]:io["prog_offset"] + p1 - p0] = self.program[p0:p1]
        return mem

    def _host_env(self, feeds, pre_names):
        env = {v.name: v.data for v in self.graph.values.values() if v.is_const}
        env.update(feeds)
        self._host_run(env, pre_names)
        return env

    def _host_run(self, env, names):
        """Run graph nodes on the host (the int8 reference interpreter), in order."""
        nodes = {nd.name: nd for nd in self.graph.nodes}
        for name in names:
            nd = nodes[name]
            for o, y in zip(nd.outputs, run_node(nd, [env[i] if i else None for i in nd.inputs])):
                env[o] = np.asarray(y).astype(self.graph.type(o).np_dtype, copy=False)

    def _run_model(self, mem: bytearray, io: dict):
        from hwc.sim.model import TileModel

        res = TileModel(self.target).run(None, mem, io["prog_offset"] // isa.INSN_BYTES)
        if res.error:
            raise UserError(f"the tile stopped with error {res.error.name} at instruction {res.error_pc}: "
                            f"the program is invalid for target {self.target['name']!r} (a bug in the scheduler)")
        self.last_model = res
        return mem, res.cycles

    def vcd_path(self, segment: int) -> str | None:
        """The waveform file of a segment's RTL run (`vcd` set by `hwc sim --vcd`): FILE itself for a one-segment
        artifact, else FILE with .segK before its suffix, one per segment (each segment is a run of its own)."""
        vcd = getattr(self, "vcd", None)
        if vcd is None or len(self.info["tile"]["segments"]) == 1:
            return vcd
        p = Path(vcd)
        return str(p.with_name(f"{p.stem}.seg{segment}{p.suffix}"))

    def _run_rtl(self, mem: bytearray, io: dict, vcd: str | None = None):
        from hwc.sim.rtl import run_rtl

        if not self.tile_v:
            raise UserError("this artifact has no tile.v to simulate (it was built with --no-hdl); rebuild it with "
                            "`hwc build` without --no-hdl.")
        out_regions = [(t["dram"], host.packed_bytes(t["c"], t["h"], t["w"], self.target["array"]["rows"]))
                       for t in io["outputs"]]
        return run_rtl(self.target, self.tile_v, b"", bytes(mem), io["prog_offset"] // isa.INSN_BYTES, out_regions,
                       vcd=vcd)

    # ---- files -------------------------------------------------------------------------------
    def _write(self, folder: Path) -> None:
        save_graph(self.graph, folder)
        (folder / "program.bin").write_bytes(self.program)
        (folder / "weights.bin").write_bytes(self.const)
        (folder / "memory_map.json").write_text(json.dumps(self.memory_map, indent=1, sort_keys=True) + "\n")
        if self.tile_v is not None:
            (folder / "tile.v").write_text(self.tile_v)

    @classmethod
    def _read(cls, folder: Path, model: dict) -> TileArtifact:
        report = json.loads((folder / "report.json").read_text())
        info = {k: v for k, v in model.items() if k not in ("hwc_version", "kind", "target", "inputs", "outputs")}
        tv = folder / "tile.v"
        program, const = (folder / "program.bin").read_bytes(), (folder / "weights.bin").read_bytes()
        segs = info["tile"]["segments"]
        for name, data, key in (("program.bin", program, "program_range"), ("weights.bin", const, "const_range")):
            want = max(io[key][1] for io in segs)
            if len(data) != want:   # (truncated or from another build)
                raise ValueError(f"{name} has {len(data):,} bytes, model.json describes {want:,}")
        return cls(model["target"], load_graph(folder), report, info, program=program, const=const,
                   memory_map=json.loads((folder / "memory_map.json").read_text()),
                   tile_v=tv.read_text() if tv.is_file() else None)


def _explicit_ceil_pads(graph: Graph) -> Graph:
    """MaxPool with ceil_mode -> the same max pool with the end pads its last windows reach (a copy of the graph
    when there is one): the windows past the input hold no pixel in both, so the outputs are equal, and the tile
    schedules explicit pads only (a max pool's edge windows run over the pixels inside)."""
    from hwc.ir.ops import conv_out_dim

    if not any(n.op == "MaxPool" and n.attrs.get("ceil_mode") for n in graph.nodes):
        return graph
    graph = graph.copy()
    for n in graph.nodes:
        a = n.attrs
        if n.op != "MaxPool" or not a.get("ceil_mode"):
            continue
        sizes = graph.type(n.inputs[0]).shape[2:]
        k, s, d, p = a["kernel_shape"], a["strides"], a["dilations"], a["pads"]
        nd = len(sizes)
        pads = list(p)
        for i in range(nd):
            out = conv_out_dim(sizes[i], k[i], s[i], d[i], p[i], p[i + nd], True)
            pads[i + nd] = (out - 1) * s[i] + (k[i] - 1) * d[i] + 1 - sizes[i] - p[i]
        a["pads"], a["ceil_mode"] = pads, 0
    return graph


def build_tile(graph: Graph, target: dict, *, hdl: bool = True, im2col: bool = True, stack: bool = True,
               double_buffer: bool = True, pin: list[dict] | None = None, hdl_job=None) -> TileArtifact:
    """Schedule an int8 graph for a tile target, measure it in the Python tile model, and
    package program, DRAM image, memory map, report and (with `hdl`) the tile's Verilog.
    `pin`: a previous build's report["schedule"] (its choices, repeated; see `schedule`). `hdl_job`: the
    process converting tile.v into the cache meanwhile (hwc.hw.hdl_cache.convert_in_background)."""
    from hwc.report.data import add_tile_data
    from hwc.sim.model import TileModel
    from hwc.tile.report import merge_reports, tile_report

    graph = _explicit_ceil_pads(graph)
    # activations larger than ACT: the graph rewritten into row bands and cut segments (hwc.tile.bands)
    source = graph
    cache: dict = {}   # (segments unchanged by a rewrite are not scheduled again)
    graph, segments, fit = fit_act(graph, target, lambda g: schedule(g, target, im2col=im2col, stack=stack,
                                                                     double_buffer=double_buffer, pin=pin,
                                                                     cache=cache))
    ios, programs, consts, reports, memory_maps = [], [], [], [], []
    for plan, prog, _ in segments:
        io = tile_io(plan, prog)
        program = isa.to_bytes(prog.program)
        const = bytes(prog.dram)
        io["program_range"] = [sum(map(len, programs)), sum(map(len, programs)) + len(program)]
        io["const_range"] = [sum(map(len, consts)), sum(map(len, consts)) + len(const)]
        # Timing does not depend on the data: one run on zero inputs gives the cycle counts.
        mem = bytearray(io["prog_offset"] + len(program))
        mem[io["dram_base"]:io["dram_base"] + len(const)] = const
        res = TileModel(target).run(program, mem, io["prog_offset"] // isa.INSN_BYTES)
        if res.error:
            raise AssertionError(f"scheduler produced an invalid program: {res.error.name} at {res.error_pc}")
        report = tile_report(target, plan, prog, res)
        add_tile_data(report, target, plan, prog, res)  # per-layer events, timeline, ACT buffers (hwc/report)
        ios.append(io)
        programs.append(program)
        consts.append(const)
        reports.append(report)
        memory_maps.append(_memory_map(target, plan, prog, io, len(program)))
    # the host's work: nodes whose outputs only tile LOADs read in external memory (row views) have none
    work, read = host_work(graph, ios)
    for io in ios:
        io["pre"] = [x for x in io["pre"] if x in work]
        io["post"] = [x for x in io["post"] if x in work]
        for t in io["outputs"]:
            t["host"] = bool({t["name"], *t["views"]} & read)
    report = merge_reports(reports, target["array"]["rows"] * target["array"]["cols"])
    viewed = {nd.name for nd in graph.nodes if nd.name not in work} - {
        d["node"] for d in report["partition"] if d["where"] == "tile"}
    for d in report["partition"]:
        if d["node"] in viewed:
            d.update(where="dram", why=d["why"].removesuffix(HOST_COPIES) + VIEWED)
    program, const = b"".join(programs), b"".join(consts)
    report["weights_bytes"] = len(const)
    report["nodes"] = len(graph.nodes)
    report["segments"] = len(segments)
    report["schedule"] = [choice for _, _, choice in segments]
    report["act_fit"] = fit.as_report()
    extra = recomputed_macs(source, graph)
    if extra:   # (utilization counts the model's MACs: the bands' halo rows computed twice are not the model's)
        report["act_fit"]["macs_recomputed"] = extra
        report["macs"] -= extra
        report["utilization"] = report["macs"] / (target["array"]["rows"] * target["array"]["cols"] * report["cycles"])
    memory_map = memory_maps[0] if len(memory_maps) == 1 else {
        "dram": [r for mm in memory_maps for r in mm["dram"]],
        "act": [dict(b, segment=k) for k, mm in enumerate(memory_maps) for b in mm["act"]],
        "wgt": memory_maps[0]["wgt"],
        "param": {"entries_used": max(mm["param"]["entries_used"] for mm in memory_maps),
                  "entries": memory_maps[0]["param"]["entries"]},
    }
    # (the host tensors the segments read rows of in place, `views.host_sources`: first in memory)
    made = tile_outputs(ios)
    hosted = {p["src"]: p for io in ios for t in io["inputs"] for p in t.get("view", ()) if p["src"] not in made}
    memory_map["dram"] = [{"name": f"input.{x}", "offset": p["dram"], "kind": "input",
                           "size": host.packed_bytes(p["layout"][0], p["pitch"], p["layout"][1],
                                                     target["array"]["rows"])}
                          for x, p in sorted(hosted.items())] + memory_map["dram"]
    for r in memory_map["dram"]:   # (every buffer names its memory: ARCHITECTURE.md)
        r.update(bank="dram", unit="bytes")
    tile_v = None
    if hdl:
        from hwc.hw.hdl_cache import cached_text, finish_background

        finish_background(hdl_job)
        tile_v = cached_text(target)
        if tile_v is None:
            from hwc.hw.generate import verilog_text

            tile_v = verilog_text(target)[0]
    info = {"int8": True, "tile": {"segments": ios}}
    return TileArtifact(target, graph, report, info, program=program, const=const, memory_map=memory_map,
                        tile_v=tile_v)


def _memory_map(target: dict, plan: TilePlan, prog: TileProgram, io: dict, program_bytes: int) -> dict:
    return {
        "dram": prog.dram_regions + [{"name": "program", "offset": io["prog_offset"], "size": program_bytes,
                                      "kind": "program"}],
        "act": [{"name": t.name, "offset": t.base, "size": t.lines, "unit": "lines", "bank": "act",
                 "channels": t.c, "height": t.h, "width": t.w, "pads": list(t.pads),
                 "row_pitch": t.wp, "block_lines": t.block_lines, "pixels_per_line": t.s2d}
                for t in sorted(plan.tensors.values(), key=lambda t: (t.base, t.name))],
        "wgt": {"banks": 2, "blocks_per_bank": target["scratchpad"]["wgt_bank_blocks"]},
        "param": {"entries_used": prog.dram_regions[0]["entries"], "entries": target["scratchpad"]["param_entries"]},
    }
