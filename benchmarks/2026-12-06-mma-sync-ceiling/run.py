#!/usr/bin/env python3
"""Times the probe kernels of gen.py through the CUDA driver API (ctypes, no toolkit): per config the kernel's
registers and local bytes, and TFLOP/s = MMA flops / the median of 7 event-timed launches after 2 warm-ups."""
import ctypes as C, statistics, subprocess, sys, os
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
name = C.create_string_buffer(128); cu.cuDeviceGetName(name, 128, dev)
print(f"# {name.value.decode()}, {sms.value} SMs")
out = C.c_uint64(); ok(cu.cuMemAlloc_v2(C.byref(out), 64 << 20), "alloc")
ev = [C.c_void_p(), C.c_void_p()]
for x in ev: ok(cu.cuEventCreate(C.byref(x), 0), "event")

def run(mode, mt, nt, warps, blocks_per_sm=1):
    ptx = kernel(mode, mt, nt, warps).encode() + b"\0"
    mod = C.c_void_p(); ok(cu.cuModuleLoadData(C.byref(mod), ptx), "load")
    f = C.c_void_p(); ok(cu.cuModuleGetFunction(C.byref(f), mod, b"k"), "func")
    regs, local = C.c_int(), C.c_int()
    cu.cuFuncGetAttribute(C.byref(regs), 4, f); cu.cuFuncGetAttribute(C.byref(local), 3, f)
    grid = sms.value * blocks_per_sm
    iters = max(200, int(20000 * 16 / (mt * nt) * 8 / (warps * blocks_per_sm)))
    it = C.c_uint32(iters)
    params = (C.c_void_p * 2)(C.cast(C.pointer(out), C.c_void_p), C.cast(C.pointer(it), C.c_void_p))
    ts = []
    for i in range(9):
        ok(cu.cuEventRecord(ev[0], None), "rec")
        ok(cu.cuLaunchKernel(f, grid, 1, 1, 32 * warps, 1, 1, 0, None, params, None), "launch")
        ok(cu.cuEventRecord(ev[1], None), "rec")
        ok(cu.cuEventSynchronize(ev[1]), "sync")
        ms = C.c_float(); cu.cuEventElapsedTime(C.byref(ms), ev[0], ev[1])
        if i >= 2: ts.append(ms.value)
    t = statistics.median(ts)
    flops = grid * warps * iters * 4 * mt * nt * 2 * 16 * 8 * 16
    ldm_per_mma = (mt + nt / 2) / (mt * nt) if mode == "ldm" else 0
    print(f"{mode:4} MT={mt} NT={nt} warps={warps:2} x{blocks_per_sm} regs={regs.value:3} local={local.value:3} "
          f"ldmatrix/MMA={ldm_per_mma:.3f}  {t:8.3f} ms  {flops / t / 1e9:7.1f} TFLOP/s")
    cu.cuModuleUnload(mod)

configs = [
    ("pure", 2, 8, 4), ("pure", 2, 8, 8), ("pure", 2, 8, 12), ("pure", 2, 8, 16), ("pure", 2, 4, 8), ("pure", 2, 4, 16),
    ("ldm", 2, 4, 8), ("ldm", 2, 4, 12), ("ldm", 2, 4, 16),       # tma_mma_n64's warp tile (32 x 32)
    ("ldm", 2, 8, 8), ("ldm", 2, 8, 12),                          # n64t / n128's warp tile (32 x 64)
    ("ldm", 4, 4, 8), ("ldm", 4, 4, 12),                          # 64 vocab x 32 batch
    ("ldm", 4, 8, 4), ("ldm", 4, 8, 8),                           # 64 x 64 (128 accumulators)
]
for c in configs:
    run(*c)
