//! Signals: the event for a signal delivered to the guest.

use crate::stream::{self, Cursor};
use wire::{frame, tag};

pub fn signal(c: &mut Cursor, sig: i32, code: i32, fault_addr: u64, handler: u64) {
    stream::append(
        c,
        &[
            frame(tag::SIGNAL, 0, 5),
            sig as u32 as u64,
            code as u32 as u64,
            fault_addr,
            handler,
        ],
        &[],
    );
}
