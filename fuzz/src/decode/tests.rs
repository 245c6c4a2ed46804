// SPDX-License-Identifier: GPL-2.0-or-later
//! The decode target's own regressions: documented events read by the
//! reference, damaged chunks, register events of any count.

use wire::tag;

use super::input::top;
use super::*;

fn stream(bits: u32, reg_count: u32) -> Stream {
    Stream {
        bits,
        reg_count,
        big_endian: false,
        misalign: 0,
    }
}

#[test]
fn reference_reads_the_documented_events() {
    let words = [
        0x400000,
        top(wire::mem32_tag(true, 2)) | 0x400004,
        0x1234_5678_0000_1000,
        wire::frame(tag::MUNMAP, 0, 3),
        0xffff_0000_1000,
        0x2000,
    ];
    let b: Vec<u8> = words.iter().flat_map(|x| x.to_le_bytes()).collect();
    let r = reference(&b, 32, 0, 4);
    assert_eq!(
        r.events,
        vec![
            Ev::Exec(0x400000),
            Ev::Write(0x400004, 0x1000, 0x1234_5678, 4),
            Ev::Munmap(0x1000, 0x2000),
        ]
    );
    assert_eq!((r.event_words, r.error), (6, None));
    check(&stream(32, 0), &b);
}

#[test]
fn damaged_chunks_agree_and_are_accounted() {
    // An unknown frame, then a frame longer than the chunk, then a
    // stray byte.
    let mut w = vec![
        0x10,
        wire::frame(0x30, 7, 2),
        99,
        wire::frame(tag::SIGNAL, 0, 9),
    ];
    w.extend([1, 2, 3]);
    let mut b: Vec<u8> = w.iter().flat_map(|x| x.to_le_bytes()).collect();
    b.push(0xff);
    for bits in [32, 64] {
        for mis in 0..8 {
            let mut s = stream(bits, 3);
            s.misalign = mis;
            check(&s, &b);
            check(&s, &b[..b.len() - 1]);
            check(&s, &b[..17]);
        }
    }
    let r = reference(&b, 64, 3, 8);
    assert_eq!(
        (r.skipped, r.skipped_tag, r.skipped_words),
        (1, Some(0x30), 2)
    );
    assert_eq!(r.error, Some((24, b.len() - 24)));
}

#[test]
fn registers_with_any_count() {
    for count in [0u32, 1, 32, 256, 300, u32::MAX] {
        let n = count.min(4) as usize;
        let mut w = vec![wire::frame(tag::REGS, 1, (2 + n) as u32), 0x40];
        w.extend((0..n as u64).map(|k| k * 3));
        let b: Vec<u8> = w.iter().flat_map(|x| x.to_le_bytes()).collect();
        check(&stream(64, count), &b);
    }
}
