//! Tensor-parallel sampling over a vocab-sharded LM head, through NCCL.
//!
//! Rank `r` holds global vocab rows `offset_r .. offset_r + rows_r` of the weight (`[V_r, D]`, the
//! layout of Megatron's and vLLM's vocab-parallel LM heads; the last shard may run past V: padding,
//! never scored). Each rank runs the fused kernel on its shard with its global offset — the noise of
//! token `i` is keyed by `i` — so its per-row winner is the whole head's restricted to its rows
//! ([`crate::shard`]). The ranks then all-gather, per row, only that result: token and score
//! (8 bytes), plus four floats with log-probabilities — never the logits — and every rank merges the
//! gathered results in rank order ([`flashsampling_kernels::ranks`], the `merge_ranks` kernel). Every
//! rank ends with the same tokens on its device, bit-identical to the one-GPU call with the same
//! seeds, streams and sample indices.
//!
//! **Top-k / top-p / min-p** (issue 13's certificate, over ranks): each rank's truncation step ends
//! early and exports, per sample row, its shard's [`RANK_TOP`](flashsampling_kernels::truncate::RANK_TOP)
//! largest processed logits with the bound of the rest; the exchange carries them after the
//! result words (`B·n × 1.5 KiB` per rank), and every rank runs the truncation step over the
//! merged lists with the merged log-sum-exp: the same certified rows, sampled with the same noise.
//! Rows the lists cannot certify go to the exact fallback: the host reads their count (one wait on
//! the truncation step, with the deadline; the only host round trip of a truncating call), each
//! rank computes their raw logits over its shard, those are all-gathered (`count × V_max` floats
//! per rank) and assembled into whole rows, and every rank samples them as on one GPU. Raw
//! log-probabilities come from the merged raw log-sum-exp (a changed token's raw logit is its
//! processed one: no soft-cap). Top log-probabilities come from the same merged lists or the
//! fallback's assembled rows. Not composed yet (typed [`Error::Unsupported`] before any launch):
//! sparse adjustments with truncation or top log-probabilities, raw log-probabilities with
//! truncation and a soft-cap; a shard entirely past V is [`Error::InvalidShards`] for a truncating
//! call.
//!
//! Two ways to run it:
//! - [`TpGroup`]: one process driving several local GPUs (tests, benchmarks);
//! - [`TpRank`]: one process per GPU, with rank, world size and the NCCL id ([`CommId`]) supplied by
//!   the caller — how serving engines run (`examples/tp_ranks.rs` starts two processes).
//!
//! **Failures do not hang.** Communicators are created non-blocking and every wait has a deadline
//! ([`TpRank::set_timeout`], default [`DEFAULT_TIMEOUT`]): a peer that never joins, fails before the
//! exchange or dies makes the others return [`Error::Timeout`] (their communicator is then aborted
//! and every later call returns [`Error::CommAborted`]). Inputs are validated on every rank before
//! any launch, and shard layouts (tiling, D, dtype, V) are checked across ranks when the group is
//! formed, so a bad layout is a typed error on every rank.
//!
//! **NVLink multicast.** Keep `NCCL_NVLS_ENABLE=0` in the environment of every process that uses
//! this module on machines where NVLink SHARP must stay off (this project's GPU hosts); the library
//! never creates multicast objects itself.

use std::ffi::{CStr, c_void};
use std::time::{Duration, Instant};

use cudarc::driver::{
    CudaEvent, CudaFunction, CudaSlice, CudaView, DevicePtr, DevicePtrMut, LaunchConfig, PushKernelArg, sys as cu,
};
use cudarc::nccl::sys as nccl;
use flashsampling_kernels::config::{MAX_DIM, MERGE_RANKS_ENTRY, MERGE_RANKS_THREADS};
use flashsampling_kernels::params::MergeRanksParams;
use flashsampling_kernels::truncate::RANK_UNITS;

use crate::error::{Error, Result};
use crate::gpu::{
    ByValue, DeviceMatrix, DeviceSamples, GpuBackend, SHARD_OFFSET_ALIGN, VocabRange, check_rank_truncation,
};
use crate::params::{Element, ElementType, LogProbs, Matrix, SamplingParams};
use crate::{Samples, VocabShard};

/// How long a rank waits for its peers (joining the group, the exchange) before it gives up.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

/// Words per row and rank in the exchange: tokens, scores, and with log-probabilities the processed
/// and raw log-probabilities and log-sum-exps.
const WORDS_PLAIN: usize = 2;
const WORDS_LOGPROBS: usize = 6;

/// An NCCL unique id: one rank (or the launcher) makes it, every rank of the group gets a copy.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct CommId([u8; 128]);

impl std::fmt::Debug for CommId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CommId({}…)", &self.to_hex()[..16])
    }
}

impl CommId {
    /// A fresh id (`ncclGetUniqueId`; it also opens the NCCL library). The calling process runs
    /// NCCL's bootstrap root for it: it must stay alive until every rank has joined.
    pub fn new() -> Result<Self> {
        ensure_nccl()?;
        let mut id = nccl::ncclUniqueId { internal: [0; 128] };
        // SAFETY: `id` is a valid out-pointer to a 128-byte id.
        check(unsafe { nccl::ncclGetUniqueId(&mut id) }, "ncclGetUniqueId", None)?;
        Ok(Self(id.internal.map(|c| c as u8)))
    }

    /// The id's 128 bytes.
    pub fn as_bytes(&self) -> &[u8; 128] {
        &self.0
    }

    /// An id from its 128 bytes (as another process made it).
    pub fn from_bytes(bytes: [u8; 128]) -> Self {
        Self(bytes)
    }

    /// The id as 256 hexadecimal digits (to pass it in an environment variable or argument).
    pub fn to_hex(&self) -> String {
        self.0.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// Parses [`Self::to_hex`]'s output.
    pub fn from_hex(s: &str) -> Result<Self> {
        let bad = || Error::InvalidCommId(s.chars().take(16).collect());
        // Exactly 256 hex digits: `from_str_radix` alone would also take a sign (`"+1"`).
        if s.len() != 256 || !s.bytes().all(|c| c.is_ascii_hexdigit()) {
            return Err(bad());
        }
        let mut out = [0u8; 128];
        for (i, o) in out.iter_mut().enumerate() {
            *o = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).map_err(|_| bad())?;
        }
        Ok(Self(out))
    }

    fn raw(&self) -> nccl::ncclUniqueId {
        nccl::ncclUniqueId { internal: self.0.map(|b| b as std::ffi::c_char) }
    }
}

/// Most ranks a layout or a group takes (NCCL's rank count is a C `int`; no machine has more GPUs).
pub const MAX_RANKS: usize = 1 << 16;

