//! NCCL: loading the library, the unique id ([`CommId`]), a non-blocking communicator with deadlines.

use super::*;

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

    pub(super) fn raw(&self) -> nccl::ncclUniqueId {
        nccl::ncclUniqueId { internal: self.0.map(|b| b as std::ffi::c_char) }
    }
}

/// Whether the NCCL library can be opened (cudarc panics on a missing library, so this is checked
/// before any NCCL call).
pub fn nccl_available() -> bool {
    // SAFETY: only probes whether the library can be opened.
    unsafe { nccl::is_culib_present() }
}

pub(super) fn ensure_nccl() -> Result<()> {
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
pub(super) fn check(r: nccl::ncclResult_t, call: &'static str, comm: Option<nccl::ncclComm_t>) -> Result<()> {
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

/// What a rank needs of its communicator: all-gathers of 32-bit words on its stream, in rank order
/// (every exchange of this module is one: results, top lists, the fallback's logits, the layouts).
/// [`TpRank::new`](super::TpRank::new) and [`TpGroup`](super::TpGroup) make NCCL communicators of
/// their own; an engine that has one already passes it to
/// [`TpRank::with_collective`](super::TpRank::with_collective): its raw NCCL communicator as a
/// [`BorrowedNccl`], cudarc's `nccl::Comm` ([`CudarcComm`]), or its own all-gather through this
/// trait.
///
/// # Safety
/// An implementation's all-gather writes `recv` only below `world · words` words, where `world` is
/// the world size its rank was built with ([`TpRank::with_collective`](super::TpRank::with_collective)
/// checks it against [`Self::rank_and_world`] when that says), and gathers in rank order.
pub unsafe trait Collective: Send {
    /// Enqueues on `stream` the all-gather of `words` words from `send` into `recv`: rank `r`'s at
    /// `recv + 4·r·words`, for `r` in `0 .. world`. It may return before the communicator has taken
    /// the work (non-blocking communicators): [`Self::poll`] says when it has.
    ///
    /// # Safety
    /// `send` holds `words` and `recv` `world · words` words of device memory of `stream`'s context,
    /// which stay allocated until the all-gather completes on `stream`.
    unsafe fn all_gather_words(&mut self, send: u64, recv: u64, words: usize, stream: &CudaStream) -> Result<()>;

    /// The communicator's own rank and world size, when it can tell:
    /// [`TpRank::with_collective`](super::TpRank::with_collective) refuses a mismatch
    /// ([`Error::RankMismatch`]). `None` (the default): the implementation vouches for them (see the
    /// trait's safety section).
    fn rank_and_world(&self) -> Result<Option<(usize, usize)>> {
        Ok(None)
    }

    /// Whether everything enqueued has been taken (`Ok(false)`: still in progress); an error of the
    /// communicator. A blocking one is always ready (the default).
    fn poll(&mut self) -> Result<bool> {
        Ok(true)
    }

    /// Gives up after a timeout or an error: every later call of the rank is [`Error::CommAborted`].
    /// An owned NCCL communicator is aborted; a borrowed one is only left alone (its owner decides).
    fn abort(&mut self);

    /// Whether [`Self::abort`] was called.
    fn is_aborted(&self) -> bool;
}

/// One NCCL communicator (non-blocking), owned: aborted when dropped.
pub(super) struct Comm {
    pub(super) raw: nccl::ncclComm_t,
    pub(super) aborted: bool,
}

// SAFETY: an NCCL communicator may be used from any thread as long as calls on it are not
// concurrent; `Comm` is only used through `&mut`/owned access of one rank.
unsafe impl Send for Comm {}

// SAFETY: NCCL's all-gather writes `world · count` elements, rank-major; this communicator was
// created (`start_init`) with the rank's own rank and world size.
unsafe impl Collective for Comm {
    unsafe fn all_gather_words(&mut self, send: u64, recv: u64, words: usize, stream: &CudaStream) -> Result<()> {
        // SAFETY: forwarded contract.
        unsafe { self.all_gather(send, recv, words, nccl::ncclDataType_t::ncclUint32, stream) }
    }

    fn poll(&mut self) -> Result<bool> {
        Comm::poll(self)
    }

    fn abort(&mut self) {
        Comm::abort(self)
    }

    fn is_aborted(&self) -> bool {
        self.aborted
    }
}

/// An NCCL communicator the caller owns (an engine's: vLLM's or SGLang's PyNcclCommunicator, a
/// `torch.distributed` process group's, one from `ncclCommInitRank`), used for the exchange and
/// never destroyed or aborted here: after a timeout the rank only stops using it.
#[derive(Debug)]
pub struct BorrowedNccl {
    raw: nccl::ncclComm_t,
    given_up: bool,
}

// SAFETY: as for `Comm`: NCCL communicators may be used from any thread, not concurrently; the
// caller's contract (`BorrowedNccl::new`) keeps other users from calling it concurrently.
unsafe impl Send for BorrowedNccl {}

impl BorrowedNccl {
    /// Wraps the raw communicator `comm` (`ncclComm_t`).
    ///
    /// # Safety
    /// `comm` is a live NCCL communicator (blocking or not) of the device of the rank's
    /// [`GpuBackend`] (its rank and world size are checked against the ones given to
    /// [`TpRank::with_collective`](super::TpRank::with_collective)), created by the NCCL library
    /// this crate loads (`libnccl.so` on the loader path, through cudarc: not another copy of NCCL
    /// in the process, e.g. one a Python wheel loaded as `libnccl.so.2` from elsewhere); it outlives
    /// the rank, and nothing else issues collectives on it while a rank call is in progress (the
    /// exchange must pair across ranks).
    pub unsafe fn new(comm: *mut std::ffi::c_void) -> Self {
        Self { raw: comm as nccl::ncclComm_t, given_up: false }
    }
}

// SAFETY: NCCL's all-gather writes `world · count` elements, rank-major, `world` being the
// communicator's size, which `rank_and_world` reports (ncclCommCount) for `with_collective`'s check.
unsafe impl Collective for BorrowedNccl {
    unsafe fn all_gather_words(&mut self, send: u64, recv: u64, words: usize, stream: &CudaStream) -> Result<()> {
        ensure_nccl()?;
        // SAFETY: the caller's buffers (the trait's contract), a live communicator (`new`'s).
        unsafe { all_gather_raw(self.raw, (send, recv, words), nccl::ncclDataType_t::ncclUint32, stream) }
    }

    fn rank_and_world(&self) -> Result<Option<(usize, usize)>> {
        ensure_nccl()?;
        let (mut rank, mut world) = (0, 0);
        // SAFETY: a live communicator (`new`'s contract); valid out-pointers.
        check(unsafe { nccl::ncclCommUserRank(self.raw, &mut rank) }, "ncclCommUserRank", Some(self.raw))?;
        // SAFETY: as above.
        check(unsafe { nccl::ncclCommCount(self.raw, &mut world) }, "ncclCommCount", Some(self.raw))?;
        Ok(Some((rank as usize, world as usize)))
    }

    fn poll(&mut self) -> Result<bool> {
        // SAFETY: a live communicator (`new`'s contract).
        unsafe { poll_raw(self.raw) }
    }

    fn abort(&mut self) {
        self.given_up = true;
    }

    fn is_aborted(&self) -> bool {
        self.given_up
    }
}

/// cudarc's communicator (`cudarc::nccl::Comm`) as a rank's collective: its all-gather runs on the
/// communicator's own stream, which waits for the rank's stream first, and the rank's stream waits
/// for it after (nothing when they are one stream). cudarc's communicators are blocking; `abort`
/// only stops the rank using it (cudarc aborts it when it is dropped).
#[derive(Debug)]
pub struct CudarcComm {
    comm: cudarc::nccl::Comm,
    given_up: bool,
}

// SAFETY: as for `Comm`: an NCCL communicator may be used from any thread, not concurrently; the
// wrapper is only used through `&mut` (one rank), and cudarc's stream handle is `Send`.
unsafe impl Send for CudarcComm {}

impl CudarcComm {
    /// Wraps `comm`; its rank and world size must be the ones given to
    /// [`TpRank::with_collective`](super::TpRank::with_collective).
    pub fn new(comm: cudarc::nccl::Comm) -> Self {
        Self { comm, given_up: false }
    }

    /// The communicator back.
    pub fn into_inner(self) -> cudarc::nccl::Comm {
        self.comm
    }
}

// SAFETY: cudarc's all-gather writes `world_size() · words` words, rank-major; `rank_and_world`
// reports its rank and world size for `with_collective`'s check.
unsafe impl Collective for CudarcComm {
    unsafe fn all_gather_words(&mut self, send: u64, recv: u64, words: usize, stream: &CudaStream) -> Result<()> {
        let own = self.comm.stream();
        let other = own.cu_stream() != stream.cu_stream();
        if other {
            own.join(stream)?;
        }
        let world = self.comm.world_size();
        // SAFETY: the trait's contract: `send` holds `words` and `recv` `world · words` words of this
        // context's memory, alive until the all-gather completes (the rank's stream waits for it
        // below). The slices are leaked, never freed: cudarc only drops their events.
        let (s, mut r) =
            unsafe { (own.upgrade_device_ptr::<u32>(send, words), own.upgrade_device_ptr::<u32>(recv, world * words)) };
        let res = self.comm.all_gather(&s, &mut r);
        let _ = (s.leak(), r.leak());
        res.map_err(|e| Error::Nccl { call: "ncclAllGather (cudarc)", code: e.0 as i32, message: format!("{e:?}") })?;
        if other {
            stream.join(&own)?;
        }
        Ok(())
    }

    fn rank_and_world(&self) -> Result<Option<(usize, usize)>> {
        Ok(Some((self.comm.rank(), self.comm.world_size())))
    }

    fn abort(&mut self) {
        self.given_up = true;
    }

    fn is_aborted(&self) -> bool {
        self.given_up
    }
}

/// A communicator's pending state: `Ok(true)` ready, `Ok(false)` in progress, or its error.
///
/// # Safety
/// `raw` is a live NCCL communicator.
unsafe fn poll_raw(raw: nccl::ncclComm_t) -> Result<bool> {
    let mut state = nccl::ncclResult_t::ncclSuccess;
    // SAFETY: a live communicator (the caller's contract); `state` is a valid out-pointer.
    check(unsafe { nccl::ncclCommGetAsyncError(raw, &mut state) }, "ncclCommGetAsyncError", Some(raw))?;
    match state {
        nccl::ncclResult_t::ncclSuccess => Ok(true),
        nccl::ncclResult_t::ncclInProgress => Ok(false),
        e => check(e, "NCCL (asynchronous error)", Some(raw)).map(|_| false),
    }
}

/// Enqueues `ncclAllGather` of `count` elements of `dtype` from `send` into `recv` (rank-major) on
/// `stream` through `raw`.
///
/// # Safety
/// `raw` is a live communicator; `send` holds `count` and `recv` `world · count` elements, device
/// addresses of `stream`'s context, alive until the all-gather completes.
unsafe fn all_gather_raw(
    raw: nccl::ncclComm_t,
    (send, recv, count): (u64, u64, usize),
    dtype: nccl::ncclDataType_t,
    stream: &CudaStream,
) -> Result<()> {
    // SAFETY: the caller's contract.
    let res = unsafe {
        nccl::ncclAllGather(send as *const c_void, recv as *mut c_void, count, dtype, raw, stream.cu_stream() as _)
    };
    check(res, "ncclAllGather", Some(raw))
}

impl Comm {
    /// The communicator's pending state: `Ok(true)` ready, `Ok(false)` in progress.
    pub(super) fn poll(&self) -> Result<bool> {
        // SAFETY: a live communicator (owned, aborted only when marked so).
        unsafe { poll_raw(self.raw) }
    }

    /// Enqueues `ncclAllGather` of `count` elements of `dtype` from `send` into `recv` (rank-major)
    /// on `stream`; a non-blocking communicator may still be enqueueing it when this returns (poll).
    ///
    /// # Safety
    /// `send` holds `count` and `recv` `G · count` elements, device addresses of `stream`'s context,
    /// alive until the all-gather completes.
    pub(super) unsafe fn all_gather(
        &self,
        send: u64,
        recv: u64,
        count: usize,
        dtype: nccl::ncclDataType_t,
        stream: &cudarc::driver::CudaStream,
    ) -> Result<()> {
        // SAFETY: the caller's contract; a live communicator.
        unsafe { all_gather_raw(self.raw, (send, recv, count), dtype, stream) }
    }

    pub(super) fn abort(&mut self) {
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
pub(super) fn nonblocking_config() -> nccl::ncclConfig_t {
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
pub(super) fn start_init(gpu: &GpuBackend, rank: usize, world: usize, id: &CommId) -> Result<Comm> {
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
pub(super) fn backoff(waited: Duration) {
    if waited < Duration::from_micros(200) {
        std::hint::spin_loop();
    } else if waited < Duration::from_millis(5) {
        std::thread::yield_now();
    } else {
        std::thread::sleep(Duration::from_micros(50));
    }
}

/// Polls `comms` until every one is ready or the deadline passes (then aborts them all).
pub(super) fn wait_ready(
    comms: &mut [&mut Box<dyn Collective>],
    deadline: Instant,
    what: &'static str,
    timeout: Duration,
) -> Result<()> {
    let start = Instant::now();
    loop {
        let mut ready = true;
        for i in 0..comms.len() {
            if comms[i].is_aborted() {
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
