"""Source sites of the ``sim`` executor: where an access, barrier or call was made, in words.

A *site* is ``(code id << 24) | instruction offset`` (code id 0: the kernel's own code;
:func:`kernellab.sim.arrays._site`); mode 3 adds a call context. Here: the line of an
instruction (:func:`_line_of`), the start of an instruction CPython's specialising interpreter
reports at an inline-cache offset (:func:`_instr_start`), the variable a shared array is
assigned to (:func:`_assigned_name`), and the wording of a race -- both accesses in program
order, their barrier interval, and where a ``syncthreads()`` must go (:class:`_Explain`, the
part of a launch that explains; :func:`_barrier_advice`). Rules: CUDA C++ Programming Guide,
"Synchronization Functions"; NVIDIA Compute Sanitizer manual, "Racecheck Tool".
"""

from __future__ import annotations

import dis

import numpy as np

from kernellab.sim.arrays import CTX_SHIFT, SITE_MASK, _codes, _ctxs, _idx_str
from kernellab.sim.errors import RaceError
from kernellab.sim.settings import WARP


_line_cache: dict = {}
_name_cache: dict = {}


def _ordinal(n: int) -> str:
    n = int(n)
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def _barrier_advice(launch, a1, a2, passes, warp=None, paths=None, loop=None):
    """Where a syncthreads() must go to order access ``a1`` before ``a2`` ((tid, is_write,
    site), ``a1`` first in program order, ``passes`` passes of a loop apart), in words.
    ``warp``: the one warp whose threads made every access from the two lines in the
    interval (None: several), where a ``syncwarp`` orders them as well. ``paths``: the two
    accesses' call paths (sites, outermost first, the access last; default: the access
    alone), ``loop``: the depth in them of the frame whose loop separates the passes."""
    k1, k2 = ("write" if a1[1] else "read"), ("write" if a2[1] else "read")
    w1, w2 = launch.site_where(a1[2]), launch.site_where(a2[2])
    lanes = (f" (only warp {warp} runs these two lines here, so a cuda.syncwarp() is "
             "enough)" if warp is not None else "")
    s1, s2 = paths if paths is not None else ((int(a1[2]),), (int(a2[2]),))
    # d: the deepest frame both accesses are in (0: the kernel), by their call sites
    d = 0
    while (d < len(s1) - 1 and d < len(s2) - 1
           and launch._pos(s1[d]) == launch._pos(s2[d])):
        d += 1
    if passes and loop is not None:
        d = min(d, loop)
    in1, in2 = len(s1) - 1 > d, len(s2) - 1 > d      # inside a call made from frame d

    def call(sp):           # the call of a device function made at sp[d]
        return launch.site_code(sp[d + 1]).co_name, launch.site_where(sp[d])
    if not in1 and not in2 and int(a1[2]) == int(a2[2]):
        return (f"two threads {k1} the element from one instruction with no syncthreads() "
                "between them; check how the index maps threads to elements (each should "
                "own its own)")
    if passes:
        when = "the next pass" if passes == 1 else f"a later pass ({passes} passes on)"
        frame = launch.site_code(s2[d])
        lp = "the loop" if frame is launch.kcode else f"the loop in {frame.co_name}"
        if not in1 and not in2:
            return (f"the {k2} is in {when} of {lp}, and no syncthreads() separates it from "
                    f"the {k1} of the earlier pass. A syncthreads() is needed after the {k1} "
                    f"at {w1}, before the loop's next {k2} at {w2} \u2014 at the end of the "
                    "loop body" + lanes)
        if in1 and in2 and call(s1) == call(s2):
            f1, c1 = call(s1)
            nxt = "the next call" if passes == 1 else f"a later call ({passes} passes on)"
            return (f"the {k2} is in {nxt} of {f1} (from {c1}), made by {when} of {lp}, and "
                    f"no syncthreads() separates it from the {k1} of the call before. A "
                    f"syncthreads() is needed after the {k1} at {w1}, before {f1} returns "
                    "(or at the end of the loop body)" + lanes)
        t2 = f", in the call of {call(s2)[0]} from {call(s2)[1]}" if in2 else ""
        t1 = f" (in the call of {call(s1)[0]} from {call(s1)[1]})" if in1 else ""
        fix = (f"before {call(s1)[0]} returns (or at the end of the loop body)" if in1 else
               f"before the loop's next call of {call(s2)[0]} at {call(s2)[1]} \u2014 at the "
               "end of the loop body")
        return (f"the {k2} is in {when} of {lp}{t2}, and no syncthreads() separates it from "
                f"the {k1} of the earlier pass{t1}. A syncthreads() is needed after the {k1} "
                f"at {w1}, {fix}" + lanes)
    if in1 and in2:
        (f1, c1), (f2, c2) = call(s1), call(s2)
        if f1 == f2:
            said = (f"the {k2} is in a later call of {f2} (from {c2}) than the {k1} (from "
                    f"{c1})")
        else:
            said = (f"the {k1} is in the call of {f1} from {c1} and the {k2} in the later "
                    f"call of {f2} from {c2}")
        return (f"{said}, and no syncthreads() separates them. A syncthreads() is needed "
                f"after the {k1} at {w1}, before {f1} returns (or between the two calls)"
                + lanes)
    if in1:
        f1, c1 = call(s1)
        return (f"the {k1} is in the call of {f1} from {c1}, and no syncthreads() separates "
                f"it from the {k2} after that call. A syncthreads() is needed after the {k1} "
                f"at {w1}, before {f1} returns (or after the call, before the {k2} at {w2})"
                + lanes)
    if in2:
        f2, c2 = call(s2)
        return (f"the {k2} is in the call of {f2} from {c2}, after the {k1}, and no "
                f"syncthreads() separates them. A syncthreads() is needed after the {k1} at "
                f"{w1}, before the call of {f2} at {c2} (or in {f2}, before the {k2} at "
                f"{w2})" + lanes)
    if w1 == w2:
        return (f"no syncthreads() separates the {k1} from the {k2} on the same line. A "
                f"syncthreads() is needed between them: {k1} into a variable, syncthreads(), "
                f"then {k2}" + lanes)
    return (f"no syncthreads() comes between them. A syncthreads() is needed after the {k1} at "
            f"{w1}, before the {k2} at {w2}" + lanes)