/// Whether the NCCL library can be opened (cudarc panics on a missing library, so this is checked
/// before any NCCL call).
pub fn nccl_available() -> bool {
    // SAFETY: only probes whether the library can be opened.
    unsafe { nccl::is_culib_present() }
}

fn ensure_nccl() -> Result<()> {
    if nccl_available() {
        Ok(())
    } else {
        Err(Error::NoNccl(
            "libnccl.so not found on the loader path (cudarc opens libnccl.so; where only libnccl.so.2 \
             exists, e.g. from the nvidia-nccl wheel, put a libnccl.so symlink to it on LD_LIBRARY_PATH)"
                .into(),
        ))
    }
}

/// NCCL's result as ours (`ncclInProgress` is not an error here: the caller polls).
fn check(r: nccl::ncclResult_t, call: &'static str, comm: Option<nccl::ncclComm_t>) -> Result<()> {
    use nccl::ncclResult_t as R;
    if matches!(r, R::ncclSuccess | R::ncclInProgress) {
        return Ok(());
    }
    // SAFETY: NCCL returns static C strings (or null) for these.
    let message = unsafe {
        let s = match comm {
            Some(c) => nccl::ncclGetLastError(c),
            None => nccl::ncclGetErrorString(r),
        };
        if s.is_null() { String::new() } else { CStr::from_ptr(s).to_string_lossy().into_owned() }
    };
    Err(Error::Nccl { call, code: r as i32, message })
}

/// The shard a rank holds: global vocab rows `offset .. offset + rows` of a `vocab`-entry head with
/// hidden size `d`, its weight and the hidden states of element type `elem`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ShardLayout {
    /// Global vocab index of the shard's first row (a multiple of [`SHARD_OFFSET_ALIGN`]).
    pub offset: usize,
    /// Rows of the shard's weight (the last shard's may run past `vocab`: padding).
    pub rows: usize,
    /// The model's vocabulary size V.
    pub vocab: usize,
    /// Hidden size D.
    pub d: usize,
    /// Element type of the weight shard and the hidden states (the same on every rank; a call
    /// with other elements is refused).
    pub elem: ElementType,
}

impl ShardLayout {
    /// The even split Megatron and vLLM use: `ceil(V / G)` rows per rank rounded up to a multiple
    /// of `pad` (≥ 4, a multiple of 4), the last shard padded past V; bf16 elements
    /// ([`Self::with_elem`] for others).
    pub fn even(vocab: usize, d: usize, ranks: usize, pad: usize) -> Result<Vec<Self>> {
        if ranks == 0 || pad == 0 || pad % SHARD_OFFSET_ALIGN != 0 {
            return Err(Error::InvalidShards { reason: "ranks and padding must be positive multiples of 4", at: 0 });
        }
        if vocab == 0 {
            return Err(Error::EmptyVocab);
        }
        let max = MAX_DIM as usize;
        if vocab > max {
            return Err(Error::TooLarge { what: "vocab size V", value: vocab, max });
        }
        if ranks > MAX_RANKS {
            return Err(Error::TooLarge { what: "ranks", value: ranks, max: MAX_RANKS });
        }
        // The padded shard and the padded head must stay within the kernels' limit: checked without
        // wrap-around (a release build wrapped `usize::MAX` to a 0-row shard).
        let rows = vocab.div_ceil(ranks).checked_next_multiple_of(pad).unwrap_or(usize::MAX);
        let total = rows.saturating_mul(ranks);
        if total > max {
            return Err(Error::TooLarge {
                what: "vocab rows of all shards (V padded to the ranks)",
                value: total,
                max,
            });
        }
        Ok((0..ranks).map(|r| Self { offset: r * rows, rows, vocab, d, elem: ElementType::Bf16 }).collect())
    }

    /// The layout with element type `elem`.
    pub fn with_elem(self, elem: ElementType) -> Self {
        Self { elem, ..self }
    }

    /// The exchange's word for the element type (1 = bf16, 2 = f16).
    fn elem_word(elem: ElementType) -> u64 {
        match elem {
            ElementType::Bf16 => 1,
            ElementType::F16 => 2,
        }
    }

    /// `Error::RankMismatch` (from rank `rank`'s view) unless a call's elements `elem` are the
    /// layout's.
    fn check_elem(&self, rank: usize, elem: ElementType) -> Result<()> {
        if elem != self.elem {
            return Err(Error::RankMismatch {
                rank,
                what: "element type (1 = bf16, 2 = f16) of this call's hidden states and weight",
                expected: Self::elem_word(self.elem) as usize,
                actual: Self::elem_word(elem) as usize,
            });
        }
        Ok(())
    }

    fn words(&self, rank: usize, world: usize) -> [u64; 8] {
        const MAGIC: u64 = 0x666c_6173_6873_6d70; // "flashsmp"
        [
            MAGIC,
            rank as u64,
            world as u64,
            self.offset as u64,
            self.rows as u64,
            self.vocab as u64,
            self.d as u64,
            Self::elem_word(self.elem),
        ]
    }
}

/// Checks that `layouts` (in rank order) tile `0 .. V` with shards on the GPU's alignment, agree on
/// V and D, and that the ranks agree on the dtype (`words` from the exchange). The same verdict on
/// every rank.
fn validate_layouts(layouts: &[ShardLayout]) -> Result<()> {
    let first = layouts.first().ok_or(Error::InvalidShards { reason: "no shards", at: 0 })?;
    let mut next = 0;
    for (rank, l) in layouts.iter().enumerate() {
        let elem = |l: &ShardLayout| ShardLayout::elem_word(l.elem) as usize;
        for (what, expected, actual) in [
            ("vocab size V", first.vocab, l.vocab),
            ("hidden size D", first.d, l.d),
            ("element type (1 = bf16, 2 = f16)", elem(first), elem(l)),
        ] {
            if expected != actual {
                return Err(Error::RankMismatch { rank, what, expected, actual });
            }
        }
        if l.rows == 0 {
            return Err(Error::InvalidShards { reason: "an empty shard", at: l.offset });
        }
        if l.offset != next {
            let reason = if l.offset > next { "a gap between shards" } else { "overlapping shards" };
            return Err(Error::InvalidShards { reason, at: next.min(l.offset) });
        }
        if l.offset % SHARD_OFFSET_ALIGN != 0 {
            return Err(Error::InvalidShards {
                reason: "a shard on the GPU must start at a multiple of 4 vocab rows",
                at: l.offset,
            });
        }
        next = l.offset + l.rows;
    }
    if first.vocab == 0 {
        return Err(Error::EmptyVocab);
    }
    if next < first.vocab {
        return Err(Error::InvalidShards { reason: "the shards end before V", at: next });
    }
    if next > MAX_DIM as usize {
        return Err(Error::TooLarge { what: "vocab rows of all shards", value: next, max: MAX_DIM as usize });
    }
    Ok(())
}

