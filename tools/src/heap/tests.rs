// SPDX-License-Identifier: GPL-2.0-or-later
//! The checker's rules, without a guest.

use std::sync::Arc;

use super::alloc::{parse_alloc, role_of, Role};
use super::blocks::{Block, Freed, Heap, Kind, Stack};
use super::leaks::{classify, lost};

fn stack(s: &str) -> Stack {
    Arc::from(vec![Arc::<str>::from(s)])
}

fn block(addr: u64, size: u64, seq: u64) -> Block {
    Block {
        addr,
        size,
        seq,
        tid: 1,
        pc: 0,
        target: 0,
        site_pc: 0,
        alloc_stack: stack("main+0x10"),
        freed: None,
    }
}

fn freed(seq: u64, s: &str) -> Freed {
    Freed {
        seq,
        tid: 1,
        target: 1,
        site_pc: 0,
        stack: stack(s),
    }
}

fn heap() -> Heap {
    let mut h = Heap::new(8);
    h.alloc(block(0x1010, 40, 1));
    h.alloc(block(0x1050, 16, 2));
    h
}

#[test]
fn only_reads_past_a_blocks_end_may_be_a_string_functions_overread() {
    let h = heap();
    // strlen's aligned word at the string's last bytes: starts inside.
    assert!(h.check(0x1034, 8, false).unwrap().past_end());
    // Its next word, in the slack.
    assert!(h.check(0x1038, 4, false).unwrap().past_end());
    // An underflow is not.
    assert!(!h.check(0x100c, 4, false).unwrap().past_end());
    // Nor a read of a freed block.
    let mut h = heap();
    h.free(0x1050, freed(3, "free")).unwrap();
    let bad = h.check(0x1050, 1, false).unwrap();
    assert_eq!(bad.kind, Kind::UseAfterFree);
    assert!(!bad.past_end());
}

#[test]
fn accesses_inside_a_block_are_fine() {
    let h = heap();
    assert!(h.check(0x1010, 8, false).is_none());
    assert!(h.check(0x1034, 4, true).is_none());
    assert!(h.check(0x1050, 16, true).is_none());
    // Far from every block: not the heap's business.
    assert!(h.check(0x9000, 4, true).is_none());
}

#[test]
fn an_access_past_the_end_is_an_overflow_of_that_block() {
    let h = heap();
    let bad = h.check(0x1038, 4, false).expect("a[10] of int a[10]");
    assert_eq!(bad.kind, Kind::Overflow);
    assert_eq!(bad.addr, 0x1038);
    assert_eq!(bad.block.unwrap().addr, 0x1010);
    // Straddling the end: the first byte outside.
    let bad = h.check(0x1034, 8, true).expect("straddles");
    assert_eq!(bad.addr, 0x1038);
    // Underflow: a[-1].
    let bad = h.check(0x100c, 4, true).expect("a[-1]");
    assert_eq!(bad.block.unwrap().addr, 0x1010);
}

#[test]
fn partial_loads_are_fine_as_memcheck_says() {
    let h = heap();
    // An aligned word load starting inside, ending past the end.
    let mut h2 = Heap::new(8);
    h2.alloc(block(0x2000, 13, 1));
    assert!(h2.check(0x2008, 8, false).is_none());
    // The same as a store is not.
    assert!(h2.check(0x2008, 8, true).is_some());
    // Unaligned, it is not either.
    assert!(h2.check(0x2009, 8, false).is_some());
    // A vector load near a block.
    assert!(h.check(0x1040, 16, false).is_none());
}

#[test]
fn use_after_free_until_the_memory_is_handed_out_again() {
    let mut h = heap();
    h.free(0x1010, freed(3, "main+0x20")).unwrap();
    let bad = h.check(0x1018, 4, true).expect("freed");
    assert_eq!(bad.kind, Kind::UseAfterFree);
    assert_eq!(bad.block.as_ref().unwrap().freed.as_ref().unwrap().seq, 3);
    h.alloc(block(0x1010, 24, 4));
    assert!(h.check(0x1018, 4, true).is_none());
    // The rest of the old block is no longer known as freed either.
    h.forget_freed(0, u64::MAX);
    assert!(h.check(0x1038, 4, true).is_none());
}

#[test]
fn double_and_invalid_frees() {
    let mut h = heap();
    h.free(0x1050, freed(3, "a")).unwrap();
    let bad = h.free(0x1050, freed(4, "b")).unwrap_err();
    assert_eq!(bad.kind, Kind::DoubleFree);
    let bad = h.free(0x1018, freed(5, "c")).unwrap_err();
    assert_eq!(bad.kind, Kind::InvalidFree);
    assert_eq!(bad.block.unwrap().addr, 0x1010);
    let bad = h.free(0x7000, freed(6, "d")).unwrap_err();
    assert!(bad.block.is_none());
    assert!(h.free(0, freed(7, "e")).is_ok());
    assert_eq!(
        (h.allocs, h.frees, h.live_bytes, h.peak_bytes),
        (2, 1, 40, 56)
    );
}

