//! The process's descriptor limit: raised for the streams, kept for the
//! processes it starts.

/// Raises this process's soft limit on open descriptors to its hard limit
/// (as servers do): a stream costs the client a descriptor (its control
/// connection), and a program may have thousands of threads. Once per
/// process; the limit before is kept for the processes this one starts
/// ([`original_fd_limit`]), since a program that uses `select` needs
/// the usual one.
pub fn raise_fd_limit() {
    ORIGINAL_FD_LIMIT.get_or_init(|| {
        let mut lim = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit writes into `lim`.
        if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
            return None;
        }
        let before = lim.rlim_cur;
        if lim.rlim_cur < lim.rlim_max {
            lim.rlim_cur = lim.rlim_max;
            // SAFETY: setrlimit reads `lim`; raising the soft limit up to
            // the hard one needs no privilege.
            unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) };
        }
        Some(before)
    });
}

static ORIGINAL_FD_LIMIT: std::sync::OnceLock<Option<libc::rlim_t>> = std::sync::OnceLock::new();

/// This process's soft descriptor limit before [`raise_fd_limit`] raised
/// it (`None` if it did not run): give it back to a child before it execs.
pub fn original_fd_limit() -> Option<u64> {
    ORIGINAL_FD_LIMIT.get().copied().flatten()
}