/// One NCCL communicator (non-blocking), owned: aborted when dropped.
struct Comm {
    raw: nccl::ncclComm_t,
    aborted: bool,
}

// SAFETY: an NCCL communicator may be used from any thread as long as calls on it are not
// concurrent; `Comm` is only used through `&mut`/owned access of one rank.
unsafe impl Send for Comm {}

impl Comm {
    /// The communicator's pending state: `Ok(true)` ready, `Ok(false)` in progress.
    fn poll(&self) -> Result<bool> {
        let mut state = nccl::ncclResult_t::ncclSuccess;
        // SAFETY: a live communicator; `state` is a valid out-pointer.
        check(unsafe { nccl::ncclCommGetAsyncError(self.raw, &mut state) }, "ncclCommGetAsyncError", Some(self.raw))?;
        match state {
            nccl::ncclResult_t::ncclSuccess => Ok(true),
            nccl::ncclResult_t::ncclInProgress => Ok(false),
            e => check(e, "NCCL (asynchronous error)", Some(self.raw)).map(|_| false),
        }
    }

    /// Enqueues `ncclAllGather` of `count` elements of `dtype` from `send` into `recv` (rank-major)
    /// on `stream`; a non-blocking communicator may still be enqueueing it when this returns (poll).
    ///
    /// # Safety
    /// `send` holds `count` and `recv` `G · count` elements, device addresses of `stream`'s context,
    /// alive until the all-gather completes.
    unsafe fn all_gather(
        &self,
        send: u64,
        recv: u64,
        count: usize,
        dtype: nccl::ncclDataType_t,
        stream: &cudarc::driver::CudaStream,
    ) -> Result<()> {
        // SAFETY: the caller's contract; a live communicator.
        let res = unsafe {
            nccl::ncclAllGather(
                send as *const c_void,
                recv as *mut c_void,
                count,
                dtype,
                self.raw,
                stream.cu_stream() as _,
            )
        };
        check(res, "ncclAllGather", Some(self.raw))
    }

    fn abort(&mut self) {
        if !self.aborted && !self.raw.is_null() {
            // SAFETY: a live communicator, not used after this.
            let _ = unsafe { nccl::ncclCommAbort(self.raw) };
            self.aborted = true;
        }
    }
}

impl Drop for Comm {
    fn drop(&mut self) {
        self.abort();
    }
}

/// The non-blocking configuration (NCCL's `NCCL_CONFIG_INITIALIZER` with `blocking = 0`).
fn nonblocking_config() -> nccl::ncclConfig_t {
    let undef = i32::MIN; // NCCL_CONFIG_UNDEF_INT
    nccl::ncclConfig_t {
        size: size_of::<nccl::ncclConfig_t>(),
        magic: 0xcafe_beef,
        version: 22800, // NCCL_VERSION(2, 28, 0): the struct's layout (cudarc's nccl-02028 bindings)
        blocking: 0,
        cgaClusterSize: undef,
        minCTAs: undef,
        maxCTAs: undef,
        netName: std::ptr::null(),
        splitShare: undef,
        trafficClass: undef,
        commName: std::ptr::null(),
        collnetEnable: undef,
        CTAPolicy: undef,
        shrinkShare: undef,
        nvlsCTAs: undef,
        nChannelsPerNetPeer: undef,
        nvlinkCentricSched: undef,
    }
}

/// Starts `ncclCommInitRankConfig` for `rank` on the calling thread's current device (returns
/// before the peers joined: poll the communicator).
fn start_init(gpu: &GpuBackend, rank: usize, world: usize, id: &CommId) -> Result<Comm> {
    gpu.context().bind_to_thread()?;
    let mut raw: nccl::ncclComm_t = std::ptr::null_mut();
    let mut config = nonblocking_config();
    // SAFETY: valid out-pointer and config; rank < world (checked by the callers).
    let r = unsafe { nccl::ncclCommInitRankConfig(&mut raw, world as i32, id.raw(), rank as i32, &mut config) };
    let comm = Comm { raw, aborted: false };
    check(r, "ncclCommInitRankConfig", None)?;
    Ok(comm)
}

/// The pause between two polls of a wait that has lasted `waited`: none (a spin) for the first
/// 200 µs — the usual wait, an NCCL enqueue or a kernel of a decode step — then short sleeps.
fn backoff(waited: Duration) {
    if waited < Duration::from_micros(200) {
        std::hint::spin_loop();
    } else if waited < Duration::from_millis(5) {
        std::thread::yield_now();
    } else {
        std::thread::sleep(Duration::from_micros(50));
    }
}

/// Polls `comms` until every one is ready or the deadline passes (then aborts them all).
fn wait_ready(comms: &mut [&mut Comm], deadline: Instant, what: &'static str, timeout: Duration) -> Result<()> {
    let start = Instant::now();
    loop {
        let mut ready = true;
        for i in 0..comms.len() {
            if comms[i].aborted {
                return Err(Error::CommAborted);
            }
            match comms[i].poll() {
                Ok(r) => ready &= r,
                Err(e) => {
                    // A communicator with an asynchronous error is unusable: abort them all.
                    comms.iter_mut().for_each(|c| c.abort());
                    return Err(e);
                }
            }
        }
        if ready {
            return Ok(());
        }
        if Instant::now() >= deadline {
            comms.iter_mut().for_each(|c| c.abort());
            return Err(Error::Timeout { what, ms: timeout.as_millis() as u64 });
        }
        backoff(start.elapsed());
    }
}

/// One rank's device buffers of the exchange.
struct Exchange {
    /// This rank's results `[K, rows]` (the fused launch writes them), with truncation followed by
    /// its top lists `[rows, RANK_UNITS]` (the truncation step's export).
    staging: CudaSlice<u32>,
    /// Every rank's results, `G` blocks like `staging` (the all-gather writes them).
    gathered: CudaSlice<u32>,
}

/// One rank's device buffers of a truncating call's fallback: the listed rows' raw logits over the
/// shard, every rank's (all-gathered), and the whole rows assembled from them.
struct FallbackExchange {
    /// `[count, v_max]` (this rank's shard uses `v_r` columns of each row's `v_max`).
    local: CudaSlice<f32>,
    /// `G` blocks like `local`.
    gathered: CudaSlice<f32>,
    /// `[count, V]`.
    full: CudaSlice<f32>,
    /// Rows they hold.
    rows: usize,
}

/// One rank of a vocab-parallel sampler: its GPU, its shard's layout and its NCCL communicator.
pub struct TpRank {
    gpu: GpuBackend,
    comm: Comm,
    rank: usize,
    world: usize,
    layout: ShardLayout,
    /// Every rank's layout (rank order).
    layouts: Vec<ShardLayout>,
    exchange: Option<Exchange>,
    fallback: Option<FallbackExchange>,
    merge: CudaFunction,
    done: CudaEvent,
    timeout: Duration,
}

