//! Mappings: mmap, munmap and mprotect events, also logged for a
//! stream's replay.

use crate::stream::{self, Cursor};
use wire::{frame, map_flags, tag, MAX_SYSCALL_DATA};

fn map_event(c: Option<&mut Cursor>, words: &[u64], payload: &[u8]) {
    stream::log_map(words, payload);
    stream::append_or_keep(c, words, payload);
}

fn prot_bits(prot: i32) -> u32 {
    let mut b = 0;
    if prot & libc::PROT_READ != 0 {
        b |= map_flags::READ;
    }
    if prot & libc::PROT_WRITE != 0 {
        b |= map_flags::WRITE;
    }
    if prot & libc::PROT_EXEC != 0 {
        b |= map_flags::EXEC;
    }
    b
}

pub fn mmap(
    c: Option<&mut Cursor>,
    base: u64,
    len: u64,
    prot: i32,
    flags: i32,
    fd: i32,
    offset: u64,
) {
    let mut aux = prot_bits(prot);
    if flags & libc::MAP_SHARED != 0 {
        aux |= map_flags::SHARED;
    }
    let path = if flags & libc::MAP_ANONYMOUS != 0 || fd < 0 {
        aux |= map_flags::ANON;
        Vec::new()
    } else {
        std::fs::read_link(format!("/proc/self/fd/{fd}"))
            .map(|p| p.into_os_string().into_encoded_bytes())
            .unwrap_or_default()
    };
    let path = &path[..path.len().min(MAX_SYSCALL_DATA)];
    let words = [
        frame(tag::MMAP, aux, wire::framed_len(5, path.len()) as u32),
        base,
        len,
        offset,
        path.len() as u64,
    ];
    map_event(c, &words, path);
}

pub fn munmap(c: Option<&mut Cursor>, base: u64, len: u64) {
    map_event(c, &[frame(tag::MUNMAP, 0, 3), base, len], &[]);
}

pub fn mprotect(c: Option<&mut Cursor>, base: u64, len: u64, prot: i32) {
    map_event(
        c,
        &[frame(tag::MPROTECT, prot_bits(prot), 3), base, len],
        &[],
    );
}
