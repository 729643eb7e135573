#!/usr/bin/env python3
"""Times the ring probe kernels of gen.py through the CUDA driver API (ctypes, no toolkit): per config the kernel's
registers and local bytes, and TFLOP/s = MMA flops / the median of 7 event-timed launches after 2 warm-ups
(one block a multiprocessor)."""
import ctypes as C, statistics, sys, os
sys.path.insert(0, os.path.dirname(__file__))
from gen import kernel

cu = C.CDLL("libcuda.so.1")
def ok(r, what):
    if r != 0:
        raise SystemExit(f"{what}: CUDA error {r}")
ok(cu.cuInit(0), "cuInit")
dev = C.c_int(); ok(cu.cuDeviceGet(C.byref(dev), 0), "cuDeviceGet")
ctx = C.c_void_p(); ok(cu.cuDevicePrimaryCtxRetain(C.byref(ctx), dev), "ctx"); ok(cu.cuCtxSetCurrent(ctx), "set")
sms = C.c_int(); ok(cu.cuDeviceGetAttribute(C.byref(sms), 16, dev), "sms")
clk = C.c_int(); ok(cu.cuDeviceGetAttribute(C.byref(clk), 13, dev), "clock")
name = C.create_string_buffer(128); cu.cuDeviceGetName(name, 128, dev)
print(f"# {name.value.decode()}, {sms.value} SMs, max SM clock {clk.value / 1e6:.3f} GHz")
out = C.c_uint64(); ok(cu.cuMemAlloc_v2(C.byref(out), 64 << 20), "alloc")
src = C.c_uint64(); ok(cu.cuMemAlloc_v2(C.byref(src), 1 << 20), "alloc"); ok(cu.cuMemsetD8_v2(src, 0, 1 << 20), "memset")
ev = [C.c_void_p(), C.c_void_p()]
for x in ev: ok(cu.cuEventCreate(C.byref(x), 0), "event")

def run(mt, nt, warps, S, W, producer, note=""):
    ptx, smem, threads = kernel(mt, nt, warps, S, W, producer)
    mod = C.c_void_p(); ok(cu.cuModuleLoadData(C.byref(mod), ptx.encode() + b"\0"), "load")
    f = C.c_void_p(); ok(cu.cuModuleGetFunction(C.byref(f), mod, b"k"), "func")
    ok(cu.cuFuncSetAttribute(f, 8, smem), "smem attribute")
    regs, local = C.c_int(), C.c_int()
    cu.cuFuncGetAttribute(C.byref(regs), 4, f); cu.cuFuncGetAttribute(C.byref(local), 3, f)
    grid = sms.value
    iters = max(200, int(2000 * 16 / (mt * nt) * 8 / warps))
    it = C.c_uint32(iters)
    params = (C.c_void_p * 3)(C.cast(C.pointer(out), C.c_void_p), C.cast(C.pointer(src), C.c_void_p),
                              C.cast(C.pointer(it), C.c_void_p))
    ts = []
    for i in range(9):
        ok(cu.cuEventRecord(ev[0], None), "rec")
        ok(cu.cuLaunchKernel(f, grid, 1, 1, threads, 1, 1, smem, None, params, None), "launch")
        ok(cu.cuEventRecord(ev[1], None), "rec")
        ok(cu.cuEventSynchronize(ev[1]), "sync")
        ms = C.c_float(); cu.cuEventElapsedTime(C.byref(ms), ev[0], ev[1])
        if i >= 2: ts.append(ms.value)
    t = statistics.median(ts)
    mmas = grid * warps * iters * 4 * mt * nt
    flops = mmas * 4096
    smem_per_mma = ((mt + nt / 2) * 512 * warps * 4 + W) / (warps * 4 * mt * nt)
    print(f"{mt * 16:3}x{nt * 8:<3} warps={warps} {producer:6} S={S} W={W // 1024:2}K regs={regs.value:3} "
          f"local={local.value:3} smem B/MMA={smem_per_mma:5.1f} {t:7.3f} ms {flops / t / 1e9:6.1f} TFLOP/s  {note}")
    cu.cuModuleUnload(mod)

configs = [
    # n128's block: 8 warps of 32 x 64 (4 vocab x 2 batch: 128 x 128 a stage, 32 KiB) + a producer warp
    (2, 8, 8, 5, 0, "warp", "n128, no copies"),
    (2, 8, 8, 5, 32768, "warp", "n128"),
    (2, 8, 8, 6, 32768, "warp", "n128, 6 stages"),
    (2, 8, 8, 5, 32768, "inline", "n128 without its producer warp"),
    # 64 x 64 warp tiles: 8 warps (2 vocab x 4 batch or 4 x 2: 48 KiB a stage), no producer warp (255 registers)
    (4, 8, 8, 4, 0, "inline", "64x64 x8, no copies"),
    (4, 8, 8, 4, 49152, "inline", "64x64 x8"),
    (4, 8, 8, 3, 49152, "inline", "64x64 x8, 3 stages"),
    # 4 warps of 64 x 64 (2 x 2: 128 x 128, 32 KiB) + a producer warp: 5 warps, 255 registers
    (4, 8, 4, 6, 32768, "warp", "64x64 x4 + producer"),
    # 64 x 32 at n128's registers: 8 warps (2 x 4: 128 x 128, 32 KiB) + a producer warp
    (4, 4, 8, 5, 32768, "warp", "64x32 x8"),
]
for c in configs:
    run(*c)