impl std::fmt::Debug for TpRank {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TpRank")
            .field("rank", &self.rank)
            .field("world", &self.world)
            .field("layout", &self.layout)
            .finish()
    }
}

/// A call's shape as a rank sees it.
struct CallShape {
    /// Sample rows `B·n`.
    rows: usize,
    /// Exchange words per row.
    k: usize,
    /// Whether the ranks exchange top lists (top-k / top-p / min-p).
    truncating: bool,
}

impl CallShape {
    /// 32-bit words each rank sends: `K` per row, and with truncation each row's
    /// [`RANK_UNITS`] six-word units.
    fn words(&self) -> usize {
        self.rows * if self.truncating { WORDS_LOGPROBS * (1 + RANK_UNITS) } else { self.k }
    }
}

impl TpRank {
    /// Joins the group as rank `rank` of `world` on GPU `ordinal` (one process per GPU): every rank
    /// calls it with the same `id`, in any order, within `timeout` of each other. The ranks'
    /// layouts are then exchanged and checked (they must tile the vocabulary in rank order, agree on
    /// V and D): a bad layout is the same typed error on every rank.
    pub fn new(
        ordinal: usize,
        rank: usize,
        world: usize,
        id: &CommId,
        layout: ShardLayout,
        timeout: Duration,
    ) -> Result<Self> {
        ensure_nccl()?;
        if world == 0 || rank >= world || world > MAX_RANKS {
            return Err(Error::InvalidRank { rank, world });
        }
        let gpu = GpuBackend::new(ordinal)?;
        let comm = start_init(&gpu, rank, world, id)?;
        let mut me = Self::from_parts(gpu, comm, rank, world, layout, timeout)?;
        let deadline = Instant::now() + timeout;
        wait_ready(&mut [&mut me.comm], deadline, "joining the NCCL group", timeout)?;
        let layouts = me.exchange_layouts(deadline)?;
        validate_layouts(&layouts)?;
        me.layouts = layouts;
        Ok(me)
    }

    fn from_parts(
        gpu: GpuBackend,
        comm: Comm,
        rank: usize,
        world: usize,
        layout: ShardLayout,
        timeout: Duration,
    ) -> Result<Self> {
        let (module, _) = crate::gpu::load_portable_module(gpu.context())?;
        let merge = module.load_function(MERGE_RANKS_ENTRY)?;
        let done = gpu.context().new_event(None)?;
        let layouts = vec![layout];
        Ok(Self { gpu, comm, rank, world, layout, layouts, exchange: None, fallback: None, merge, done, timeout })
    }

    /// All-gathers every rank's layout words (blocking, with the deadline).
    fn exchange_layouts(&mut self, deadline: Instant) -> Result<Vec<ShardLayout>> {
        let stream = self.gpu.stream().clone();
        let send = stream.clone_htod(&self.layout.words(self.rank, self.world))?;
        let mut recv = stream.alloc_zeros::<u64>(8 * self.world)?;
        {
            let (s, _s) = send.device_ptr(&stream);
            let (r, _r) = recv.device_ptr_mut(&stream);
            // SAFETY: 8 u64 sent, 8·G received, on this rank's stream.
            unsafe { self.comm.all_gather(s, r, 8, nccl::ncclDataType_t::ncclUint64, &stream) }?;
        }
        wait_ready(&mut [&mut self.comm], deadline, "exchanging shard layouts", self.timeout)?;
        self.done.record(&stream)?;
        self.wait_event(deadline, "exchanging shard layouts")?;
        let words = stream.clone_dtoh(&recv)?;
        words
            .chunks(8)
            .enumerate()
            .map(|(rank, w)| {
                let expected = self.layout.words(rank, self.world);
                // Magic, rank, world and dtype must match what this rank would send for `rank`.
                for (i, what) in
                    [(0, "protocol"), (1, "rank"), (2, "world size"), (7, "element type (1 = bf16, 2 = f16)")]
                {
                    if w[i] != expected[i] {
                        return Err(Error::RankMismatch {
                            rank,
                            what,
                            expected: expected[i] as usize,
                            actual: w[i] as usize,
                        });
                    }
                }
                let (offset, rows, vocab, d) = (w[3] as usize, w[4] as usize, w[5] as usize, w[6] as usize);
                Ok(ShardLayout { offset, rows, vocab, d, elem: self.layout.elem })
            })
            .collect()
    }

    /// Polls `done` until it completes or the deadline passes (then aborts the communicator).
    fn wait_event(&mut self, deadline: Instant, what: &'static str) -> Result<()> {
        let start = Instant::now();
        loop {
            if self.comm.aborted {
                return Err(Error::CommAborted);
            }
            // SAFETY: a live event of this rank's context.
            match unsafe { cu::cuEventQuery(self.done.cu_event()) } {
                cu::CUresult::CUDA_SUCCESS => return Ok(()),
                cu::CUresult::CUDA_ERROR_NOT_READY => {}
                e => return Err(Error::Driver(cudarc::driver::DriverError(e))),
            }
            if let Err(e) = self.comm.poll() {
                self.comm.abort();
                return Err(e);
            }
            if Instant::now() >= deadline {
                self.comm.abort();
                return Err(Error::Timeout { what, ms: self.timeout.as_millis() as u64 });
            }
            backoff(start.elapsed());
        }
    }

    /// How long waits for peers last (joining, the exchange, [`Self::synchronize`]).
    pub fn set_timeout(&mut self, timeout: Duration) {
        self.timeout = timeout;
    }

    /// This rank's index.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// Ranks in the group.
    pub fn world(&self) -> usize {
        self.world
    }

    /// This rank's shard.
    pub fn layout(&self) -> ShardLayout {
        self.layout
    }

    /// This rank's GPU backend (its context and stream: allocate the shard, hidden states and
    /// outputs there).
    pub fn gpu(&self) -> &GpuBackend {
        &self.gpu
    }

    /// Samples: the fused kernel on this rank's shard, the all-gather of the per-row results and
    /// their merge, all on this rank's stream, asynchronous. Every rank of the group must call it
    /// with the same hidden states and parameters (the same batch); afterwards `out` holds the
    /// whole head's tokens (and log-probabilities) on every rank. Wait with [`Self::synchronize`]
    /// (which has a deadline) rather than synchronizing the stream directly, so that a failed peer
    /// is an error and not a hang. A call with top-k / top-p / min-p returns only after its
    /// truncation step (the host reads how many rows need the fallback, with the deadline) and,
    /// when some do, with their exchange enqueued.
    pub fn sample_device<T: Element>(
        &mut self,
        hidden: &DeviceMatrix<'_, T>,
        weight: &DeviceMatrix<'_, T>,
        params: &SamplingParams,
        mask: Option<&CudaView<'_, u32>>,
        out: &mut DeviceSamples,
    ) -> Result<()> {
        let call = self.launch_local(hidden, weight, params, mask, out)?;
        self.exchange(&call, out)
    }

