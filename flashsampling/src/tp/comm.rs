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

/// One NCCL communicator (non-blocking), owned: aborted when dropped.
pub(super) struct Comm {
    pub(super) raw: nccl::ncclComm_t,
    pub(super) aborted: bool,
}

unsafe impl Send for Comm {}

impl Comm {
    /// The communicator's pending state: `Ok(true)` ready, `Ok(false)` in progress.
    pub(super) fn poll(&self) -> Result<bool> {
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
    pub(super) unsafe fn all_gather(
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
    comms: &mut [&mut Comm],
    deadline: Instant,
    what: &'static str,
    timeout: Duration,
) -> Result<()> {
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
