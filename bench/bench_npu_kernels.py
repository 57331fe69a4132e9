"""NPU kernels on the instruction-set simulator: achieved fractions of the roofline, the value
of double buffering, and simulation speed. Prints ratios; not a test."""

import time

from infer.target import kernels
from infer.target.hw import load_config
from infer.target.sim import Simulator

GEMM = {"edge": (512, 256, 512), "server": (1024, 1024, 1024)}
GEMV = {"edge": (1024, 1024), "server": (4096, 8192)}


def timed_run(cfg, k):
    sim = Simulator(cfg)
    t = time.perf_counter()
    c = sim.run(k.program, k.dram)
    return c, time.perf_counter() - t


def main() -> None:
    print("== NPU kernels (simulated cycles; wall = simulator wall time) ==")
    for name in ("edge", "server"):
        cfg = load_config(name)
        M, K, N = GEMM[name]
        k2 = kernels.gemm(cfg, M, K, N, double_buffer=True)
        c2, w2 = timed_run(cfg, k2)
        ok = (k2.read("C") == k2.expected["C"]).all()
        k1 = kernels.gemm(cfg, M, K, N, double_buffer=False)
        c1, _ = timed_run(cfg, k1)
        print(f"[{name}] GEMM int8 {M}x{K}x{N} double-buffered: {c2.cycles} cycles, "
              f"{100 * c2.matrix_utilization:.1f}% of matrix peak ({cfg.peak_macs_per_cycle} "
              f"MAC/cycle), exact={ok}")
        print(f"[{name}] GEMM without double buffering: {c1.cycles} cycles "
              f"({100 * c1.matrix_utilization:.1f}% of peak); slowdown x{c1.cycles / c2.cycles:.2f}")
        Kv, Nv = GEMV[name]
        kv = kernels.gemv(cfg, Kv, Nv)
        cv, wv = timed_run(cfg, kv)
        roof = kv.dram_bytes / cfg.dram.bytes_per_cycle
        okv = (kv.read("y") == kv.expected["y"]).all()
        print(f"[{name}] GEMV int8 {Kv}x{Nv}: {cv.cycles} cycles, {100 * roof / cv.cycles:.1f}% of "
              f"the DRAM-bandwidth roofline ({kv.dram_bytes} B at "
              f"{cfg.dram.bytes_per_cycle} B/cycle), exact={okv}")
        print(f"[{name}] sim speed: GEMV {cv.instructions / wv:,.0f} instructions/s "
              f"({1e6 * wv / cv.instructions:.1f} us/instruction); GEMM "
              f"{c2.macs / w2 / 1e9:.2f} GMAC/s simulated")
        if name == "server":
            print(f"[server] 1-GMAC GEMM ({M}x{K}x{N} = {c2.macs / 1e9:.2f} GMAC) wall time: "
                  f"{w2:.2f} s (simulated {c2.seconds * 1e6:.1f} us at {cfg.clock_ghz} GHz)")


if __name__ == "__main__":
    main()