    /// The exchange of a staged call: the all-gather (once the communicator has taken it: it is
    /// non-blocking), then the merge into `out`.
    fn exchange(&mut self, call: &CallShape, out: &mut DeviceSamples) -> Result<()> {
        self.enqueue_exchange(call)?;
        let deadline = Instant::now() + self.timeout;
        wait_ready(&mut [&mut self.comm], deadline, "the vocab-parallel exchange", self.timeout)?;
        self.launch_merge(call, out)?;
        if !call.truncating {
            return Ok(());
        }
        let count = self.fallback_rows(out)?;
        if count > 0 {
            self.fallback_local(count, out)?;
            self.enqueue_fallback_exchange(count)?;
            let deadline = Instant::now() + self.timeout;
            wait_ready(&mut [&mut self.comm], deadline, "the fallback's exchange", self.timeout)?;
            self.fallback_finish(count, out)?;
        }
        Ok(())
    }

    /// Waits until this rank's last call finished, at most the timeout; a peer that does not take
    /// part in the exchange makes it [`Error::Timeout`] (and aborts the communicator).
    pub fn synchronize(&mut self) -> Result<()> {
        let deadline = Instant::now() + self.timeout;
        self.wait_event(deadline, "the vocab-parallel exchange")
    }

    /// Validation and the rank-local launch into the exchange buffer.
    fn launch_local<T: Element>(
        &mut self,
        hidden: &DeviceMatrix<'_, T>,
        weight: &DeviceMatrix<'_, T>,
        params: &SamplingParams,
        mask: Option<&CudaView<'_, u32>>,
        out: &mut DeviceSamples,
    ) -> Result<CallShape> {
        if self.comm.aborted {
            return Err(Error::CommAborted);
        }
        let l = self.layout;
        l.check_elem(self.rank, T::TYPE)?;
        if weight.rows != l.rows || weight.cols != l.d {
            return Err(Error::LengthMismatch {
                buffer: "rank's weight shard (rows)",
                expected: l.rows,
                actual: weight.rows,
            });
        }
        let rows = hidden.rows.checked_mul(params.n as usize).filter(|&r| r > 0 && r <= MAX_DIM as usize);
        let rows = rows.ok_or(Error::TooLarge {
            what: "sample rows (B × n)",
            value: hidden.rows * params.n as usize,
            max: MAX_DIM as usize,
        })?;
        let truncating = self.check_truncation(params)?;
        let k = if params.logprobs == LogProbs::Off && !truncating { WORDS_PLAIN } else { WORDS_LOGPROBS };
        let call = CallShape { rows, k, truncating };
        if call.words() > u32::MAX as usize {
            return Err(Error::TooLarge {
                what: "exchange words per rank",
                value: call.words(),
                max: u32::MAX as usize,
            });
        }
        self.ensure_exchange(&call)?;
        let staging = self.exchange.as_mut().expect("allocated above");
        let (base, _guard) = staging.staging.device_ptr_mut(self.gpu.stream());
        let range = VocabRange { offset: l.offset, vocab: l.vocab };
        if l.offset >= l.vocab {
            // A shard entirely past V (padding only): no token, no mass.
            self.gpu.validate_launch(hidden, weight, params, mask, range)?;
            self.gpu.ensure_outputs(out, rows, k == WORDS_LOGPROBS)?;
            let fill = [
                u32::MAX,
                f32::NEG_INFINITY.to_bits(),
                f32::NAN.to_bits(),
                f32::NAN.to_bits(),
                f32::NEG_INFINITY.to_bits(),
                f32::NEG_INFINITY.to_bits(),
            ];
            for (field, value) in fill.iter().enumerate().take(k) {
                // SAFETY: `rows` words of the staging buffer (it holds 6·rows), on this stream.
                unsafe {
                    cu::cuMemsetD32Async(base + 4 * (field * rows) as u64, *value, rows, self.gpu.stream().cu_stream())
                }
                .result()?;
            }
            out.set_call(rows, params.n as usize, k == WORDS_LOGPROBS);
        } else {
            self.gpu.sample_device_in(hidden, weight, params, mask, out, range, Some(base))?;
        }
        Ok(call)
    }

    /// Whether the call runs the truncation step (top-k / top-p / min-p, top log-probabilities: the
    /// ranks then exchange top lists), after the checks of what such a call over shards cannot do
    /// yet (the same on every rank).
    fn check_truncation(&self, params: &SamplingParams) -> Result<bool> {
        let vocab = self.layout.vocab;
        check_rank_truncation(params, vocab)?;
        let truncating = params.truncates(vocab) || params.top_logprobs > 0;
        if let Some(l) = self.layouts.iter().find(|l| l.offset >= l.vocab).filter(|_| truncating) {
            return Err(Error::InvalidShards {
                reason: "top-k / top-p / min-p or top log-probabilities over shards need every shard to hold vocabulary rows",
                at: l.offset,
            });
        }
        Ok(truncating)
    }

    /// Room in the exchange buffers for `call` (at least the plain exchange with log-probabilities).
    fn ensure_exchange(&mut self, call: &CallShape) -> Result<()> {
        let cap = call.words().max(WORDS_LOGPROBS * call.rows);
        if self.exchange.as_ref().is_some_and(|e| e.staging.len() >= cap) {
            return Ok(());
        }
        let stream = self.gpu.stream();
        self.exchange =
            Some(Exchange { staging: stream.alloc_zeros(cap)?, gathered: stream.alloc_zeros(cap * self.world)? });
        Ok(())
    }

    /// Enqueues the all-gather of `[K, rows]` words per rank on this rank's stream (inside an
    /// NCCL group when a [`TpGroup`] drives several ranks).
    fn enqueue_exchange(&mut self, call: &CallShape) -> Result<()> {
        let stream = self.gpu.stream().clone();
        self.gpu.context().bind_to_thread()?;
        let ex = self.exchange.as_mut().expect("allocated by launch_local");
        let (s, _s) = ex.staging.device_ptr(&stream);
        let (r, _r) = ex.gathered.device_ptr_mut(&stream);
        let count = call.words();
        // SAFETY: `count` words sent from the staging buffer (sized for the call), G·count received;
        // both on this rank's stream and context.
        unsafe { self.comm.all_gather(s, r, count, nccl::ncclDataType_t::ncclUint32, &stream) }
    }

