"""The GEMM engine: a two-stage pipeline (weight preload, line stream) around the MAC array.

On-chip memories: data comes ML = MEM_LATENCY = 3 cycles after a read request (registered
address, block RAM, registered data), and a write request is performed WL = MEM_WRITE_LATENCY
= 1 cycle later.

Stage 1 (preload) owns the shadow weights: issued GEMM k reads its block's N WGT rows,
R = wgt_read_rows per cycle (one WGT word of R consecutive rows; cycles issue+1 .. issue+PRELOAD,
PRELOAD = N / R), into the array's shadow registers (each word lands ML cycles after its read);
a GEMM.dw9 reads one word more, the next block's first, whose first row goes to the ninth PEs (PRELOAD_DW9).
Stage 2 (stream) owns the ACT compute port: it reads one line per
cycle for `n_outer * n_inner` cycles. GEMM k moves from stage 1 to stage 2 at the end of a
cycle in which its last WGT read is issued (or done) and stage 2 is free or issuing its
last read; so `stream_start(k) = max(issue(k) + PRELOAD + 1, stream_end(k-1))` (GEMM_SETUP = 1:
the swap happens ML cycles after the first line's read, when the last row has landed), and
the engine accepts the next GEMM from `stream_start(k)` on (stage 1 is empty again).

A line read (requested) in cycle c flows through (one register per step, L = log2 N,
M = MAC_PIPE_STAGES = 3):
  c+ML       ACT data -> x register; for a GEMM's first line, the swap (shadow -> active)
  c+ML+1     x copied per array row (MacArray delays the swap to match)
  c+ML+2     N*N multipliers (MacArray), products registered twice, then L adder-tree levels:
             dot valid in c+ML+1+M+L
  c+1+M+L    ACC read request for the line's accumulator address; data in c+ML+1+M+L -> old register
  c+ML+2+M+L sum = (reset ? 0 : old or a forwarded sum) + dot, ACC write request
  +WL        the ACC write is performed
so the engine is idle GEMM_LATENCY = ML + 1 + M + L + WL cycles after its last line read + 1.

Forwarding: an ACC read misses the writes of the ML + 1 items ahead of it in the pipeline
(not yet performed when it reads); their sums are kept in ML + 1 registers and selected
when their address matches (newest first), so consecutive lines may accumulate into the
same ACC line every cycle (global average pooling) with no spacing in the program.

Depthwise mode (tile v2, `features.depthwise`, docs/tile-v2.md; elaborated only then): beside the
x register, a shift register of N - 1 lines `sr[c]` holds the lines streamed c cycles earlier; it
is cleared when the first line of an inner loop enters the x register (a `j == 0` flag travels
with each line's token, registered once per column). Each line also carries its GEMM's `dw` bit,
registered once per array row beside x, which selects the MAC array's operand (hw/mac.py). The
first `skip` lines of every inner loop carry no valid token (no ACC read, write or forwarding), and
the ACC pointer holds during them (a down-counter reloaded at every inner loop), so the ACC
addresses count from the first written line. Neither adds a pipeline stage: timing as in v1.
"""

from __future__ import annotations

from amaranth.hdl import Cat, Module, Mux, Signal, signed
from amaranth.lib import wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from hwc import isa

from .loop import loop2d
from .mac import MacArray, dot_bits
from .params import DUP, TileParams, bits_for, field

OP = isa.Op.GEMM
ML = isa.MEM_LATENCY  # on-chip memories: data ML cycles after a read request (registered address, RAM, data)
WL = isa.MEM_WRITE_LATENCY  # ... and a write request is performed WL cycles later


