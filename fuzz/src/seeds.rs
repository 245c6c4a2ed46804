//! The hand-made part of the corpus: real chunks laid out with the wire
//! crate's helpers, real handshake and control lines, and ring cases.
//! `cannoli-fuzz seed-corpus` writes them into `corpus/<target>/seed-*`
//! (the files are committed; the fuzzers start from them).

use std::path::PathBuf;

use wire::{frame, framed_len, map_flags, mem32_tag, mem_tag, tag, Hello};

use crate::decode::Stream;

fn le(words: &[u64]) -> Vec<u8> {
    words.iter().flat_map(|w| w.to_le_bytes()).collect()
}

fn payload(w: &mut Vec<u64>, b: &[u8]) {
    for c in b.chunks(8) {
        let mut x = [0u8; 8];
        x[..c.len()].copy_from_slice(c);
        w.push(u64::from_le_bytes(x));
    }
}

fn syscall(w: &mut Vec<u64>, num: u64, ret: Option<i64>, args: [u64; 6], data: &[u8]) {
    w.push(frame(
        tag::SYSCALL,
        ret.is_some() as u32,
        framed_len(11, data.len()) as u32,
    ));
    w.extend([num, ret.unwrap_or(0) as u64]);
    w.extend(args);
    w.extend([data.len() as u64, data.len() as u64]);
    payload(w, data);
}

fn mmap(w: &mut Vec<u64>, base: u64, len: u64, flags: u32, path: &str) {
    w.push(frame(tag::MMAP, flags, framed_len(5, path.len()) as u32));
    w.extend([base, len, 0, path.len() as u64]);
    payload(w, path.as_bytes());
}

/// A chunk as a 32-bit little-endian guest's QEMU writes one: mappings,
/// a block, runs of pcs with packed memory accesses, a syscall.
fn chunk32() -> Vec<u64> {
    let mut w = Vec::new();
    mmap(
        &mut w,
        0x40_0000,
        0x1000,
        map_flags::READ | map_flags::EXEC,
        "/usr/bin/prog",
    );
    mmap(
        &mut w,
        0x7fff_0000,
        0x2_0000,
        map_flags::READ | map_flags::WRITE | map_flags::ANON,
        "",
    );
    w.extend([frame(tag::BLOCK, 5, 3), 0x40_0100]);
    payload(&mut w, &[4, 4, 4, 4, 4]);
    for i in 0..20u64 {
        w.push(0x40_0100 + 4 * i);
        if i % 3 == 0 {
            w.extend([
                (mem32_tag(false, 2) as u64) << 56 | (0x40_0100 + 4 * i),
                0x7fff_0010 | (0xdead_0000 + i) << 32,
            ]);
        }
        if i % 5 == 0 {
            w.extend([
                (mem32_tag(true, (i % 3) as u8) as u64) << 56 | (0x40_0100 + 4 * i),
                0x7fff_0020 | i << 32,
            ]);
        }
    }
    syscall(
        &mut w,
        4004,
        Some(6),
        [1, 0x7fff_0100, 6, 0, 0, 0],
        b"hello\n",
    );
    w.extend([frame(tag::MUNMAP, 0, 3), 0x7fff_0000, 0x1000]);
    // Registers as QEMU packs a 32-bit guest's: all 32 at a block's start,
    // then v0, sp and ra at a branch (a narrowed hook library's).
    w.extend([frame(tag::SOME_REGS, 0, 19), 0x40_0100, u32::MAX as u64]);
    w.extend((0..16u64).map(|k| (2 * k) | (2 * k + 1) << 32));
    w.extend([
        frame(tag::SOME_REGS, 2, 5),
        0x40_0104,
        1 << 2 | 1 << 29 | 1 << 31,
        0x12 | 0x7fff_0ff0 << 32,
        0x40_0200,
    ]);
    w.extend([frame(tag::MPROTECT, map_flags::READ, 3), 0x40_0000, 0x1000]);
    w
}