    /// The merge kernel: gathered results → `out`'s tokens, scores (and log-probabilities); with
    /// truncation then the truncation step over every rank's lists.
    fn launch_merge(&mut self, call: &CallShape, out: &mut DeviceSamples) -> Result<()> {
        let stream = self.gpu.stream().clone();
        let ex = self.exchange.as_ref().expect("allocated by launch_local");
        let (g, _g) = ex.gathered.device_ptr(&stream);
        // With truncation the merged raw log-sum-exps go where the truncation step reads them.
        let raw_lse = if call.truncating { self.gpu.truncation_raw_lse(out).unwrap_or(0) } else { 0 };
        let outs = out.output_ptrs(&stream, call.k == WORDS_LOGPROBS);
        let p = ByValue(MergeRanksParams {
            gathered: g as *const u32,
            tokens: outs.tokens as *mut u32,
            scores: outs.scores as *mut f32,
            logprobs: outs.logprobs as *mut f32,
            raw_logprobs: outs.raw_logprobs as *mut f32,
            logsumexp: outs.logsumexp as *mut f32,
            raw_logsumexp: raw_lse as *mut f32,
            b: call.rows as u32,
            g: self.world as u32,
            k: call.k as u32,
            rank_words: call.words() as u32,
        });
        let cfg = LaunchConfig {
            grid_dim: ((call.rows as u32).div_ceil(MERGE_RANKS_THREADS), 1, 1),
            block_dim: (MERGE_RANKS_THREADS, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: `gathered` holds G blocks of `call.words()` ≥ K·rows words; the outputs hold
        // `rows` entries each (`out` was sized by the local launch), the log-probability ones when
        // K = 6.
        unsafe { stream.launch_builder(&self.merge).arg(&p).launch(cfg) }?;
        drop(outs);
        if call.truncating {
            // Every rank's lists follow its `[6, rows]` words: units of six words.
            let tops = g + 4 * (WORDS_LOGPROBS * call.rows) as u64;
            let stride = call.words() / WORDS_LOGPROBS;
            self.gpu.launch_truncation_merge(out, tops, (self.world, stride))?;
        }
        self.done.record(&stream)?;
        Ok(())
    }

    /// The rows the truncation step over the merged lists left to the fallback (the same on every
    /// rank): waits for it (with the deadline), then reads their count.
    fn fallback_rows(&mut self, out: &DeviceSamples) -> Result<usize> {
        let deadline = Instant::now() + self.timeout;
        self.wait_event(deadline, "the vocab-parallel exchange")?;
        self.gpu.fallback_count(out)
    }

    /// Columns of the fallback's per-rank blocks: the most vocabulary rows a shard scores.
    fn fallback_columns(&self) -> usize {
        self.layouts.iter().map(|l| l.rows.min(l.vocab.saturating_sub(l.offset))).max().unwrap_or(0)
    }

    /// This rank's part of the fallback of `count` rows: their raw logits over its shard.
    fn fallback_local(&mut self, count: usize, out: &mut DeviceSamples) -> Result<()> {
        let (cols, vocab) = (self.fallback_columns(), self.layout.vocab);
        if self.fallback.as_ref().is_none_or(|f| f.rows < count) {
            let stream = self.gpu.stream();
            // SAFETY: each is written before it is read: `local` by `fallback_logits` (the columns
            // of this shard), `gathered` by the all-gather, `full` by the copies from `gathered`
            // (every column of the vocabulary: the shards tile it).
            self.fallback = Some(unsafe {
                FallbackExchange {
                    local: stream.alloc(count * cols)?,
                    gathered: stream.alloc(count * cols * self.world)?,
                    full: stream.alloc(count * vocab)?,
                    rows: count,
                }
            });
        }
        let stream = self.gpu.stream().clone();
        let fb = self.fallback.as_mut().expect("allocated above");
        let (local, _l) = fb.local.device_ptr_mut(&stream);
        self.gpu.launch_rank_fallback_logits(out, local)
    }

    /// Enqueues the all-gather of the fallback rows' logits (`[count, v_max]` per rank).
    fn enqueue_fallback_exchange(&mut self, count: usize) -> Result<()> {
        let stream = self.gpu.stream().clone();
        self.gpu.context().bind_to_thread()?;
        let n = count * self.fallback_columns();
        let fb = self.fallback.as_mut().expect("allocated by fallback_local");
        let (s, _s) = fb.local.device_ptr(&stream);
        let (r, _r) = fb.gathered.device_ptr_mut(&stream);
        // SAFETY: `n` floats sent from `local` (it holds `rows ≥ count` rows of `v_max`), `G·n`
        // received; both on this rank's stream and context.
        unsafe { self.comm.all_gather(s, r, n, nccl::ncclDataType_t::ncclFloat32, &stream) }
    }

    /// The fallback's rows assembled (each rank's columns copied to their global place) and
    /// sampled, as on one GPU.
    fn fallback_finish(&mut self, count: usize, out: &mut DeviceSamples) -> Result<()> {
        let stream = self.gpu.stream().clone();
        let cols = self.fallback_columns();
        let vocab = self.layout.vocab;
        let fb = self.fallback.as_mut().expect("allocated by fallback_local");
        let (gathered, _g) = fb.gathered.device_ptr(&stream);
        let (full, _f) = fb.full.device_ptr_mut(&stream);
        for (r, l) in self.layouts.iter().enumerate() {
            let width = l.rows.min(vocab - l.offset);
            let copy = cu::CUDA_MEMCPY2D {
                srcXInBytes: 0,
                srcY: 0,
                srcMemoryType: cu::CUmemorytype::CU_MEMORYTYPE_DEVICE,
                srcHost: std::ptr::null(),
                srcDevice: gathered + 4 * (r * count * cols) as u64,
                srcArray: std::ptr::null_mut(),
                srcPitch: 4 * width,
                dstXInBytes: 4 * l.offset,
                dstY: 0,
                dstMemoryType: cu::CUmemorytype::CU_MEMORYTYPE_DEVICE,
                dstHost: std::ptr::null_mut(),
                dstDevice: full,
                dstArray: std::ptr::null_mut(),
                dstPitch: 4 * vocab,
                WidthInBytes: 4 * width,
                Height: count,
            };
            // SAFETY: rank r's block holds `count` rows of `width ≤ v_max` floats at pitch `width`
            // (how `fallback_logits` stores a shard's rows); `full` holds `count` rows of `vocab`
            // floats and columns `offset .. offset + width ≤ vocab` of each; device memory of this
            // rank's context, on its stream.
            unsafe { cu::cuMemcpy2DAsync_v2(&copy, stream.cu_stream()) }.result()?;
        }
        self.gpu.launch_rank_fallback_sample(out, full)?;
        self.done.record(&stream)?;
        Ok(())
    }

    /// All-gathers `send` (`n` f32 on this rank) into `recv` (`G·n`, rank-major) on this rank's
    /// stream: the benchmark's "all-gather the logits" baseline.
    #[cfg(feature = "internals")]
    pub fn all_gather_f32(&mut self, send: &CudaView<'_, f32>, recv: &mut CudaSlice<f32>) -> Result<()> {
        let stream = self.gpu.stream().clone();
        if recv.len() < send.len() * self.world {
            return Err(Error::LengthMismatch {
                buffer: "all-gather output",
                expected: send.len() * self.world,
                actual: recv.len(),
            });
        }
        self.gpu.context().bind_to_thread()?;
        let (s, _s) = send.device_ptr(&stream);
        let (r, _r) = recv.device_ptr_mut(&stream);
        // SAFETY: n floats sent, G·n received (checked), on this rank's stream.
        unsafe { self.comm.all_gather(s, r, send.len(), nccl::ncclDataType_t::ncclFloat32, &stream) }?;
        // Non-blocking: the all-gather is on the stream only once the communicator is ready.
        let deadline = Instant::now() + self.timeout;
        wait_ready(&mut [&mut self.comm], deadline, "an all-gather", self.timeout)
    }

    /// Exchanges and merges per-row results that something other than the fused kernel computed
    /// (`tokens`, `scores` of `rows` rows on this rank, global indices): the benchmark's "Gumbel pass
    /// over the shard's logits, then all-gather the per-row maxima" baseline, with this module's
    /// exchange. The results land in `out`'s tokens and scores.
    #[cfg(feature = "internals")]
    pub fn exchange_results(&mut self, tokens: u64, scores: u64, rows: usize, out: &mut DeviceSamples) -> Result<()> {
        let call = CallShape { rows, k: WORDS_PLAIN, truncating: false };
        self.ensure_exchange(&call)?;
        let stream = self.gpu.stream().clone();
        {
            let ex = self.exchange.as_mut().expect("allocated above");
            let (base, _b) = ex.staging.device_ptr_mut(&stream);
            for (field, src) in [(0u64, tokens), (1, scores)] {
                // SAFETY: `rows` words from the caller's device buffers into the staging buffer.
                unsafe { cu::cuMemcpyDtoDAsync_v2(base + 4 * field * rows as u64, src, 4 * rows, stream.cu_stream()) }
                    .result()?;
            }
        }
        self.gpu.ensure_outputs(out, rows, false)?;
        out.set_call(rows, 1, false);
        self.exchange(&call, out)
    }

    /// The exchange alone (all-gather + merge of the last call's staged results): what the
    /// benchmark times as the exchange.
    #[cfg(feature = "internals")]
    pub fn exchange_only(&mut self, rows: usize, logprobs: bool, out: &mut DeviceSamples) -> Result<()> {
        let call = CallShape { rows, k: if logprobs { WORDS_LOGPROBS } else { WORDS_PLAIN }, truncating: false };
        self.ensure_exchange(&call)?;
        self.exchange(&call, out)
    }
}

/// Several local GPUs driven by one process: one [`TpRank`] per GPU, their collectives grouped.
pub struct TpGroup {
    ranks: Vec<TpRank>,
}

impl std::fmt::Debug for TpGroup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.ranks.iter()).finish()
    }
}