def _assigned_name(code, lasti):
    """The variable the call at ``lasti`` is stored into (``sA = cuda.shared.array(...)``
    -> ``"sA"``), or None."""
    key = (code, lasti)
    if key not in _name_cache:
        name = None
        after = False
        for ins in dis.get_instructions(code):
            if after and ins.opname != "CACHE":
                if ins.opname in ("STORE_FAST", "STORE_NAME", "STORE_GLOBAL", "STORE_DEREF"):
                    name = ins.argval
                break
            if (ins.offset >= _instr_start(code, lasti)
                    and ins.opname.startswith(("CALL", "PRECALL"))):
                after = ins.opname.startswith("CALL")
        _name_cache[key] = name
    return _name_cache[key]


_start_cache: dict = {}


def _instr_start(code, lasti):
    """Offset of the (non-cache) instruction that ``lasti`` belongs to."""
    table = _start_cache.get(code)
    if table is None:
        table = {}
        cur = 0
        for ins in dis.get_instructions(code, show_caches=True):
            if ins.opname != "CACHE":
                cur = ins.offset
            table[ins.offset] = cur
        _start_cache[code] = table
    return table.get(lasti, lasti)


def _line_of(code, lasti):
    """Source line of the instruction at byte offset ``lasti`` of ``code``."""
    table = _line_cache.get(code)
    if table is None:
        table = {}
        for ins in dis.get_instructions(code):
            ln = ins.positions.lineno if ins.positions is not None else None
            if ln is None:
                ln = ins.starts_line
            table[ins.offset] = ln
        _line_cache[code] = table
    if lasti in table and table[lasti] is not None:
        return table[lasti]
    best = None
    for o, ln in table.items():
        if o <= lasti and ln is not None:
            best = ln
    return best if best is not None else code.co_firstlineno


def _unravel(root, off):
    try:
        return str([int(v) for v in np.unravel_index(int(off), root.shape)])
    except ValueError:
        return f"[element {int(off)}]"


