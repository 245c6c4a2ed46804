//! The block table's shared memory: QEMU's side writes it
//! ([`TableWriter`]), the client reads it ([`TableReader`]). What the words
//! mean, and the order in which a writer publishes them, is
//! `wire::blocks`; this module only makes the file, maps it and moves words
//! in and out.
//!
//! The table is a memfd named [`TABLE_MEMFD_NAME`], exactly
//! [`wire::blocks::FILE_BYTES`] long (288 MiB, sparse: only the pages
//! written cost memory, so it is never `fallocate`d), sealed against
//! shrinking, growing and further seals, and mapped shared. One per guest
//! process: every stream's hello passes it along (`wire::channel::dial`),
//! and the client keeps one reader per process.
//!
//! # Trust
//!
//! The reader trusts nothing in the file. Before mapping it, it checks that
//! the fd is a regular file of this user, sealed against shrinking and
//! growing (nobody can truncate it under the mapping, which would be a
//! `SIGBUS`), and exactly [`wire::blocks::FILE_BYTES`] long (which also
//! rules out a hugetlbfs file, whose size is a multiple of its huge page
//! size, and whose holes could `SIGBUS` when read). It maps it read-only,
//! reads every word with an atomic load, and checks every offset and count
//! it reads ([`wire::blocks::Table`]). A hostile writer can make it read
//! wrong entries, never read outside the mapping, panic or wait.
//!
//! # Forks
//!
//! A forked child inherits the parent's mapping, which is shared: entries
//! the child appended there would be the parent's too, under ids the parent
//! also hands out. [`TableWriter::copy_in_forked_child`] gives the child a
//! table of its own with the parent's entries up to the fork, mapped at the
//! same address.

use std::fmt;
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};

use wire::blocks::{
    encode_entry, entry_words, Entry, EntryError, Table, Words, CAPACITY, DATA_USED_WORD,
    DATA_WORDS, FILE_BYTES, HEADER_WORDS, MAGIC, MAX_BLOCK_INSNS, PUBLISHED_WORD, TABLE_VERSION,
};

use crate::error::{io_error, Error};
use crate::sys::{check_sealed_file, make_fd, memfd_create_named, open_proc_fd, seal, Sealed};
use crate::FdPlace;

/// The name block table memfds get (it shows in `/proc/<pid>/fd` as
/// `/memfd:cannoli-blocks (deleted)`).
pub const TABLE_MEMFD_NAME: &str = "cannoli-blocks";

/// Words in a table file.
const FILE_WORDS: usize = FILE_BYTES / 8;

const WHAT: &str = "the block table's memfd";

/// A shared mapping of a whole table file, unmapped on drop.
struct Map {
    ptr: NonNull<u64>,
}

// SAFETY: the mapping is plain shared memory that this process only touches
// with atomic accesses (see `TableWriter::word` and `TableReader::word`).
unsafe impl Send for Map {}
// SAFETY: as above.
unsafe impl Sync for Map {}

impl Map {
    /// Maps the first [`FILE_BYTES`] of `fd`, shared; writable if `write`.
    /// Nothing is populated: the file is sparse.
    fn new(fd: BorrowedFd<'_>, write: bool) -> io::Result<Map> {
        let prot = libc::PROT_READ | if write { libc::PROT_WRITE } else { 0 };
        // SAFETY: a new mapping wherever the kernel likes; it replaces
        // nothing.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                FILE_BYTES,
                prot,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Map {
            ptr: NonNull::new(p.cast()).expect("mmap does not return 0 for a NULL hint"),
        })
    }

    /// Word `i` (`i < FILE_WORDS`).
    #[inline]
    fn word(&self, i: usize) -> &AtomicU64 {
        assert!(i < FILE_WORDS);
        // SAFETY: i < FILE_WORDS, so the word is inside the mapping, which
        // lives as long as `self`; it is 8-byte aligned (the mapping is page
        // aligned); every access of this process to the mapping is atomic.
        unsafe { AtomicU64::from_ptr(self.ptr.as_ptr().add(i)) }
    }
}

impl Drop for Map {
    fn drop(&mut self) {
        // SAFETY: the mapping is ours; nothing refers to it once `self` goes.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), FILE_BYTES) };
    }
}

/// The writer's own counters (the file's copies are for the readers).
#[derive(Clone, Copy, Debug)]
struct Counts {
    published: u64,
    data_used: usize,
    /// Appends refused for good (a forked child whose copy failed must not
    /// write into its parent's table).
    stopped: bool,
}