impl TpGroup {
    /// One rank per entry of `ordinals` (distinct GPUs), rank `r` holding `layouts[r]`; the
    /// layouts are checked first (tiling, V, D, alignment).
    pub fn new(ordinals: &[usize], layouts: &[ShardLayout], timeout: Duration) -> Result<Self> {
        ensure_nccl()?;
        if ordinals.len() != layouts.len() || ordinals.is_empty() {
            return Err(Error::LengthMismatch {
                buffer: "shard layouts (one per GPU)",
                expected: ordinals.len(),
                actual: layouts.len(),
            });
        }
        validate_layouts(layouts)?;
        let world = ordinals.len();
        let id = CommId::new()?;
        let gpus = ordinals.iter().map(|&o| GpuBackend::new(o)).collect::<Result<Vec<_>>>()?;
        // Several ranks from one thread: their inits are one NCCL group.
        // SAFETY: paired with the group end below.
        check(unsafe { nccl::ncclGroupStart() }, "ncclGroupStart", None)?;
        let comms: Vec<Result<Comm>> = gpus.iter().enumerate().map(|(r, g)| start_init(g, r, world, &id)).collect();
        // SAFETY: ends the group started above.
        check(unsafe { nccl::ncclGroupEnd() }, "ncclGroupEnd", None)?;
        let comms = comms.into_iter().collect::<Result<Vec<_>>>()?;
        let mut ranks = gpus
            .into_iter()
            .zip(comms)
            .enumerate()
            .map(|(r, (gpu, comm))| {
                let mut rank = TpRank::from_parts(gpu, comm, r, world, layouts[r], timeout)?;
                rank.layouts = layouts.to_vec();
                Ok(rank)
            })
            .collect::<Result<Vec<_>>>()?;
        let deadline = Instant::now() + timeout;
        let mut comms: Vec<&mut Comm> = ranks.iter_mut().map(|r| &mut r.comm).collect();
        wait_ready(&mut comms, deadline, "forming the NCCL group", timeout)?;
        Ok(Self { ranks })
    }

    /// The ranks (rank `r` at index `r`).
    pub fn ranks(&self) -> &[TpRank] {
        &self.ranks
    }

    /// Mutable access to the ranks (their GPUs' buffers, timeouts).
    pub fn ranks_mut(&mut self) -> &mut [TpRank] {
        &mut self.ranks
    }

