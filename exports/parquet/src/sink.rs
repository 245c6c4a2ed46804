// SPDX-License-Identifier: GPL-2.0-or-later
//! Where a large table's part file goes: whole, aligned [`BUF`]-byte
//! writes, straight to the disk (`O_DIRECT`) where the filesystem allows.
//!
//! Why: a gigabyte of output through the page cache in small writes cost
//! more CPU than any encoder on the project's VM. Each 8 KiB write that
//! ends inside a new page makes ext4 zero the rest of it first, and every
//! new page-cache page is a fresh page of guest memory: `dd` of 1 GB took
//! 6-18 s of system time buffered and 0.15 s with `oflag=direct`. The
//! export reads its own output never, so the page cache buys nothing here.
//! Where `O_DIRECT` is refused (tmpfs), the same aligned writes go through
//! the page cache. The last piece is padded to the alignment too, and the
//! file then cut to its length.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;

/// Bytes per write: a multiple of any logical block size.
pub const BUF: usize = 4 << 20;
/// The alignment `O_DIRECT` asks of buffers, lengths and offsets.
const ALIGN: usize = 4096;

/// A file written in aligned [`BUF`]-byte pieces; [`Sink::finish`] writes
/// the rest, padded to [`ALIGN`] bytes, and cuts the file to its length.
pub struct Sink {
    /// Opened with `O_DIRECT` where the filesystem allows it.
    file: File,
    /// `BUF + ALIGN` bytes, of which `BUF` from `start` are aligned.
    mem: Vec<u8>,
    start: usize,
    len: usize,
    /// Bytes written to the file so far (a multiple of `BUF`).
    written: u64,
}

impl Sink {
    pub fn create(path: &Path) -> io::Result<Sink> {
        let direct = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .custom_flags(libc::O_DIRECT)
            .open(path);
        let file = match direct {
            Ok(f) => f,
            Err(_) => File::create(path)?,
        };
        let mem = vec![0u8; BUF + ALIGN];
        let start = mem.as_ptr().align_offset(ALIGN);
        Ok(Sink {
            file,
            mem,
            start,
            len: 0,
            written: 0,
        })
    }

    /// Writes what is buffered; returns the file.
    pub fn finish(mut self) -> io::Result<File> {
        let padded = self.len.div_ceil(ALIGN) * ALIGN;
        let (from, to) = (self.start + self.len, self.start + padded);
        self.mem[from..to].fill(0);
        let rest = &self.mem[self.start..to];
        self.file.write_all_at(rest, self.written)?;
        self.file.set_len(self.written + self.len as u64)?;
        self.len = 0;
        Ok(self.file)
    }
}

impl Write for Sink {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        let n = data.len().min(BUF - self.len);
        let at = self.start + self.len;
        self.mem[at..at + n].copy_from_slice(&data[..n]);
        self.len += n;
        if self.len == BUF {
            self.file
                .write_all_at(&self.mem[self.start..self.start + BUF], self.written)?;
            self.written += BUF as u64;
            self.len = 0;
        }
        Ok(n)
    }

    /// Nothing: pieces go out whole, and the rest at [`Sink::finish`].
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_length_arrives_whole() {
        let dir = std::env::temp_dir().join(format!("cannoli-sink-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for len in [0, 1, BUF - 1, BUF, BUF + 1, 3 * BUF + 4097] {
            let path = dir.join(format!("f{len}"));
            let data: Vec<u8> = (0..len).map(|i| (i * 7 + i / 4096) as u8).collect();
            let mut s = Sink::create(&path).unwrap();
            for piece in data.chunks(100_003) {
                s.write_all(piece).unwrap();
            }
            s.finish().unwrap();
            assert!(std::fs::read(&path).unwrap() == data, "length {len}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