/// QEMU's side of a block table: makes it, appends entries. `Send + Sync`.
pub struct TableWriter {
    map: Map,
    fd: OwnedFd,
    /// Index entries and data words this table has room for (the header's
    /// `capacity` and `data_words`).
    cap: usize,
    data: usize,
    counts: Mutex<Counts>,
}

impl fmt::Debug for TableWriter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TableWriter")
            .field("fd", &self.fd.as_raw_fd())
            .field("counts", &self.counts())
            .finish()
    }
}

/// Makes a sized, sealed table memfd where `place` puts it.
fn table_memfd(place: FdPlace) -> Result<File, Error> {
    let fd = make_fd(place, WHAT, || memfd_create_named(TABLE_MEMFD_NAME, WHAT))?;
    let file = File::from(fd);
    // Sparse on purpose: no fallocate (see the module doc).
    file.set_len(FILE_BYTES as u64)
        .map_err(|e| io_error(format_args!("resizing {WHAT} to {FILE_BYTES} bytes"), e))?;
    seal(&file, WHAT)?;
    Ok(file)
}

/// Writes `len` bytes at `src` to `fd` at offset `at`.
///
/// # Safety
/// `src` points to `len` readable bytes.
unsafe fn pwrite_all(fd: BorrowedFd<'_>, src: *const u8, len: usize, at: usize) -> io::Result<()> {
    let mut done = 0;
    while done < len {
        // SAFETY: [src + done, src + len) is readable (the caller's
        // contract); the kernel copies from it, so no Rust reference to
        // memory another process may be writing is made.
        let n = unsafe {
            libc::pwrite(
                fd.as_raw_fd(),
                src.add(done).cast(),
                len - done,
                (at + done) as libc::off_t,
            )
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if n == 0 {
            return Err(io::ErrorKind::WriteZero.into());
        }
        done += n as usize;
    }
    Ok(())
}

impl TableWriter {
    /// Makes a table: a memfd named [`TABLE_MEMFD_NAME`] of
    /// [`FILE_BYTES`] (sparse), sealed against shrinking, growing and
    /// further seals, put where `place` says (as for
    /// [`crate::Producer::create_memfd_at`]), mapped shared, with its
    /// header written and no entries.
    pub fn create(place: impl Into<FdPlace>) -> Result<TableWriter, Error> {
        Self::create_sized(place.into(), CAPACITY, DATA_WORDS)
    }

    /// Like [`TableWriter::create`] with room for `cap` entries and `data`
    /// data words (at most [`CAPACITY`] and [`DATA_WORDS`]; the file has
    /// the full size either way).
    fn create_sized(place: FdPlace, cap: usize, data: usize) -> Result<TableWriter, Error> {
        debug_assert!(cap <= CAPACITY && data <= DATA_WORDS);
        let file = table_memfd(place)?;
        let map = Map::new(file.as_fd(), true)
            .map_err(|e| io_error(format_args!("mapping {WHAT} ({FILE_BYTES} bytes)"), e))?;
        let w = TableWriter {
            map,
            fd: OwnedFd::from(file),
            cap,
            data,
            counts: Mutex::new(Counts {
                published: 0,
                data_used: 0,
                stopped: false,
            }),
        };
        w.write_header(0, 0);
        Ok(w)
    }

    /// Writes the header with `published` entries of `data_used` words.
    fn write_header(&self, published: u64, data_used: usize) {
        for (i, v) in [
            MAGIC,
            TABLE_VERSION,
            self.cap as u64,
            self.data as u64,
            published,
            data_used as u64,
        ]
        .into_iter()
        .enumerate()
        {
            self.map.word(i).store(v, Ordering::Release);
        }
    }

    fn counts(&self) -> Counts {
        *self.counts.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The table's memfd (to pass with a hello, or name by number over TCP).
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// Entries appended so far.
    pub fn published(&self) -> u64 {
        self.counts().published
    }

    /// Appends the entry of a block of `pcs` (instruction `i` reported as
    /// executed when `exec(i)`), and returns its id; `None` when `pcs` is
    /// empty or longer than [`MAX_BLOCK_INSNS`], or the table is full.
    /// The entry is in the file before the `published` count that covers
    /// it (release), as `wire::blocks` describes.
    pub fn append(&self, pcs: &[u64], exec: impl Fn(usize) -> bool) -> Option<u64> {
        let n = pcs.len();
        if n == 0 || n > MAX_BLOCK_INSNS {
            return None;
        }
        let words = entry_words(n);
        let mut buf = [0u64; entry_words(MAX_BLOCK_INSNS)];
        encode_entry(pcs, exec, &mut buf[..words]);
        let mut c = self.counts.lock().unwrap_or_else(PoisonError::into_inner);
        if c.stopped || c.published >= self.cap as u64 || words > self.data - c.data_used {
            return None;
        }
        let (id, at) = (c.published, c.data_used);
        let base = HEADER_WORDS + self.cap + at;
        for (i, &v) in buf[..words].iter().enumerate() {
            self.map.word(base + i).store(v, Ordering::Relaxed);
        }
        let used = at + words;
        self.map
            .word(DATA_USED_WORD)
            .store(used as u64, Ordering::Release);
        self.map
            .word(HEADER_WORDS + id as usize)
            .store(at as u64, Ordering::Relaxed);
        self.map
            .word(PUBLISHED_WORD)
            .store(id + 1, Ordering::Release);
        c.published = id + 1;
        c.data_used = used;
        Some(id)
    }

    /// In a child made by `fork(2)`: gives it a table of its own. Makes a
    /// new table memfd (sealed, put where `place` says), copies the header,
    /// the index and the data of the entries appended before the fork into
    /// it, maps it over the inherited mapping (`MAP_FIXED`, same address:
    /// pointers into the table stay valid) and closes the child's copy of
    /// the parent's fd. The parent's table is untouched. Uses only system
    /// calls and this writer's own memory (fine in the single-threaded
    /// child of a fork).
    ///
    /// On an error the writer appends nothing any more (it would write
    /// into the parent's table otherwise).
    pub fn copy_in_forked_child(&mut self, place: impl Into<FdPlace>) -> Result<(), Error> {
        // The lock may have been held by a parent thread that the child does
        // not have: take the counts as they are and start a fresh lock.
        let c = *self
            .counts
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner);
        self.counts = Mutex::new(Counts { stopped: true, ..c });
        if c.stopped {
            return Err(Error::InvalidArgument(
                "this block table stopped taking entries earlier".into(),
            ));
        }
        let file = table_memfd(place.into())?;
        let base = self.map.ptr.as_ptr() as *const u8;
        let index_bytes = (HEADER_WORDS + c.published as usize) * 8;
        let data_at = (HEADER_WORDS + self.cap) * 8;
        // SAFETY: both ranges are inside the mapping (published <= cap,
        // data_used <= data, and the header fits the file).
        let copied = unsafe {
            pwrite_all(file.as_fd(), base, index_bytes, 0).and_then(|()| {
                pwrite_all(file.as_fd(), base.add(data_at), c.data_used * 8, data_at)
            })
        };
        copied.map_err(|e| io_error(format_args!("copying the block table into {WHAT}"), e))?;
        // SAFETY: the range is this writer's own mapping of FILE_BYTES,
        // replaced by one of the same size; it keeps its address, so the
        // Map (and any pointer into it) stays valid.
        let p = unsafe {
            libc::mmap(
                base as *mut libc::c_void,
                FILE_BYTES,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_FIXED,
                file.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io_error(
                format_args!("mapping the child's copy of {WHAT} over the parent's"),
                io::Error::last_os_error(),
            ));
        }
        // The parent may have appended since the fork: the header says
        // what this copy holds.
        self.write_header(c.published, c.data_used);
        // Closes the child's copy of the parent's fd.
        self.fd = OwnedFd::from(file);
        self.counts = Mutex::new(Counts {
            stopped: false,
            ..c
        });
        Ok(())
    }
}

/// The client's side of a block table: a read-only mapping of a table file
/// checked as the module doc says. `Send + Sync`.
pub struct TableReader {
    map: Map,
    /// The header's `capacity` and `data_words`, checked against the file.
    cap: usize,
    data: usize,
    /// The file's `st_dev` and `st_ino`.
    id: (u64, u64),
}

impl fmt::Debug for TableReader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TableReader")
            .field("file", &self.id)
            .field("capacity", &self.cap)
            .field("data_words", &self.data)
            .field("published", &self.published())
            .finish()
    }
}