#[test]
fn leaks_are_blocks_no_live_word_points_into() {
    let blocks = [(0x1000, 16), (0x2000, 16), (0x3000, 16), (0x4000, 8)];
    let words = [
        // A global points at the first block's middle...
        (0x500, 0x1008),
        // ... which points at the second.
        (0x1000, 0x2000),
        // The third is pointed at only from a dead stack frame.
        (0x7ff0, 0x3000),
        // The fourth points at itself.
        (0x4000, 0x4000),
    ];
    let lost = lost(&blocks, &words, &[], &[(0x7000, 0x8000)]);
    assert_eq!(lost, [false, false, true, true]);
}

#[test]
fn blocks_only_lost_blocks_point_at_are_indirectly_lost() {
    // A lost list of three (the head points inside the second), a lost
    // cycle of two nothing else points at, a lost block on its own.
    let blocks = [
        (0x1000, 16),
        (0x2000, 16),
        (0x3000, 16),
        (0x4000, 16),
        (0x5000, 16),
        (0x6000, 16),
    ];
    let words = [
        (0x1000, 0x2008),
        (0x2000, 0x3000),
        (0x4000, 0x5000),
        (0x5008, 0x4000),
    ];
    let (lost, indirect) = classify(&blocks, &words, &[], &[], &[]);
    assert_eq!(lost, [true; 6]);
    // memcheck: the head, the cycle's lowest block and the lone block
    // are definitely lost.
    assert_eq!(indirect, [false, true, true, false, true, false]);
    // A register at exit pointing inside the lone block keeps it.
    let (lost, _) = classify(&blocks, &words, &[], &[], &[0x6004]);
    assert_eq!(lost, [true, true, true, true, true, false]);
}

#[test]
fn the_allocators_own_words_are_no_roots_but_are_followed_inside_blocks() {
    let blocks = [(0x1000, 48), (0x2000, 16)];
    let words = [
        // The allocator's top pointer, into the first block's last bytes.
        (0x600, 0x1028),
        // Inside the first block, copied there by realloc: followed.
        (0x1000, 0x2000),
    ];
    assert_eq!(lost(&blocks, &words, &[0x600, 0x1000], &[]), [true, true]);
    // A program's global pointing at the first block reaches both.
    let words = [(0x500, 0x1000), (0x600, 0x1028), (0x1000, 0x2000)];
    assert_eq!(lost(&blocks, &words, &[0x600, 0x1000], &[]), [false, false]);
}

#[test]
fn roles_and_custom_allocators() {
    assert_eq!(role_of(&[], "malloc"), Some(Role::Malloc { size: 0 }));
    assert_eq!(role_of(&[], "_ZdlPvm"), Some(Role::Free { ptr: 0 }));
    assert_eq!(
        role_of(&[], "_ZnwmSt11align_val_t"),
        Some(Role::Malloc { size: 0 })
    );
    assert_eq!(role_of(&[], "memalign"), Some(Role::Malloc { size: 1 }));
    assert_eq!(role_of(&[], "mallocx"), None);
    let custom = vec![parse_alloc("my_get=malloc").unwrap()];
    assert_eq!(role_of(&custom, "my_get"), Some(Role::Malloc { size: 0 }));
    assert!(parse_alloc("x=brk").unwrap_err().contains("unknown role"));
    assert!(parse_alloc("x").unwrap_err().contains("NAME=ROLE"));
    // The address form: hex address, decimal or hex size, both needed.
    assert_eq!(
        parse_alloc("0x4012A0+72=free").unwrap(),
        ("0x4012a0+72".to_string(), Role::Free { ptr: 0 })
    );
    assert_eq!(parse_alloc("0x10+0x20=malloc").unwrap().0, "0x10+32");
    for bad in [
        "0x4012a0=malloc",
        "0x4012a0+0=malloc",
        "0xzz+4=malloc",
        "0x10+x=malloc",
    ] {
        assert!(
            parse_alloc(bad).unwrap_err().contains("address and size"),
            "{bad}"
        );
    }
}

