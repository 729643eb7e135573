//! The CPU backend's memory is bounded by its inputs (issue 11 items 1-2): a counting global
//! allocator records the peak of live heap bytes during each call. One test in its own binary, so
//! no other test's allocations count.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use flashsampling::{CpuBackend, Matrix, SamplingParams};
use half::bf16;

struct Counting;
static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards to the system allocator and only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // A request beyond 4 GiB is a bug here: refuse it (the caller aborts, the test fails) rather
        // than let overcommit hide it.
        if layout.size() > 4 << 30 {
            return std::ptr::null_mut();
        }
        let live = LIVE.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
        PEAK.fetch_max(live, Ordering::Relaxed);
        // SAFETY: forwarded.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if layout.size() > 4 << 30 {
            return std::ptr::null_mut();
        }
        let live = LIVE.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
        PEAK.fetch_max(live, Ordering::Relaxed);
        // SAFETY: forwarded.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        // SAFETY: forwarded.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// Peak heap bytes allocated during `f` beyond what was live before it.
fn peak_during(f: impl FnOnce()) -> usize {
    let base = LIVE.load(Ordering::Relaxed);
    PEAK.store(base, Ordering::Relaxed);
    f();
    PEAK.load(Ordering::Relaxed) - base
}

#[test]
fn cpu_memory_is_bounded_by_the_inputs() {
    // (B, D, V, block_v, threads): a tall hidden size with one vocab row (the old f32 tile was
    // block_v · D floats: 512 MiB here), a wide vocab with tiny tiles and many rows (the old
    // candidate buffer was B · V / 4 entries: 80 MB here), and defaults.
    for (b, d, v, bv, threads) in [
        (1usize, 1usize << 20, 1usize, 128usize, 2usize),
        (2000, 8, 20_000, 4, 2),
        (64, 256, 3000, 128, 4),
        (3, 4096, 700, 65_536, 8),
    ] {
        let hidden = vec![bf16::from_f32(0.5); b * d];
        let weight = vec![bf16::from_f32(0.25); v * d];
        let cpu = CpuBackend::new().with_block_v(bv).unwrap().with_threads(threads);
        let input_bytes = 2 * (b * d + v * d);
        let peak = peak_during(|| {
            let s = cpu.sample(Matrix::new(&hidden, b, d), Matrix::new(&weight, v, d), &SamplingParams::new(1.0, 1));
            assert!(s.unwrap().iter().all(|&t| (t as usize) < v));
        });
        // f32 copies: 2× the hidden states, at most 2× the weight rows of the workers' chunks (or a
        // 256 KiB chunk each); candidates and noise keys per row and worker; thread stacks are not
        // heap.
        let bound = 2 * input_bytes + threads * ((1 << 18) + 64 * b) + (1 << 20);
        eprintln!("B={b} D={d} V={v} block_v={bv} threads={threads}: peak {peak} bytes, bound {bound}");
        assert!(peak <= bound, "B={b} D={d} V={v} block_v={bv}: peak {peak} > {bound} bytes");
    }
}