/// A 64-bit guest's chunk: registers events, wide and long accesses,
/// 16-byte accesses, a signal, an exit.
fn chunk64(regs: usize) -> Vec<u64> {
    let mut w = Vec::new();
    for i in 0..12u64 {
        w.push(0x5555_5555_4000 + 4 * i);
    }
    w.push(frame(tag::REGS, 0, (2 + regs) as u32));
    w.push(0x5555_5555_4030);
    w.extend((0..regs as u64).map(|r| 0x1000 * r + 7));
    w.push(frame(tag::REGS, 2, (2 + regs) as u32));
    w.push(0x5555_5555_4034);
    w.extend(0..regs as u64);
    for lg in 0..4u8 {
        w.extend([
            (mem_tag(lg % 2 == 1, lg) as u64) << 56 | 0x5555_5555_4038,
            0x7fff_ffff_e000 + lg as u64,
            0x1122_3344_5566_7788,
        ]);
    }
    w.extend([
        (tag::LOAD128 as u64) << 56 | 0x5555_5555_4040,
        0x7fff_ffff_e100,
        0x0706_0504_0302_0100,
        0x0f0e_0d0c_0b0a_0908,
    ]);
    w.extend([(tag::EXEC_LONG as u64) << 56, 0xffff_8000_0000_1000]);
    w.extend([
        (tag::MEM_LONG as u64) << 56 | mem_tag(true, 3) as u64,
        0xffff_8000_0000_1004,
        0x7fff_ffff_e200,
        42,
    ]);
    w.extend([
        (tag::MEM_LONG as u64) << 56 | tag::STORE128 as u64,
        0xffff_8000_0000_1008,
        0x7fff_ffff_e210,
        1,
        2,
    ]);
    w.extend([
        frame(tag::SIGNAL, 0, 5),
        11,
        1,
        0xdead_beef,
        0x5555_5555_5000,
    ]);
    // A frame of a kind newer than this client.
    w.extend([frame(0x31, 3, 3), 1, 2]);
    syscall(&mut w, 60, None, [3, 0, 0, 0, 0, 0], &[]);
    w
}

fn hello(arch: &str, bits: u32, count: u32) -> String {
    let h = Hello {
        magic: wire::MAGIC.into(),
        wire_version: wire::WIRE_VERSION,
        jitter_version: "0.1.0".into(),
        pid: 4242,
        ppid: 1,
        tid: 4242,
        arch: arch.into(),
        big_endian: false,
        guest_bits: bits,
        ring: wire::channel::RingRef::ProcFd(1000),
        nonce: "00112233445566778899aabbccddeeff".into(),
        proof: "ab".repeat(32),
        comm: Some("prog".into()),
        exe: Some("/usr/bin/prog".into()),
        regs: wire::RegLayout {
            count,
            bytes: bits / 8,
            names: wire::reg_names(arch)
                .iter()
                .take(count as usize)
                .map(|s| s.to_string())
                .collect(),
        },
        syscall_names: [(4001, "exit".to_string()), (4004, "write".to_string())]
            .into_iter()
            .collect(),
        blocks: None,
        image: 0,
    };
    serde_json::to_string(&h).expect("serializes") + "\n"
}