#[test]
fn events_run_out_of_thread_order_make_the_check_incomplete() {
    let mut s = super::report::Summary::default();
    assert!(!s.text(0).contains("waited for"));
    assert_eq!(s.json(0)["summary"]["unordered_events"], 0);
    s.unordered = 7;
    let text = s.text(0);
    assert!(
        text.contains("==heap== 7 events ran before the other thread's event they waited for"),
        "{text}"
    );
    assert!(text.contains("the check is incomplete"), "{text}");
    assert_eq!(s.json(0)["summary"]["unordered_events"], 7);
}

#[test]
fn away_from_the_sites_three_registers_are_enough() {
    use crate::heap::tracer::narrowed_registers;
    use crate::probe::conv::Abi;
    // The stack pointer, the link register (none on x86 and PowerPC, whose
    // calls are told otherwise) and the return value, in QEMU's order.
    // Every name is a register of the guest, at these places in its
    // events.
    let bits = |abi: Abi| {
        let names = cannoli::wire::reg_names(abi.arch());
        let mut at: Vec<usize> = narrowed_registers(abi)
            .iter()
            .map(|n| names.iter().position(|m| m == n).expect(n))
            .collect();
        at.sort_unstable();
        at
    };
    assert_eq!(narrowed_registers(Abi::O32), ["sp", "ra", "v0"]);
    assert_eq!(narrowed_registers(Abi::SysV), ["rsp", "rax"]);
    assert_eq!(bits(Abi::O32), [2, 29, 31]);
    assert_eq!(bits(Abi::N64), [2, 29, 31]);
    assert_eq!(bits(Abi::Aapcs), [0, 13, 14]);
    assert_eq!(bits(Abi::Aapcs64), [0, 30, 31]);
    assert_eq!(bits(Abi::Riscv), [1, 2, 10]);
    assert_eq!(bits(Abi::SysV), [0, 4]);
    assert_eq!(bits(Abi::Cdecl), [0, 4]);
    assert_eq!(bits(Abi::Elfv2), [1, 3]);
}

/// Thread 2's block over thread 1's live one: which came first the
/// streams do not say, so thread 1's is set aside, not dropped.
fn two_threads() -> Heap {
    let mut h = Heap::new(8);
    h.alloc(block(0x1010, 40, 1));
    let mut b = block(0x1010, 24, 2);
    b.tid = 2;
    let dropped = h.alloc(b);
    assert!(dropped.is_empty());
    h
}

#[test]
fn a_block_set_aside_is_live_again_once_the_one_over_it_is_freed() {
    let mut h = two_threads();
    assert_eq!(h.block_count(), (2, 0));
    assert_eq!(h.live_at(0x1010).map(|b| b.tid), Some(2));
    // Thread 1's own accesses to its block are its, not thread 2's
    // block's overflow.
    assert!(h.check(0x1030, 4, true).is_some());
    assert!(h.aside_holds(1, 0x1030, 4));
    assert!(!h.aside_holds(2, 0x1030, 4));
    assert!(!h.aside_holds(1, 0x1034, 8));
    // Thread 2 frees its block: thread 1's is live again, no use after
    // free of the first.
    let mut f = freed(3, "t2+0x8");
    f.tid = 2;
    let b = h.free(0x1010, f).unwrap().unwrap();
    assert_eq!((b.tid, b.size), (2, 24));
    assert_eq!(h.live_at(0x1030).map(|b| (b.tid, b.size)), Some((1, 40)));
    assert!(h.check(0x1030, 4, true).is_none());
    assert_eq!(h.block_count(), (1, 0));
    assert!(!h.aside_holds(1, 0x1030, 4));
}

#[test]
fn another_threads_free_takes_the_block_set_aside() {
    let mut h = two_threads();
    // Thread 1 frees its own block, which thread 2's now covers: the free
    // is of the block set aside, and thread 2's stays live.
    let b = h.free(0x1010, freed(3, "t1+0x8")).unwrap().unwrap();
    assert_eq!((b.tid, b.size), (1, 40));
    assert_eq!(h.live_at(0x1010).map(|b| b.tid), Some(2));
    assert!(h.check(0x1010, 8, true).is_none());
    assert_eq!(h.block_count(), (1, 0));
    // A block that overlaps another live one stays aside when a third
    // block next to it is freed.
    let mut h = two_threads();
    let mut c = block(0x1030, 16, 4);
    c.tid = 2;
    h.alloc(c);
    let mut f = freed(5, "t2+0x8");
    f.tid = 2;
    h.free(0x1030, f).unwrap();
    assert_eq!(h.live_at(0x1010).map(|b| b.tid), Some(2));
    assert_eq!(h.block_count(), (2, 1));
    // At the end, a block still set aside counts as live (a leak check
    // sees it).
    assert_eq!(h.live().filter(|b| b.tid == 1).count(), 1);
}