class GemmEngine(wiring.Component):
    def __init__(self, p: TileParams):
        self.p = p
        super().__init__({
            "start": In(1),
            "word": In(isa.INSN_BITS),
            "accept": Out(1),     # stage 1 is free: a GEMM may issue this cycle
            "busy": Out(1),
            "wgt_addr": Out(p.wgt_bits - p.log2r),         # a word of wgt_read_rows rows
            "wgt_data": In(p.wgt_read_rows * p.line_bits),
            "act_addr": Out(p.act_bits),  # zero when not streaming (OR-muxed with the other engines)
            "act_data": In(p.line_bits),
            "acc_raddr": Out(p.acc_bits),
            "acc_rdata": In(p.acc_line_bits),
            "acc_waddr": Out(p.acc_bits),
            "acc_wdata": Out(p.acc_line_bits),
            "acc_we": Out(1),
        } | ({"older_busy": Out(isa.PPU_MAX_LAG)} if p.post_unit else {}))  # bit k-1: PPU.lag = k must wait

    def elaborate(self, platform):
        m = Module()
        p = self.p
        n = p.n
        m.submodules.mac = mac = MacArray(p)
        w = self.word

        # ---- stage 1: weight preload ----
        pre_active = Signal()
        words = p.preload_cycles  # WGT words (of wgt_read_rows rows) per block
        # GEMM.dw9: one word more, the next block's first (its first row: the ninth PE's weights)
        pre_cnt = Signal(range(words + 2 if p.dw9 else words + 1))
        names = ("act", "acc", "n_outer", "n_inner", "act_so", "act_si", "acc_so", "acc_si", "reset")
        if p.depthwise:
            names += ("dw", "skip")
        if p.dw_lines:
            names += ("dwp",)
        if p.dw9:
            names += ("dw9",)
        pre = {k: Signal(field(w, OP, k).shape(), name=f"pre_{k}", reset_less=True) for k in names}
        wblk = Signal(bits_for(p.wgt_blocks), reset_less=True)
        last_word = Mux(pre["dw9"], words, words - 1) if p.dw9 else words - 1
        # the fields are captured in every cycle stage 1 is empty (an issue only comes then), so the
        # wide enables start from `pre_active`, not from the issue decision (hw/tile.py)
        with m.If(~pre_active):
            m.d.sync += [pre_cnt.eq(0), wblk.eq(field(w, OP, "wblk"))]
            m.d.sync += [pre[k].eq(field(w, OP, k)) for k in names]
        with m.If(self.start):
            m.d.sync += pre_active.eq(1)
        reading = pre_active & (pre_cnt <= last_word)
        with m.If(reading):
            m.d.sync += pre_cnt.eq(pre_cnt + 1)
        wb = p.log2n - p.log2r
        m.d.comb += self.wgt_addr.eq(((wblk << wb) + pre_cnt) if p.dw9 else ((wblk << wb) | pre_cnt[:wb]))
        # the word read in cycle c arrives ML cycles later and is written into the shadow registers then
        row_we = [Signal(name=f"row_we{k}") for k in range(ML)]
        row_idx = [Signal(range(words), name=f"row_idx{k}", reset_less=True) for k in range(ML)]
        m.d.sync += [row_we[0].eq(reading & (pre_cnt < words)), row_idx[0].eq(pre_cnt[:wb])]
        m.d.sync += [row_we[k + 1].eq(row_we[k]) for k in range(ML - 1)]
        m.d.sync += [row_idx[k + 1].eq(row_idx[k]) for k in range(ML - 1)]
        m.d.comb += [mac.row_we.eq(row_we[-1]), mac.row_idx.eq(row_idx[-1]), mac.row_data.eq(self.wgt_data)]
        if p.dw9:  # the extra word: its first row into the ninth PEs' shadow weights
            row9_we = [Signal(name=f"row9_we{k}") for k in range(ML)]
            m.d.sync += [row9_we[0].eq(reading & (pre_cnt == words))]
            m.d.sync += [row9_we[k + 1].eq(row9_we[k]) for k in range(ML - 1)]
            m.d.comb += mac.row9_we.eq(row9_we[-1])

        # ---- stage 2: line stream ----
        st_active = Signal()
        st_first = Signal()
        st_reset = Signal()
        # stage 1 holds a block whose last word read is issued (or done): a register set the cycle before that
        # read (on the issue itself for a one-word block), so the wide enables of `transfer` start from flip-flops
        ready = Signal()
        transfer = Signal()
        with m.If(transfer):
            m.d.sync += ready.eq(0)
        if words == 1:
            with m.If(self.start & (~field(w, OP, "dw9") if p.dw9 else 1)):
                m.d.sync += ready.eq(1)
            if p.dw9:
                with m.If(reading & pre["dw9"] & (pre_cnt == 0)):
                    m.d.sync += ready.eq(1)
        else:
            with m.If(reading & (pre_cnt == last_word - 1)):
                m.d.sync += ready.eq(1)
        if p.depthwise:
            # depthwise mode: the first `skip` lines of every inner loop write nothing (a down-counter,
            # zero from the first written line on), and the ACC pointer holds until then
            st_dw = Signal()
            st_skip = Signal(3, reset_less=True)
            st_sk = Signal(3)
            st_j0 = Signal()  # the current line is the first of its inner loop (GEMM.dwp: of the GEMM)
            st_dwp = Signal()
            st_dw9 = Signal()
            st_pitch = Signal(pre["n_inner"].shape(), reset_less=True)   # GEMM.dwp: the row pitch, n_inner
            writes = st_sk == 0
        loop = loop2d(m, "st", load=transfer, step=st_active, n_outer=pre["n_outer"], n_inner=pre["n_inner"],
                      streams=[(pre["act"], pre["act_so"], pre["act_si"], p.act_bits),
                               (pre["acc"], pre["acc_so"], pre["acc_si"], p.acc_bits)],
                      hold={1: ~writes} if p.depthwise else None)
        m.d.comb += transfer.eq(ready & (~st_active | loop.last))
        act_ptr, acc_ptr = loop.ptrs
        with m.If(transfer):
            m.d.sync += [st_active.eq(1), st_first.eq(1), st_reset.eq(pre["reset"]), pre_active.eq(0)]
        with m.Elif(st_active):
            m.d.sync += st_first.eq(0)
            with m.If(loop.last):
                m.d.sync += st_active.eq(0)
        if p.depthwise:
            with m.If(transfer):
                m.d.sync += [st_dw.eq(pre["dw"]), st_skip.eq(pre["skip"]), st_sk.eq(pre["skip"]), st_j0.eq(1),
                             st_pitch.eq(pre["n_inner"])]
                if p.dw_lines:
                    m.d.sync += st_dwp.eq(pre["dwp"])
                if p.dw9:
                    m.d.sync += st_dw9.eq(pre["dw9"])
            with m.Elif(st_active):
                m.d.sync += st_j0.eq(loop.last_j & ~st_dwp)   # GEMM.dwp: the SR spans the whole GEMM
                with m.If(loop.last_j):
                    m.d.sync += st_sk.eq(st_skip)
                with m.Elif(~writes):
                    m.d.sync += st_sk.eq(st_sk - 1)
        m.d.comb += [self.accept.eq(~pre_active)]
        m.d.comb += self.act_addr.eq(st_active.replicate(p.act_bits) & act_ptr)

        # ---- token pipeline: (valid, acc address, reset, first) k cycles after the line's read ----
        kx = ML                       # the line's data arrives: x register, and the swap for a first line
        kr = kx + mac.latency - ML    # ACC read request, so that its data arrives with the dot product
        kd = kr + ML                  # ACC data arrives: old register, forwarding selects
        ka = kd + 1                   # dot product valid: sum and ACC write request
        depth = ka + WL               # ... which the memory performs WL cycles later
        assert kx + 1 + mac.latency == ka
        tv = [Signal(name=f"t{k}_valid") for k in range(depth + 1)]
        ta = [Signal(p.acc_bits, name=f"t{k}_acc", reset_less=True) for k in range(depth + 1)]
        tr = [Signal(name=f"t{k}_reset", reset_less=True) for k in range(depth + 1)]
        tf = [Signal(name=f"t{k}_first") for k in range(kx + 1)]
        m.d.comb += [tv[0].eq(st_active & writes if p.depthwise else st_active), ta[0].eq(acc_ptr),
                     tr[0].eq(st_reset), tf[0].eq(st_active & st_first)]
        for k in range(depth):
            m.d.sync += [tv[k + 1].eq(tv[k]), ta[k + 1].eq(ta[k]), tr[k + 1].eq(tr[k])]
        m.d.sync += [tf[k + 1].eq(tf[k]) for k in range(kx)]
        xreg = Signal(p.line_bits, reset_less=True)
        m.d.sync += xreg.eq(self.act_data)
        m.d.comb += [mac.x.eq(xreg), mac.swap.eq(tf[kx])]
        if p.depthwise:
            # the line shift register SR (docs/tile-v2.md): sr[0] = xreg (the current line), sr[c] the line
            # c cycles earlier, cleared when a first line of an inner loop enters xreg. Its controls travel
            # with the token: j0 (first of its inner loop) and dw, registered per column / per row.
            tz = [Signal(name=f"t{k}_j0") for k in range(kx + 1)]
            td = [Signal(name=f"t{k}_dw") for k in range(kx + 1)]
            m.d.comb += [tz[0].eq(st_j0), td[0].eq(st_dw)]
            m.d.sync += [tz[k + 1].eq(tz[k]) for k in range(kx)]
            m.d.sync += [td[k + 1].eq(td[k]) for k in range(kx)]
            if p.dw9:  # GEMM.dw9: the swap loads the ninth PEs' weights (zero for any other GEMM)
                t9 = [Signal(name=f"t{k}_dw9") for k in range(kx + 1)]
                m.d.comb += t9[0].eq(st_dw9)
                m.d.sync += [t9[k + 1].eq(t9[k]) for k in range(kx)]
                m.d.comb += mac.swap9.eq(t9[kx])
            # GEMM.dwp: registers DWP_TAPS, 2 * DWP_TAPS (...) start chains fed by the row buffers, and the one
            # after the last chain reads zero (selected by the line's dwp bit: `_row_buffers`)
            heads = {}
            if p.dw_lines:
                dwp_sel = Signal(name="dwp_sel", attrs=DUP)
                for k in range(1, isa.DWP_ROWS + 1):
                    if k * isa.DWP_TAPS < n:
                        heads[k * isa.DWP_TAPS] = (dwp_sel, Signal(p.line_bits, name=f"dwp_head{k}")
                                                   if k < isa.DWP_ROWS else 0)
            sr = [xreg]
            for c in range(1, n + (1 if p.dw9 else 0)):   # GEMM.dw9: sr[N] = sr[8], the ninth PE's line
                clr = Signal(name=f"sr_clr{c}", attrs=DUP)  # = tz[kx] in the cycle the line enters xreg
                m.d.sync += clr.eq(tz[kx - 1])
                r = Signal(p.line_bits, name=f"sr{c}", reset_less=True)
                if c in heads:  # GEMM.dwp: this register starts a chain (a row buffer's output, or zero)
                    sel, head = heads[c]
                    m.d.sync += r.eq(Mux(clr, 0, Mux(sel, head, sr[-1])))
                else:
                    m.d.sync += r.eq(Mux(clr, 0, sr[-1]))
                sr.append(r)
            if p.dw_lines:
                self._row_buffers(m, p, sr, heads, dwp_sel, tz, kx, st_dwp, st_pitch)
            dwr = [Signal(name=f"dw{r}", attrs=DUP) for r in range(n)]  # with xreg: the mode of its line
            m.d.sync += [d.eq(td[kx]) for d in dwr]
            m.d.comb += [mac.sr.eq(Cat(*sr[1:])), mac.dw.eq(Cat(*dwr))]

        # ---- accumulator read-modify-write with forwarding ----
        # The block RAM reads for item i one cycle after its request and misses the writes of the
        # FWD = ML + 1 items ahead of it (requested in the cycles up to its own ACC data cycle, performed
        # WL = 1 cycle later); their sums are kept and selected, newest first, when the address matches.
        fwd_n = ML + 1
        m.d.comb += self.acc_raddr.eq(tv[kr].replicate(p.acc_bits) & ta[kr])
        old = Signal(p.acc_line_bits, reset_less=True)
        new = Signal(p.acc_line_bits)
        sums = [Signal(p.acc_line_bits, name=f"sum{k}", reset_less=True) for k in range(fwd_n)]
        svalid = [Signal(name=f"sum{k}_valid") for k in range(fwd_n)]
        saddr = [Signal(p.acc_bits, name=f"sum{k}_acc", reset_less=True) for k in range(fwd_n)]
        m.d.sync += [old.eq(self.acc_rdata), sums[0].eq(new), svalid[0].eq(tv[ka]), saddr[0].eq(ta[ka])]
        for k in range(1, fwd_n):
            m.d.sync += [sums[k].eq(sums[k - 1]), svalid[k].eq(svalid[k - 1]), saddr[k].eq(saddr[k - 1])]
        db = dot_bits(p)
        for r in range(n):
            # the selects of the sum's first operand, registered once per lane (each drives 32 bits)
            zero = Signal(name=f"zero{r}", attrs=DUP)
            fwd = [Signal(name=f"fwd{r}_{k}", attrs=DUP) for k in range(fwd_n)]
            m.d.sync += [zero.eq(tr[ka - 1]), fwd[0].eq(tv[ka] & (ta[ka] == ta[kd]))]
            m.d.sync += [fwd[k].eq(svalid[k - 1] & (saddr[k - 1] == ta[kd])) for k in range(1, fwd_n)]
            lane = slice(32 * r, 32 * r + 32)
            prev = Signal(signed(32), name=f"prev{r}")
            with m.If(zero):
                m.d.comb += prev.eq(0)
            for k in range(fwd_n):
                with m.Elif(fwd[k]):
                    m.d.comb += prev.eq(sums[k][lane])
            with m.Else():
                m.d.comb += prev.eq(old[lane])
            m.d.comb += new[lane].eq(prev + mac.dot[db * r:db * (r + 1)].as_signed())
        m.d.comb += [self.acc_we.eq(tv[ka]), self.acc_waddr.eq(ta[ka]), self.acc_wdata.eq(new)]
        m.d.comb += self.busy.eq(pre_active | st_active | Cat(*tv[1:]).any())
        if p.post_unit:
            # PPU.lag = k (docs/tile-v2.md): is any GEMM other than the k most recently issued ones in flight?
            # A sequence number counts the issues; stage 2 and each token carry their GEMM's. An item's age is
            # the issues since its own, modulo 2**bits: the counter is wide enough that the GEMMs in flight (one
            # in stage 1, one in stage 2, at most one per token) never alias. With a GEMM in stage 1 (the
            # latest, age 0) everything in stage 2 and the tokens has age 1 or more, as it should.
            bits = bits_for(depth + 2 + isa.PPU_MAX_LAG)
            seq, st_seq = Signal(bits), Signal(bits)
            with m.If(self.start):
                m.d.sync += seq.eq(seq + 1)
            with m.If(transfer):
                m.d.sync += st_seq.eq(seq)
            tg = [Signal(bits, name=f"t{k}_seq", reset_less=True) for k in range(depth + 1)]
            m.d.comb += tg[0].eq(st_seq)
            m.d.sync += [tg[k + 1].eq(tg[k]) for k in range(depth)]
            items = [(st_active, st_seq)] + [(tv[k], tg[k]) for k in range(1, depth + 1)]
            for lag in range(1, isa.PPU_MAX_LAG + 1):
                older = 0
                for valid, s in items:
                    older = older | (valid & ((seq - s)[:bits] >= lag))
                m.d.comb += self.older_busy[lag - 1].eq(older)
        return m

    def _row_buffers(self, m, p, sr, heads, dwp_sel, tz, kx, st_dwp, st_pitch) -> None:
        """GEMM.dwp (docs/tile-v2.md): chain k (k = 1 .. DWP_ROWS - 1) starts at register sr[k * DWP_TAPS],
        which takes the line P = n_inner lines before the one in chain k - 1's first register: row buffer k
        (a block RAM of p.dw_lines lines, written every cycle with chain k - 1's first register, read P - 3
        lines later: address, RAM, data register, then the chain register). The chain register reads zero
        until the GEMM has streamed k * P lines (a line counter from the GEMM's first line)."""
        # the controls of the line entering xreg next cycle: its dwp bit, its pitch, its index in the GEMM
        tp = [Signal(name=f"t{k}_dwp") for k in range(kx + 1)]
        tq = [Signal(st_pitch.shape(), name=f"t{k}_pitch", reset_less=True) for k in range(kx + 1)]
        m.d.comb += [tp[0].eq(st_dwp), tq[0].eq(st_pitch)]
        m.d.sync += [tp[k + 1].eq(tp[k]) for k in range(kx)] + [tq[k + 1].eq(tq[k]) for k in range(kx)]
        m.d.sync += dwp_sel.eq(tp[kx - 1])
        cmax = isa.DWP_ROWS * p.dw_lines + 1
        cnt = Signal(range(cmax + 1), name="dwp_cnt")   # the index of the line in xreg (saturating)
        first = Signal(name="dwp_first")                # the line entering xreg next cycle is a GEMM's first
        m.d.sync += first.eq(tz[kx - 1])
        nxt = Mux(first, 0, Mux(cnt == cmax, cmax, cnt + 1))
        m.d.sync += cnt.eq(nxt)
        abits = bits_for(p.dw_lines)
        wptr = Signal(abits, name="dwp_wptr")
        m.d.sync += wptr.eq(wptr + 1)
        # read for the line entering xreg three cycles later, whose token is at stage 1 now (its pitch tq[1])
        raddr = Signal(abits, name="dwp_raddr")
        m.d.comb += raddr.eq(wptr - tq[1] + 3)
        src = sr[0]
        for k in range(1, isa.DWP_ROWS):
            c = k * isa.DWP_TAPS
            if c not in heads:
                break
            mem = Memory(shape=p.line_bits, depth=1 << abits, init=[], attrs={"no_rw_check": 1})
            m.submodules[f"dwp_buf{k}"] = mem
            wp, rp = mem.write_port(), mem.read_port()
            data = Signal(p.line_bits, name=f"dwp_buf{k}_q", reset_less=True)  # beside the block RAM
            m.d.comb += [wp.addr.eq(wptr), wp.data.eq(src), wp.en.eq(1), rp.addr.eq(raddr)]
            m.d.sync += data.eq(rp.data)
            # chain k reads zero until the GEMM has streamed k * P lines: nxt >= k * P, which is (the line is not
            # a first, nxt = cnt + 1 saturating) cnt >= k * P - 1, against k * P - 1 registered a cycle early from
            # the pitch one stage back (tq[kx - 1]): one comparison of two registers, no increment before it
            # (the routed critical path of tile8x8 ran through cnt + 1 and this comparison)
            kp1 = Signal(signed(len(tq[kx]) + 3), name=f"dwp_kp1_{k}")   # k * P - 1 of the line entering xreg
            kp0 = Signal(name=f"dwp_kp0_{k}")                            # k * P == 0 (a bubble: no pitch)
            m.d.sync += [kp1.eq(k * tq[kx - 1] - 1), kp0.eq(tq[kx - 1] == 0)]
            m.d.comb += heads[c][1].eq(Mux(Mux(first, kp0, cnt >= kp1), data, 0))
            src = sr[c]
