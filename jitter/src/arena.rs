//! Address space for the rings of the threads that start later.
//!
//! Tracing must not move the guest: a 64-bit guest's mappings come from host
//! `mmap`, which puts a mapping without a usable hint into the highest free
//! gap. QEMU loads this library behind a fence (see `cannoli_load` in the
//! patch), so whatever it maps during `init` lands far below where the
//! guest's mappings go. `init` reserves this arena then, and every later ring
//! is mapped into it at a fixed address, so no ring ever takes a gap the
//! guest would have had. A ring's slot goes back to the arena when its
//! stream ends.

use std::ptr::NonNull;
use std::sync::Mutex;

/// Address space reserved for rings (inaccessible and backed by nothing
/// until a ring is mapped into it): thousands of default-sized rings.
const ARENA_BYTES: usize = 16 << 30;

struct Arena {
    base: usize,
    len: usize,
    /// Bytes of one slot: a ring's mapping, page aligned.
    slot: usize,
    /// Slots handed out so far, from `base` upwards.
    used: usize,
    /// Slots given back, to hand out again first.
    free: Vec<usize>,
}

static ARENA: Mutex<Option<Arena>> = Mutex::new(None);

fn lock() -> std::sync::MutexGuard<'static, Option<Arena>> {
    ARENA.lock().unwrap_or_else(|e| e.into_inner())
}

/// Reserves the arena for rings of `slot` bytes. Called once, from `init`,
/// while QEMU's fence is up. Without it (the reservation failed) rings are
/// mapped wherever the kernel likes.
pub fn reserve(slot: usize) {
    let slot = slot.next_multiple_of(4096);
    // SAFETY: a fresh anonymous reservation; nothing else refers to it.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            ARENA_BYTES,
            libc::PROT_NONE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return;
    }
    *lock() = Some(Arena {
        base: p as usize,
        len: ARENA_BYTES,
        slot,
        used: 0,
        free: Vec::new(),
    });
}

/// A reserved slot for one ring, given back to the arena on drop.
pub struct Slot(NonNull<u8>);

impl Slot {
    /// A free slot of the arena, if there is one.
    pub fn take() -> Option<Slot> {
        let mut g = lock();
        let a = g.as_mut()?;
        let at = match a.free.pop() {
            Some(at) => at,
            None if (a.used + 1) * a.slot <= a.len => {
                a.used += 1;
                a.base + (a.used - 1) * a.slot
            }
            None => return None,
        };
        NonNull::new(at as *mut u8).map(Slot)
    }

    pub fn addr(&self) -> NonNull<u8> {
        self.0
    }

    /// In a forked child: the inherited ring still fills this slot (and
    /// is the parent's), so the slot is never handed out again here.
    pub fn keep_forever(self) {
        std::mem::forget(self);
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        if let Some(a) = lock().as_mut() {
            a.free.push(self.0.as_ptr() as usize);
        }
    }
}

// SAFETY: a slot is an address range owned by whoever holds the Slot.
unsafe impl Send for Slot {}
