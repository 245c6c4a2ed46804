//! The memory a ring lives in: mapped wherever the kernel likes (through
//! `memmap2`), or, for a producer that must not move its process's other
//! mappings, at an address range its caller reserved.
//!
//! Why the second kind exists: a QEMU linux-user guest's mappings come from
//! host `mmap`, so a ring mapped wherever the kernel likes takes the gap the
//! guest's next mapping would have had, and tracing would move the guest.

use std::io;
use std::os::fd::AsRawFd;
use std::ptr::NonNull;

use memmap2::{MmapOptions, MmapRaw};

pub(crate) enum Mapping {
    /// Placed by the kernel; unmapped on drop.
    Anywhere(MmapRaw),
    /// Placed in a range the caller reserved; on drop the range is reserved
    /// again (inaccessible, no memory behind it) for the caller to reuse.
    Reserved { ptr: NonNull<u8>, len: usize },
}

// SAFETY: the mapping is plain shared memory; who may touch which bytes is
// the ring protocol's business, not the mapping's.
unsafe impl Send for Mapping {}
// SAFETY: as above; `&Mapping` hands out only raw pointers.
unsafe impl Sync for Mapping {}

impl Mapping {
    /// Maps `len` bytes of `file` shared; at `at` if given.
    ///
    /// Not populated (nor is the consumer's mapping): a page comes in when
    /// either end first touches it, and the file's memory is already
    /// allocated (`fallocate`), so a fault never finds it missing.
    /// Populating cost every launch the zeroing of the whole ring (4 MB by
    /// default) before the guest's first instruction, though a short run
    /// fills a chunk or two; a long run's first lap takes the same faults
    /// spread over its run (measured: no change in the bench's rows).
    ///
    /// # Safety
    /// `at`, if given, must be the start of at least `len` bytes of address
    /// space the caller reserved for this and does not otherwise use: they
    /// are replaced (`MAP_FIXED`).
    pub(crate) unsafe fn map(
        file: &impl AsRawFd,
        len: usize,
        at: Option<NonNull<u8>>,
    ) -> io::Result<Mapping> {
        let Some(at) = at else {
            return MmapOptions::new()
                .len(len)
                .map_raw(file)
                .map(Mapping::Anywhere);
        };
        // SAFETY: the caller owns [at, at + len) (see above), so replacing
        // whatever is mapped there affects nobody else.
        let p = unsafe {
            libc::mmap(
                at.as_ptr().cast(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_FIXED,
                file.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Mapping::Reserved { ptr: at, len })
    }

    pub(crate) fn as_ptr(&self) -> *const u8 {
        self.as_mut_ptr()
    }

    pub(crate) fn as_mut_ptr(&self) -> *mut u8 {
        match self {
            Mapping::Anywhere(m) => m.as_mut_ptr(),
            Mapping::Reserved { ptr, .. } => ptr.as_ptr(),
        }
    }

    pub(crate) fn len(&self) -> usize {
        match self {
            Mapping::Anywhere(m) => m.len(),
            Mapping::Reserved { len, .. } => *len,
        }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        if let Mapping::Reserved { ptr, len } = *self {
            // SAFETY: [ptr, ptr + len) is this mapping's range; turning it
            // back into a reservation ends every use of the ring's memory,
            // which the ring's owner no longer makes once it drops this.
            unsafe {
                libc::mmap(
                    ptr.as_ptr().cast(),
                    len,
                    libc::PROT_NONE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED | libc::MAP_NORESERVE,
                    -1,
                    0,
                );
            }
        }
    }
}

/// Reserves `len` bytes of inaccessible address space, as a producer's
/// caller does, for a test to place a ring in; never freed.
#[cfg(test)]
pub(crate) fn reserve_for_test(len: usize) -> *mut libc::c_void {
    // SAFETY: a fresh anonymous reservation that nothing else refers to.
    let res = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_NONE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    assert_ne!(res, libc::MAP_FAILED);
    res
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reserved_mappings_land_where_asked_and_stay_reserved() {
        let len = 3 * 4096;
        let res = reserve_for_test(len);
        let at = NonNull::new(res.cast::<u8>()).unwrap();
        let file = tempfile_in_shm(len);
        // SAFETY: `at` is our reservation of `len` bytes.
        let m = unsafe { Mapping::map(&file, len, Some(at)) }.unwrap();
        assert_eq!(m.as_ptr(), at.as_ptr() as *const u8);
        // SAFETY: the mapping is readable and writable, len bytes long.
        unsafe { m.as_mut_ptr().add(len - 1).write(7) };
        drop(m);
        // The range is reserved again: mapping over it without MAP_FIXED at
        // that hint does not get it.
        // SAFETY: probing with a hint, then unmapping what we got.
        let p = unsafe {
            libc::mmap(
                res,
                4096,
                libc::PROT_READ,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(p, res);
        // SAFETY: both are ours.
        unsafe {
            libc::munmap(p, 4096);
            libc::munmap(res, len);
        }
    }

    fn tempfile_in_shm(len: usize) -> std::fs::File {
        let path = std::env::temp_dir().join(format!("mempipe-map-test-{}", std::process::id()));
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .unwrap();
        f.set_len(len as u64).unwrap();
        let _ = std::fs::remove_file(&path);
        f
    }
}
