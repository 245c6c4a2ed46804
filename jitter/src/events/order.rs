//! Order: the number an instruction takes from the one counter a process's
//! threads share, reported before its registers (`wire::tag::ORDER`).
//!
//! Each thread's stream is in that thread's execution order, but nothing
//! in the streams orders two threads' events: a client that must apply
//! one thread's `free` before another thread's `malloc` that reuses the
//! memory cannot tell from the streams which came first. The hook library
//! asks for a number at those instructions ([`order_here`]); the counter
//! is one atomic, so the numbers follow the order in which the threads
//! reached them. A thread that freed a block took its number at `free`'s
//! entry, before the allocator had the memory back; a thread whose
//! `malloc` returned that memory took its number at the return, after.
//!
//! The numbers are dense from 0 in each process: a forked child starts
//! again from 0 ([`forked_child`]), as the client sees it as a process of
//! its own.

use super::registers::write;
use crate::stream::Cursor;
use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};
use wire::{frame, tag};

/// The next number of this process's order.
static NEXT: AtomicU64 = AtomicU64::new(0);

thread_local! {
    /// Set by [`order_here`] while the user's `hook_inst` runs.
    static HERE: Cell<bool> = const { Cell::new(false) };
}

/// See [`crate::order_here`].
pub fn order_here() {
    HERE.with(|h| h.set(true));
}

/// Clears the request before the user's `hook_inst` runs.
pub(super) fn clear() {
    HERE.with(|h| h.set(false));
}

/// Whether the user's `hook_inst` just asked for a number ([`order_here`]),
/// clearing the request.
pub(super) fn asked() -> bool {
    HERE.with(|h| h.replace(false))
}

/// Takes the next number and reports it for the instruction at `pc`; the
/// numbers this thread took before go to the client first if its chunk
/// has held them a while (`stream::hand_over_if_held`).
pub(super) fn report(c: &mut Cursor, pc: u64) {
    crate::stream::hand_over_if_held(c);
    // Relaxed: the numbers only have to follow the one counter's
    // modification order, which every thread's accesses to it agree on
    // and which follows what happened before what (a thread's free before
    // the allocator's lock was released, another's malloc after it was
    // taken).
    let seq = NEXT.fetch_add(1, Ordering::Relaxed);
    write(c, &[frame(tag::ORDER, 0, 3), pc, seq], 0, std::iter::empty);
}

/// In a forked child: its order starts from 0.
pub fn forked_child() {
    NEXT.store(0, Ordering::Relaxed);
}
