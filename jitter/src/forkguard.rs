//! The fork protocol: QEMU forks (a guest fork, vfork or posix_spawn) while
//! other threads may be in our code outside the JIT, holding one of our
//! mutexes. The child has only the forking thread, so a mutex another
//! thread held at fork(2) would stay locked in the child forever. Hence
//! pthread_atfork (registered in `ffi`): just before fork(2) the forking
//! thread takes every lock-holding static in `ffi::FORK_ORDER`, and just
//! after it, in the parent and in the child, lets them go in reverse.
//!
//! A lock-holding static takes part by defining its [`Entry`] next to
//! itself with [`entry!`] and adding that entry to `ffi::FORK_ORDER`: one
//! line. The order lives at the top (`ffi` imports every module already),
//! so this module imports none of those it serves.

use std::cell::RefCell;
use std::sync::MutexGuard;

/// How the forking thread takes one lock-holding static before fork(2) and
/// lets it go after. Made by [`entry!`].
#[derive(Clone, Copy)]
pub struct Entry {
    /// Locks the static and keeps the guard in a thread-local slot.
    hold: fn(),
    /// Drops that guard, if this thread holds one.
    release: fn(),
}

impl Entry {
    /// For [`entry!`].
    pub const fn new(hold: fn(), release: fn()) -> Entry {
        Entry { hold, release }
    }
}

/// An [`Entry`] for `$lock`, a `static Mutex<$t>` in scope, keeping its
/// guard in a thread-local slot of its own across fork(2).
macro_rules! entry {
    ($lock:path, $t:ty) => {{
        thread_local! {
            /// The lock, held by the forking thread across fork(2).
            static HELD: ::std::cell::RefCell<
                Option<::std::sync::MutexGuard<'static, $t>>,
            > = const { ::std::cell::RefCell::new(None) };
        }
        fn hold() {
            let g = $lock.lock().unwrap_or_else(|e| e.into_inner());
            $crate::forkguard::keep(&HELD, g);
        }
        fn release() {
            $crate::forkguard::drop_kept(&HELD);
        }
        $crate::forkguard::Entry::new(hold, release)
    }};
}
pub(crate) use entry;

/// A thread-local slot for one guard.
type Slot<T> = std::thread::LocalKey<RefCell<Option<MutexGuard<'static, T>>>>;

/// Keeps `g` in this thread's `slot` until [`drop_kept`].
pub fn keep<T: 'static>(slot: &'static Slot<T>, g: MutexGuard<'static, T>) {
    slot.with(|f| *f.borrow_mut() = Some(g));
}

/// Unlocks what [`keep`] kept in this thread's `slot`, if anything.
pub fn drop_kept<T: 'static>(slot: &'static Slot<T>) {
    drop(slot.with(|f| f.borrow_mut().take()));
}

/// Just before fork(2) (pthread_atfork's prepare handler): takes every
/// static in `order`, in that order.
pub fn before_fork(order: &[Entry]) {
    for e in order {
        (e.hold)();
    }
}

/// Just after fork(2), in the parent and in the child (pthread_atfork's
/// parent and child handlers): lets the statics of `order` go in reverse.
pub fn after_fork(order: &[Entry]) {
    for e in order.iter().rev() {
        (e.release)();
    }
}