    /// Samples on every rank: `hidden[r]`, `weights[r]`, `outs[r]` on rank `r`'s GPU (the same
    /// batch on every rank). Every rank's inputs are validated before any launch; then the local
    /// launches, the grouped all-gather and the merges are enqueued, asynchronous (with top-k /
    /// top-p / min-p the call waits for the truncation step, as [`TpRank::sample_device`] does).
    pub fn sample_device<T: Element>(
        &mut self,
        hidden: &[DeviceMatrix<'_, T>],
        weights: &[DeviceMatrix<'_, T>],
        params: &SamplingParams,
        masks: Option<&[CudaView<'_, u32>]>,
        outs: &mut [DeviceSamples],
    ) -> Result<()> {
        let g = self.ranks.len();
        for (buffer, len) in [
            ("hidden states (one per rank)", hidden.len()),
            ("weight shards (one per rank)", weights.len()),
            ("outputs (one per rank)", outs.len()),
            ("masks (one per rank)", masks.map_or(g, <[_]>::len)),
        ] {
            if len != g {
                return Err(Error::LengthMismatch { buffer, expected: g, actual: len });
            }
        }
        if let Some(h) = hidden.iter().find(|h| (h.rows, h.cols) != (hidden[0].rows, hidden[0].cols)) {
            return Err(Error::LengthMismatch {
                buffer: "hidden states (the same batch on every rank)",
                expected: hidden[0].rows,
                actual: h.rows,
            });
        }
        for (r, rank) in self.ranks.iter().enumerate() {
            rank.layout.check_elem(r, T::TYPE)?;
            rank.check_truncation(params)?;
            rank.gpu.validate_launch(
                &hidden[r],
                &weights[r],
                params,
                masks.map(|m| &m[r]),
                VocabRange { offset: rank.layout.offset, vocab: rank.layout.vocab },
            )?;
        }
        let mut calls = Vec::with_capacity(g);
        for (r, rank) in self.ranks.iter_mut().enumerate() {
            calls.push(rank.launch_local(&hidden[r], &weights[r], params, masks.map(|m| &m[r]), &mut outs[r])?);
        }
        // SAFETY: paired with the group end below.
        check(unsafe { nccl::ncclGroupStart() }, "ncclGroupStart", None)?;
        let enq: Result<()> =
            self.ranks.iter_mut().zip(&calls).try_for_each(|(rank, call)| rank.enqueue_exchange(call));
        // SAFETY: ends the group started above.
        let end = check(unsafe { nccl::ncclGroupEnd() }, "ncclGroupEnd", None);
        enq?;
        end?;
        let timeout = self.ranks[0].timeout;
        let deadline = Instant::now() + timeout;
        let mut comms: Vec<&mut Comm> = self.ranks.iter_mut().map(|r| &mut r.comm).collect();
        wait_ready(&mut comms, deadline, "the vocab-parallel exchange", timeout)?;
        for ((rank, call), out) in self.ranks.iter_mut().zip(&calls).zip(outs.iter_mut()) {
            rank.launch_merge(call, out)?;
        }
        if !calls[0].truncating {
            return Ok(());
        }
        // The fallback's rows (the same on every rank: the same merged lists), then their logits'
        // exchange, grouped like the first.
        let counts = self
            .ranks
            .iter_mut()
            .zip(outs.iter())
            .map(|(rank, out)| rank.fallback_rows(out))
            .collect::<Result<Vec<_>>>()?;
        let count = counts[0];
        if let Some((r, &c)) = counts.iter().enumerate().find(|&(_, &c)| c != count) {
            return Err(Error::RankMismatch { rank: r, what: "rows left to the fallback", expected: count, actual: c });
        }
        if count == 0 {
            return Ok(());
        }
        for (rank, out) in self.ranks.iter_mut().zip(outs.iter_mut()) {
            rank.fallback_local(count, out)?;
        }
        // SAFETY: paired with the group end below.
        check(unsafe { nccl::ncclGroupStart() }, "ncclGroupStart", None)?;
        let enq: Result<()> = self.ranks.iter_mut().try_for_each(|rank| rank.enqueue_fallback_exchange(count));
        // SAFETY: ends the group started above.
        let end = check(unsafe { nccl::ncclGroupEnd() }, "ncclGroupEnd", None);
        enq?;
        end?;
        let deadline = Instant::now() + timeout;
        let mut comms: Vec<&mut Comm> = self.ranks.iter_mut().map(|r| &mut r.comm).collect();
        wait_ready(&mut comms, deadline, "the fallback's exchange", timeout)?;
        for (rank, out) in self.ranks.iter_mut().zip(outs.iter_mut()) {
            rank.fallback_finish(count, out)?;
        }
        Ok(())
    }

    /// Waits for every rank's last call (each with its deadline).
    pub fn synchronize(&mut self) -> Result<()> {
        self.ranks.iter_mut().try_for_each(TpRank::synchronize)
    }

    /// Host buffers in and out, for tests and small tools: uploads `hidden` to every GPU and
    /// `shards[r]` to rank `r`, samples, and returns every rank's [`Samples`] (identical by
    /// construction; the tests check it).
    pub fn sample<T: Element>(
        &mut self,
        hidden: Matrix<'_, T>,
        shards: &[VocabShard<'_, T>],
        params: &SamplingParams,
    ) -> Result<Vec<Samples>> {
        if shards.len() != self.ranks.len() {
            return Err(Error::LengthMismatch {
                buffer: "weight shards (one per rank)",
                expected: self.ranks.len(),
                actual: shards.len(),
            });
        }
        for (rank, s) in self.ranks.iter().zip(shards) {
            if s.offset != rank.layout.offset || s.weight.rows != rank.layout.rows {
                return Err(Error::InvalidShards { reason: "a shard differs from its rank's layout", at: s.offset });
            }
        }
        let mut h = Vec::new();
        let mut w = Vec::new();
        let mut outs = Vec::new();
        for (rank, s) in self.ranks.iter().zip(shards) {
            let stream = rank.gpu.stream();
            h.push(stream.clone_htod(hidden.data)?);
            w.push(stream.clone_htod(s.weight.data)?);
            outs.push(rank.gpu.alloc_samples(hidden.rows * params.n as usize, s.weight.rows)?);
        }
        let hv: Vec<DeviceMatrix<'_, T>> =
            h.iter().map(|d| DeviceMatrix { data: d.as_view(), rows: hidden.rows, cols: hidden.cols }).collect();
        let wv: Vec<DeviceMatrix<'_, T>> = w
            .iter()
            .zip(shards)
            .map(|(d, s)| DeviceMatrix { data: d.as_view(), rows: s.weight.rows, cols: s.weight.cols })
            .collect();
        self.sample_device(&hv, &wv, params, None, &mut outs)?;
        self.synchronize()?;
        self.ranks
            .iter()
            .zip(&outs)
            .map(|(rank, out)| {
                let s = rank.gpu.stream();
                let mut samples = Samples::plain(s.clone_dtoh(&out.tokens())?, s.clone_dtoh(&out.scores())?);
                if params.logprobs != LogProbs::Off {
                    let get = |v: Option<CudaView<'_, f32>>| -> Result<Vec<f32>> {
                        Ok(s.clone_dtoh(&v.expect("a log-probability call fills them"))?)
                    };
                    samples.logprobs = Some(get(out.logprobs())?);
                    if params.logprobs == LogProbs::ProcessedAndRaw {
                        samples.raw_logprobs = Some(get(out.raw_logprobs())?);
                    }
                    samples.logsumexp = Some(get(out.logsumexp())?.into_iter().step_by(params.n as usize).collect());
                }
                if let Some(flags) = out.truncation_fallback() {
                    samples.truncation_fallback = Some(s.clone_dtoh(&flags)?.into_iter().map(|f| f != 0).collect());
                }
                samples.top_logprobs = rank.gpu.download_top_logprobs(out)?;
                Ok(samples)
            })
            .collect()
    }
}