impl TableReader {
    /// Maps a table given an fd of it (received with a hello, or opened by
    /// [`TableReader::open_proc`]), after checking, before mapping
    /// anything, that it is a regular file of this user, sealed against
    /// shrinking and growing, exactly [`FILE_BYTES`] long; then maps it
    /// read-only and checks its header (magic, version, sizes). The fd is
    /// closed (the mapping stays).
    pub fn from_fd(fd: OwnedFd) -> Result<TableReader, Error> {
        let file = File::from(fd);
        let what = "the block table's fd";
        let meta = check_sealed_file(
            &file,
            what,
            Sealed {
                origin: "a block table is the memfd mempipe::TableWriter made",
                writer: "writer",
                how: "a block table must be made with mempipe::TableWriter, which seals it",
            },
            Error::TableRefused,
        )?;
        if meta.len() != FILE_BYTES as u64 {
            return Err(Error::TableRefused(format!(
                "{what} is {} bytes, not the {FILE_BYTES} bytes of a block table; the hook \
                 library and the client are from different cannoli versions, or it is not \
                 a block table",
                meta.len()
            )));
        }
        let map = Map::new(file.as_fd(), false)
            .map_err(|e| io_error(format_args!("mapping {what} ({FILE_BYTES} bytes)"), e))?;
        let mut r = TableReader {
            map,
            cap: 0,
            data: 0,
            id: (meta.dev(), meta.ino()),
        };
        let (cap, data) =
            Table::check_header(&r, FILE_WORDS).map_err(|e| Error::TableRefused(e.to_string()))?;
        (r.cap, r.data) = (cap, data);
        Ok(r)
    }