/// Every seed: (target, file name, bytes).
pub fn all() -> Vec<(&'static str, String, Vec<u8>)> {
    let mut v = Vec::new();
    let mut dec = |name: &str, bits: u32, regs: u16, words: &[u64], cut: usize| {
        let mut b = Stream::header(bits, regs, false, false).to_vec();
        let body = le(words);
        b.extend_from_slice(&body[..body.len() - cut.min(body.len())]);
        v.push(("decode", format!("seed-{name}"), b));
    };
    dec("mipsel", 32, 32, &chunk32(), 0);
    dec("mipsel-cut", 32, 32, &chunk32(), 13);
    dec("x86_64", 64, 16, &chunk64(16), 0);
    dec("aarch64", 64, 32, &chunk64(32), 0);
    dec("aarch64-cut", 64, 32, &chunk64(32), 8 * 7 + 3);
    dec("regs-mismatch", 64, 8, &chunk64(16), 0);
    let execs: Vec<u64> = (0..64).map(|i| 0x1_0000 + 2 * i).collect();
    dec("execs", 64, 0, &execs, 0);
    // Structured inputs: the mode byte set, then bytes for `arbitrary`.
    let mut s = Stream::header(32, 32, true, true).to_vec();
    s.extend((0..=255u8).rev());
    v.push(("decode", "seed-structured".into(), s));

    for (name, line) in [
        ("mipsel", hello("mipsel", 32, 32)),
        ("x86_64", hello("x86_64", 64, 16)),
        ("aarch64", hello("aarch64", 64, 32)),
        ("noregs", hello("sparc", 64, 0)),
    ] {
        let mut b = vec![0u8];
        b.extend_from_slice(line.as_bytes());
        v.push(("hello", format!("seed-{name}"), b));
    }
    for (name, line) in [
        (
            "goodbye",
            "{\"chunks\":12,\"lost_events\":0,\"exec\":false}\n",
        ),
        (
            "goodbye-exec",
            "{\"chunks\":3,\"lost_events\":5,\"exec\":true}\n",
        ),
        ("expect", "{\"expect_pid\":4243}\n"),
    ] {
        let mut b = vec![2u8];
        b.extend_from_slice(line.as_bytes());
        v.push(("hello", format!("seed-{name}"), b));
    }
    for (name, mode) in [("edit-hello", 1u8), ("edit-goodbye", 3), ("edit-expect", 7)] {
        let mut b = vec![mode];
        b.extend((0..200u32).map(|i| (i * 37 % 251) as u8));
        v.push(("hello", format!("seed-{name}"), b));
    }

    // Recordings: as they are, and with checksums fixed after mutation.
    for (name, mode) in [("sample", 0u8), ("sample-fixed", 1)] {
        let mut b = vec![mode];
        b.extend(crate::recording::seed());
        v.push(("recording", format!("seed-{name}"), b));
    }

    // Ring cases: a geometry byte, then bytes for `arbitrary`'s steps.
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    for (i, g) in [0u8, 1, 3, 4, 8, 9].into_iter().enumerate() {
        let mut b = vec![g];
        for _ in 0..(64 + 96 * i) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            b.push(x as u8);
        }
        v.push(("ring", format!("seed-{i}"), b));
    }
    v
}

/// Writes every seed into its target's corpus directory; returns the paths.
pub fn write_all() -> std::io::Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for (target, name, bytes) in all() {
        let dir = crate::driver::corpus_dir(target);
        std::fs::create_dir_all(&dir)?;
        let p = dir.join(name);
        std::fs::write(&p, bytes)?;
        out.push(p);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    #[test]
    fn seeds_pass_their_targets() {
        for (target, name, bytes) in super::all() {
            let f = crate::target(target).unwrap();
            f(&bytes);
            assert!(!name.is_empty());
        }
    }

    #[test]
    fn real_chunks_decode_without_problems() {
        for (target, name, bytes) in super::all() {
            if target != "decode" || name.contains("cut") || name.contains("mismatch") {
                continue;
            }
            if bytes[0] & 1 == 1 {
                continue;
            }
            let bits = if name == "seed-mipsel" { 32 } else { 64 };
            let r = crate::decode::reference(
                &bytes[5..],
                bits,
                u16::from_le_bytes([bytes[2], bytes[3]]) as u32 as usize,
                bits as usize / 8,
            );
            assert!(r.error.is_none(), "{name}: {:?}", r.error);
            assert!(r.events.len() > 10, "{name}");
        }
    }
}