class _Explain:
    """What a launch (:class:`kernellab.sim.analysis._Launch`) says about a site and a
    race: mixed into it; needs ``kcode``, ``grid``, ``block``, ``nthreads`` and ``bar_sites``."""

    def site_line(self, site):
        site = int(site) & ~1
        cid, lasti = site >> 24, site & 0xFFFFFF
        code = self.kcode if cid == 0 else _codes[cid]
        return _line_of(code, lasti)

    def site_where(self, site):
        site = int(site) & ~1
        cid = site >> 24
        code = self.kcode if cid == 0 else _codes[cid]
        line = self.site_line(site)
        if cid == 0:
            return f"line {line}"
        return f"line {line} of {code.co_name}"

    def _race(self, root, sp, off, a1, a2, blin, where=None):
        """Raise the RaceError of two accesses ``a1``, ``a2`` = (tid, is_write, site) to one
        element in one barrier interval. ``where`` = (k1, k2, tid, site, iv, epoch, ctx):
        their indices in the analysed batch and its per-access arrays (``ctx``: mode 3's call
        contexts), to tell which access comes first in program order, whether a loop took
        the second one round to a later pass or it is in another call of a device function,
        and so where a syncthreads() must go."""
        def who(a):
            return (f"{'write' if a[1] else 'read'} by tid={_idx_str(self.thread_idx(a[0]))} at "
                    f"{self.site_where(a[2])}")
        head = (f"ctaid={_idx_str(self.block_idx(blin))}: race on {sp} array {root.name}"
                f"{_unravel(root, off)} (byte address {root.base + off * root.itemsize:#x}): ")
        if where is None:
            raise RaceError(f"{head}{who(a1)} and {who(a2)}, with no syncthreads() between them")
        k1, k2, tid, site, iv, epoch, ctx = where
        first, _, passes, loop, paths = self._program_order(k1, k2, tid, site, iv, ctx)
        if first == k2:
            a1, a2 = a2, a1
        ep = int(epoch[k1])
        both = (iv == iv[k1]) & ((site == site[k1]) | (site == site[k2]))
        warps = np.unique(tid[both] // WARP)
        warp = int(warps[0]) if len(warps) == 1 and self.nthreads > WARP else None
        raise RaceError(f"{head}{who(a1)} and {who(a2)}, {self._interval(ep)}: "
                        + _barrier_advice(self, a1, a2, passes, warp, paths, loop))

    def _interval(self, ep):
        """Where barrier interval ``ep`` (the count of syncthreads() the block had passed) lies,
        in words, with the lines of the barriers that open and close it."""
        bars = self.bar_sites

        def at(n):      # the n-th barrier of the block (1-based)
            return self.code_where(*bars[n - 1])
        if not bars:
            return "both in a block that reaches no syncthreads()"
        if ep == 0:
            return f"both before the block's first syncthreads() ({at(1)})"
        if ep == len(bars):
            return f"both after the block's last syncthreads() (the {_ordinal(ep)}, {at(ep)})"
        o, c = at(ep), at(ep + 1)
        if o == c:
            return (f"both after {ep} syncthreads() and before the {_ordinal(ep + 1)} (both "
                    f"at {o})")
        return (f"both after {ep} syncthreads() (the last at {o}) and before the "
                f"{_ordinal(ep + 1)} ({c})")

    def code_where(self, code, lasti):
        """``line N`` (the kernel's own code) or ``line N of FN`` (a device function)."""
        line = _line_of(code, lasti)
        return f"line {line}" if code is self.kcode else f"line {line} of {code.co_name}"

    def site_code(self, site):
        """The code object an access or call site lies in."""
        cid = int(site) >> 24
        return self.kcode if cid == 0 else _codes[cid]

    def _pos(self, site):
        """A site's place in its code: (line << 24) | instruction offset."""
        s_ = int(site)
        code = self.site_code(s_)
        lasti = s_ & 0xFFFFFF
        return (_line_of(code, lasti) << 24) | _instr_start(code, lasti)

    def _program_order(self, k1, k2, tid, site, iv, ctx=None):
        """(first, second, passes, loop, paths) for accesses ``k1``, ``k2`` of one barrier
        interval, in program order, from what each thread executed.

        An access's *path* is its call stack's sites, outermost first (the kernel's call of
        the first device function ... the access itself, from ``ctx``: mode 3's contexts),
        ordered by their places in the code (line, offset), compared left to right; its
        frames carry call instances. Each access is placed by (c, its path), c = how many
        times its thread went back (a loop's back edge) from past the earlier of the two
        paths to or before it since the interval began; ``passes`` = how many such passes
        separate the second from the first (0: straight-line code, or calls one after
        another), ``loop`` = the depth (0: the kernel) of the frame whose loop made the
        first of those passes (None when ``passes`` is 0), ``paths`` = the two paths' sites.
        """
        cx = ctx if ctx is not None else np.zeros(len(site), np.int64)
        comb = (cx << CTX_SHIFT) | site
        cache = {}

        def path(c):        # (sites, places, instances) of combined site-and-context c
            got = cache.get(c)
            if got is None:
                frames = _ctxs[c >> CTX_SHIFT] if (c >> CTX_SHIFT) < len(_ctxs) else ()
                sites = tuple(int(cs) for cs, _ in frames) + (c & SITE_MASK,)
                got = cache[c] = (sites, tuple(self._pos(v) for v in sites),
                                  tuple(n for _, n in frames))
            return got
        p1, p2 = path(int(comb[k1])), path(int(comb[k2]))
        x = min(p1[1], p2[1])

        def placed(k):      # the thread's back edges over x before access k, as indices
            mine = np.flatnonzero((iv == iv[k]) & (tid == tid[k]))
            mine = mine[mine <= k]
            u, inv = np.unique(comb[mine], return_inverse=True)
            after = np.array([path(int(v))[1] > x for v in u.tolist()], np.bool_)[inv.ravel()]
            return mine[1:][after[:-1] & ~after[1:]], mine

        def shared(a, b):   # the deepest frame of paths a, b that is one call in both
            d = 0
            while (d < len(a[2]) and d < len(b[2]) and a[1][d] == b[1][d]
                   and a[2][d] == b[2][d]):
                d += 1
            return d
        (e1, m1), (e2, m2) = placed(k1), placed(k2)
        if (len(e2), p2[1]) < (len(e1), p1[1]):
            k1, k2, e1, e2, m1, m2, p1, p2 = k2, k1, e2, e1, m2, m1, p2, p1
        passes = len(e2) - len(e1)
        loop = None
        if passes:
            # the back edge into the second access's pass: between two accesses of its
            # thread, adjacent in the thread's log (``mine`` holds only that thread's)
            loop = min(shared(path(int(comb[m2[np.searchsorted(m2, e) - 1]])),
                              path(int(comb[e])))
                       for e in e2[len(e1):][:64].tolist())
        return k1, k2, passes, loop, (p1[0], p2[0])

    def _cross_block_race(self, root, off, tid, site, what, blin, other=None):
        t = self.thread_idx(int(tid))
        both = " (at least one of them writing)"
        if other is not None:
            ob, ot, osite, ow = other
            by = (f"{'write' if ow else 'read'} by tid={_idx_str(self.thread_idx(ot))} "
                  f"ctaid={_idx_str(self.block_idx(ob))} at {self.site_where(osite)}")
            if ow and what.startswith("write"):
                # two blocks storing one element: usually a block index mapped to the same
                # output twice (a batch or head index left out of the mapping)
                both = (": two blocks store the same element -- check how blockIdx maps to "
                        "the part of the output each block owns")
        else:
            by = "an access by another block of the same launch"
        raise RaceError(
            f"race on global array {root.name}{_unravel(root, off)} (byte address "
            f"{root.base + off * root.itemsize:#x}): {what} by tid={_idx_str(t)} "
            f"ctaid={_idx_str(self.block_idx(blin))} at {self.site_where(site)} and {by}"
            f"{both}. Blocks run in no fixed order and cannot synchronise with each other "
            "inside one launch: no syncthreads() can order these two accesses (it orders the "
            "threads of one block); each block must store only the part of the output it "
            "owns, or the work that needs another block's result goes in a later launch")

    def block_idx(self, blin):
        gx, gy, _ = self.grid
        bz, rem = divmod(int(blin), gx * gy)
        by, bx = divmod(rem, gx)
        return (bx, by, bz)

    def thread_idx(self, tid):
        bx, by, _ = self.block
        tz, rem = divmod(tid, bx * by)
        ty, tx = divmod(rem, bx)
        return (tx, ty, tz)