    /// Maps the table that process `pid` has open as fd `fd`, through
    /// `/proc/<pid>/fd/<fd>` (as [`crate::Consumer::open_proc`] does, but
    /// read-only), then as [`TableReader::from_fd`].
    pub fn open_proc(pid: i32, fd: i32) -> Result<TableReader, Error> {
        let file = open_proc_fd(
            pid,
            fd,
            "block table",
            false,
            Error::TableRefused,
            "a block table is the memfd mempipe::TableWriter made",
        )?;
        Self::from_fd(OwnedFd::from(file))
    }

    /// The file's `(st_dev, st_ino)`: two readers with the same one map the
    /// same table.
    pub fn file_id(&self) -> (u64, u64) {
        self.id
    }

    /// Entries published so far, as the file says (acquire: the entries
    /// below it are readable).
    pub fn published(&self) -> u64 {
        self.map.word(PUBLISHED_WORD).load(Ordering::Acquire)
    }

    /// Entry `id`, checked (see `wire::blocks::Table::entry`).
    pub fn entry(&self, id: u64) -> Result<Entry, EntryError> {
        let published = self.published();
        Table(self).entry(id, published, self.cap, self.data)
    }
}

impl Words for TableReader {
    #[inline]
    fn word(&self, i: usize) -> Option<u64> {
        (i < FILE_WORDS).then(|| self.map.word(i).load(Ordering::Relaxed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reader_of(w: &TableWriter) -> TableReader {
        TableReader::from_fd(w.fd().try_clone_to_owned().unwrap()).unwrap()
    }

    fn block(n: usize, salt: u64) -> Vec<u64> {
        (0..n as u64)
            .map(|i| 0x40_0000 + salt * 0x1000 + 4 * i)
            .collect()
    }

    #[test]
    fn entries_round_trip_through_the_fd() {
        let w = TableWriter::create(0).unwrap();
        let r = reader_of(&w);
        assert_eq!(r.published(), 0);
        assert_eq!(r.entry(0), Err(EntryError::NotPublished));
        let long = block(MAX_BLOCK_INSNS, 1);
        assert_eq!(w.append(&block(1, 0), |_| true), Some(0));
        assert_eq!(w.append(&long, |i| i % 3 == 0), Some(1));
        assert_eq!(w.append(&block(70, 2), |_| false), Some(2));
        assert_eq!((w.published(), r.published()), (3, 3));
        assert_eq!(r.entry(0).unwrap().pcs, block(1, 0));
        let e = r.entry(1).unwrap();
        assert_eq!(e.pcs, long);
        assert!((0..MAX_BLOCK_INSNS).all(|i| e.is_exec(i) == (i % 3 == 0)));
        let e = r.entry(2).unwrap();
        assert!(e.pcs == block(70, 2) && (0..70).all(|i| !e.is_exec(i)));
        assert_eq!(r.entry(3), Err(EntryError::NotPublished));
        assert_eq!(w.append(&[], |_| true), None);
        assert_eq!(w.append(&block(MAX_BLOCK_INSNS + 1, 0), |_| true), None);
        assert_eq!(r.published(), 3);
        // Shared between threads.
        let r = std::sync::Arc::new(r);
        let r2 = r.clone();
        std::thread::spawn(move || assert_eq!(r2.entry(0).unwrap().pcs, block(1, 0)))
            .join()
            .unwrap();
        // The same file seen twice has one id; sparse: little is allocated.
        assert_eq!(reader_of(&w).file_id(), r.file_id());
        let meta = File::from(w.fd().try_clone_to_owned().unwrap())
            .metadata()
            .unwrap();
        assert!(meta.blocks() * 512 < 1 << 20, "{} blocks", meta.blocks());
    }

    #[test]
    fn the_fd_goes_above_the_floor() {
        let w = TableWriter::create(700).unwrap();
        assert!(w.fd().as_raw_fd() >= 700);
        let r = TableReader::open_proc(std::process::id() as i32, w.fd().as_raw_fd()).unwrap();
        w.append(&[1, 2], |_| true).unwrap();
        assert_eq!(r.entry(0).unwrap().pcs, [1, 2]);
    }

    #[test]
    fn a_full_table_takes_no_more() {
        // Index full.
        let w = TableWriter::create_sized(FdPlace::Floor(0), 3, 1000).unwrap();
        for i in 0..3 {
            assert_eq!(w.append(&[i], |_| true), Some(i));
        }
        assert_eq!(w.append(&[9], |_| true), None);
        let r = reader_of(&w);
        assert_eq!(r.published(), 3);
        assert_eq!(r.entry(2).unwrap().pcs, [2]);
        // Data full: 3 words per 1-instruction entry, 10 words of room.
        let w = TableWriter::create_sized(FdPlace::Floor(0), 100, 10).unwrap();
        assert_eq!(w.append(&[1], |_| true), Some(0));
        assert_eq!(w.append(&[2], |_| true), Some(1));
        assert_eq!(
            w.append(&[3, 4], |_| true),
            Some(2),
            "4 words, 4 left: fits"
        );
        assert_eq!(w.published(), 3);
        assert_eq!(w.append(&[5], |_| true), None);
        let r = reader_of(&w);
        assert_eq!(r.entry(2).unwrap().pcs, [3, 4]);
        assert_eq!(r.word(DATA_USED_WORD), Some(10));
    }

    #[test]
    fn a_forked_child_gets_its_own_copy() {
        let mut w = TableWriter::create(0).unwrap();
        for i in 0..5 {
            w.append(&block(i + 1, i as u64), |k| k % 2 == 0).unwrap();
        }
        let parent = reader_of(&w);
        let at = w.map.ptr;
        let old_id = parent.file_id();
        w.copy_in_forked_child(0).unwrap();
        assert_eq!(w.map.ptr, at, "mapped at the same address");
        let child = reader_of(&w);
        assert_ne!(child.file_id(), old_id);
        assert_eq!(child.published(), 5);
        for i in 0..5 {
            assert_eq!(child.entry(i).unwrap(), parent.entry(i).unwrap());
        }
        // New entries go to the child's table only.
        assert_eq!(w.append(&[0xc0de], |_| true), Some(5));
        assert_eq!((child.published(), parent.published()), (6, 5));
        assert_eq!(child.entry(5).unwrap().pcs, [0xc0de]);
        assert_eq!(parent.entry(5), Err(EntryError::NotPublished));
        // Only what was written is allocated in the copy.
        let meta = File::from(w.fd().try_clone_to_owned().unwrap())
            .metadata()
            .unwrap();
        assert!(meta.blocks() * 512 < 1 << 20, "{} blocks", meta.blocks());
    }

    #[test]
    fn a_copy_reflects_the_childs_counts_not_the_parents() {
        // The parent appends after the fork (into the shared file); the
        // child's copy holds only what it had.
        let mut w = TableWriter::create(0).unwrap();
        w.append(&[1], |_| true).unwrap();
        let parent = reader_of(&w);
        let data_at = HEADER_WORDS + CAPACITY;
        // What a parent's append after the fork leaves in the shared file.
        for (i, v) in [(data_at + 3, 1), (data_at + 4, 7), (data_at + 5, 1)] {
            w.map.word(i).store(v, Ordering::Relaxed);
        }
        w.map.word(HEADER_WORDS + 1).store(3, Ordering::Relaxed);
        w.map.word(DATA_USED_WORD).store(6, Ordering::Relaxed);
        w.map.word(PUBLISHED_WORD).store(2, Ordering::Relaxed);
        w.copy_in_forked_child(0).unwrap();
        let child = reader_of(&w);
        assert_eq!(
            (child.published(), child.word(DATA_USED_WORD)),
            (1, Some(3))
        );
        assert_eq!(child.word(data_at + 4), Some(0));
        assert_eq!(parent.entry(1).unwrap().pcs, [7]);
    }

    /// A sealed (or not) memfd of `len` bytes with `header` at its start.
    fn memfd(len: u64, sealed: bool, header: &[u64]) -> OwnedFd {
        use std::os::unix::fs::FileExt;
        let f = File::from(memfd_create_named("test", "a test memfd").unwrap());
        f.set_len(len).unwrap();
        let bytes: Vec<u8> = header.iter().flat_map(|w| w.to_le_bytes()).collect();
        f.write_all_at(&bytes, 0).unwrap();
        if sealed {
            seal(&f, "a test memfd").unwrap();
        }
        OwnedFd::from(f)
    }

    fn refusal(fd: OwnedFd) -> String {
        match TableReader::from_fd(fd) {
            Err(e @ Error::TableRefused(_)) => e.to_string(),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn bad_files_are_refused_with_a_clear_error() {
        let good = [MAGIC, TABLE_VERSION, CAPACITY as u64, DATA_WORDS as u64];
        assert!(TableReader::from_fd(memfd(FILE_BYTES as u64, true, &good)).is_ok());
        let e = refusal(memfd(FILE_BYTES as u64, false, &good));
        assert!(e.contains("not sealed"), "{e}");
        let e = refusal(memfd(4096, true, &good));
        assert!(e.contains("is 4096 bytes, not the"), "{e}");
        let e = refusal(memfd(FILE_BYTES as u64, true, &[0, TABLE_VERSION]));
        assert!(e.contains("wrong magic"), "{e}");
        let e = refusal(memfd(FILE_BYTES as u64, true, &[MAGIC, 9]));
        assert!(e.contains("version 9"), "{e}");
        let e = refusal(memfd(
            FILE_BYTES as u64,
            true,
            &[MAGIC, TABLE_VERSION, CAPACITY as u64 + 1, 0],
        ));
        assert!(e.contains("sizes"), "{e}");
        assert!(e.starts_with("mempipe: refused the block table: "), "{e}");
        let e = refusal(File::open("/proc/self/exe").unwrap().into());
        assert!(e.contains("not sealed") && e.contains("not a memfd"), "{e}");
        let e = refusal(File::open("/dev/null").unwrap().into());
        assert!(e.contains("not a regular file"), "{e}");
        let e = TableReader::open_proc(0, 3).unwrap_err().to_string();
        assert!(e.contains("cannot name a block table"), "{e}");
    }

    #[test]
    fn a_hostile_table_gives_errors_not_panics() {
        let w = TableWriter::create(0).unwrap();
        w.append(&[1, 2, 3], |_| true).unwrap();
        let r = reader_of(&w);
        let data_at = HEADER_WORDS + CAPACITY;
        let set = |i: usize, v: u64| w.map.word(i).store(v, Ordering::Relaxed);
        set(PUBLISHED_WORD, u64::MAX);
        // An unwritten index word is 0: entry 0's words, wrong but harmless.
        assert_eq!(r.entry(1).unwrap().pcs, [1, 2, 3]);
        assert_eq!(r.entry(u64::MAX - 1), Err(EntryError::NotPublished));
        set(HEADER_WORDS, u64::MAX);
        assert_eq!(r.entry(0), Err(EntryError::Damaged));
        set(HEADER_WORDS, DATA_WORDS as u64 - 2);
        set(data_at + DATA_WORDS - 2, 5);
        assert_eq!(r.entry(0), Err(EntryError::Damaged));
        set(HEADER_WORDS, 0);
        set(data_at, 0);
        assert_eq!(r.entry(0), Err(EntryError::Damaged));
        assert_eq!(r.word(FILE_WORDS), None);
        assert_eq!(r.word(usize::MAX), None);
    }
}
