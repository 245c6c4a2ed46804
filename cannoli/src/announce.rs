//! Which processes of the traced tree are still to connect.
//!
//! QEMU announces a process before it connects: a parent its forked child
//! (an `Expect` line), a process that execs a program QEMU traces again
//! (a goodbye with `exec`). The run is not over while an announced process
//! lives and has not connected, and one that ends without connecting is
//! counted as loss (if it ran guest code, its events are missing).
//!
//! The announcement and the connection race: they travel on different
//! sockets, read by different threads. A child can connect, run and exit
//! before its parent's `Expect` line is read, and an exec'd program can
//! connect before the old program's goodbye is read. So connections are
//! remembered too (the most recent [`MAX_REMEMBERED`]), and an announcement
//! that a connection already answered is dropped.

use std::collections::{HashMap, VecDeque};

/// Processes announced and not connected yet, at most.
pub(crate) const MAX_WAITING: usize = 4096;
/// Connections remembered for late announcements.
pub(crate) const MAX_REMEMBERED: usize = 65536;

#[derive(Default)]
pub(crate) struct Announced {
    /// Announced, not connected: pid, and whether it was seen gone.
    waiting: HashMap<i32, bool>,
    /// pid -> sequence number of its latest connection.
    connected: HashMap<i32, u64>,
    /// (pid, sequence number) of the remembered connections, oldest first.
    order: VecDeque<(i32, u64)>,
    /// Connections so far.
    seq: u64,
    /// Where the run's lines go.
    notes: crate::Notes,
}

impl Announced {
    /// No process announced yet; its lines go to `notes`.
    pub(crate) fn saying_to(notes: crate::Notes) -> Announced {
        Announced {
            notes,
            ..Announced::default()
        }
    }

    /// A connection of `pid` completed its handshake: it answers any
    /// announcement of `pid`. Returns the connection's sequence number.
    pub(crate) fn connected(&mut self, pid: i32) -> u64 {
        self.seq += 1;
        self.waiting.remove(&pid);
        self.connected.insert(pid, self.seq);
        self.order.push_back((pid, self.seq));
        if self.order.len() > MAX_REMEMBERED {
            if let Some((old, s)) = self.order.pop_front() {
                if self.connected.get(&old) == Some(&s) {
                    self.connected.remove(&old);
                }
            }
        }
        self.seq
    }

    /// A parent announced its forked child `pid`. Nothing to wait for if
    /// the child connected already.
    pub(crate) fn forked(&mut self, pid: i32) {
        if !self.connected.contains_key(&pid) {
            self.wait_for(pid);
        }
    }

    /// The connection number `seq` of `pid` said goodbye to exec a program
    /// QEMU traces again. Nothing to wait for if a later connection of
    /// `pid` came already.
    pub(crate) fn exec(&mut self, pid: i32, seq: u64) {
        if self.connected.get(&pid).map_or(true, |&s| s <= seq) {
            self.wait_for(pid);
        }
    }

    fn wait_for(&mut self, pid: i32) {
        if self.waiting.len() < MAX_WAITING || self.waiting.contains_key(&pid) {
            self.waiting.insert(pid, false);
        } else {
            crate::notes::note!(
                self.notes,
                "cannoli: more than {MAX_WAITING} processes announced and not connected; \
                 not waiting for {pid}"
            );
        }
    }

    /// Whether an announced process may still connect, marking those that
    /// `alive` says are gone.
    pub(crate) fn expecting(&mut self, alive: impl Fn(i32) -> bool) -> bool {
        for (&pid, gone) in self.waiting.iter_mut() {
            *gone = *gone || !alive(pid);
        }
        self.waiting.values().any(|gone| !gone)
    }

    /// The announced processes that never connected; forgets them.
    pub(crate) fn take_missing(&mut self) -> Vec<i32> {
        let mut v: Vec<i32> = self.waiting.drain().map(|(pid, _)| pid).collect();
        v.sort_unstable();
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_announced_child_is_waited_for_until_it_connects() {
        let mut a = Announced::default();
        a.forked(10);
        assert!(a.expecting(|_| true));
        a.connected(10);
        assert!(!a.expecting(|_| true));
        assert_eq!(a.take_missing(), Vec::<i32>::new());
    }

    #[test]
    fn a_child_that_connected_before_its_announcement_is_not_missing() {
        let mut a = Announced::default();
        a.connected(1);
        a.connected(20);
        a.forked(20); // read after the child came and went
        assert!(!a.expecting(|_| false));
        assert_eq!(a.take_missing(), Vec::<i32>::new());
    }

    #[test]
    fn an_exec_is_answered_only_by_a_later_connection() {
        let mut a = Announced::default();
        let first = a.connected(30);
        a.exec(30, first);
        assert!(a.expecting(|_| true), "the old connection does not answer");
        a.connected(30);
        assert!(!a.expecting(|_| true));
        // The new program connected before the old one's goodbye was read.
        let old = a.connected(31);
        a.connected(31);
        a.exec(31, old);
        assert!(!a.expecting(|_| true));
    }

    #[test]
    fn one_that_dies_unconnected_is_missing() {
        let mut a = Announced::default();
        a.connected(1);
        a.forked(40);
        a.forked(41);
        assert!(!a.expecting(|p| p != 40 && p != 41));
        assert_eq!(a.take_missing(), vec![40, 41]);
        assert_eq!(a.take_missing(), Vec::<i32>::new());
    }

    #[test]
    fn memory_stays_bounded() {
        let mut a = Announced::default();
        for pid in 0..(MAX_REMEMBERED as i32 + 100) {
            a.connected(pid + 2);
        }
        assert_eq!(a.order.len(), MAX_REMEMBERED);
        assert_eq!(a.connected.len(), MAX_REMEMBERED);
        for pid in 0..(MAX_WAITING as i32 + 100) {
            a.forked(1_000_000 + pid);
        }
        assert_eq!(a.waiting.len(), MAX_WAITING);
    }
}
