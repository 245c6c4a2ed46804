// SPDX-License-Identifier: GPL-2.0-or-later
//! The workers of one stream, and when they take chunks: the worker
//! policy.
//!
//! One QEMU thread produces a stream's chunks; its *crew* of workers takes
//! them off the ring and decodes (or records) them in parallel, and the
//! resequencer puts them back in order. The first worker always waits on
//! the ring (a short spin, then a futex that QEMU wakes only while someone
//! sleeps there; see [`EAGER_SPIN`]). The others, *helpers*, never wait on
//! the ring, so QEMU never pays a wake-up for them: they park in the
//! crew's own stack of idle helpers ([`Idle`]), and a worker that finds
//! chunks waiting behind the one it took calls one in (a wake-up of a few
//! microseconds, against a chunk's work of a hundred or more). A helper
//! that finds more waiting calls the next, so the crew grows to what the
//! backlog needs within a chunk or two, and shrinks as helpers find the
//! ring empty and park. Nothing spins while the ring is empty. Helper
//! threads are started only when first called in, so a stream that one
//! worker keeps up with costs one thread.
//!
//! The helper called in is the one that parked last, not the one that
//! waited longest: the fewest helpers take turns, their caches warm with
//! the decoder's tables, and the others stay asleep (a thread pool's LIFO
//! wake). Woken oldest first, every helper takes chunks in turn; on a
//! 16-core VM that way, 15 workers made QEMU's own thread 10-25 % slower
//! than 4 did, which this order is meant to avoid (not yet measured
//! there: docs/performance.md, "Helpers called in last-parked first").
//! `CANNOLI_WAKE_OLDEST=1` wakes the oldest instead, for measuring one
//! against the other.
//!
//! When helpers are called in depends on whether a core is free for them:
//!
//! - **Eager** (a spare core: the machine's usable cores, from the affinity
//!   mask and the cgroup quota, leave room beyond QEMU's thread and the
//!   first worker): helpers are called in as soon as one chunk waits.
//! - **Relay** (two cores, a restricted affinity mask, or a loaded machine
//!   on which QEMU's thread waits for a CPU): a helper would take QEMU's
//!   core, so helpers are called in only while QEMU waits for a free slot
//!   (the ring is full: its core is idle; the ring shows it, see
//!   `mempipe::Consumer::producer_waiting`) and take chunks only while
//!   that lasts.
//!
//! The first worker re-decides every [`RECHECK`]: the usable cores can
//! change (affinity, cgroups), and so can the load. A loaded machine shows
//! in QEMU's own thread: `/proc/PID/task/TID/schedstat` gives the time it
//! spent runnable but waiting for a CPU. If that is more than
//! [`STARVED_SHARE`] of a window while helpers were eager, the crew relays
//! for [`RELAY_HOLD`], then tries eager again.

use std::io;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};
use std::thread::{Scope, Thread};
use std::time::{Duration, Instant};

use mempipe::{Chunk, Consumer};

/// How often the first worker re-decides the policy.
pub(crate) const RECHECK: Duration = Duration::from_millis(100);
/// QEMU's thread waiting for a CPU more than this share of a window means
/// the helpers (or someone else) take its core.
pub(crate) const STARVED_SHARE: f64 = 0.2;
/// How long a starved stream relays before it tries eager helpers again.
pub(crate) const RELAY_HOLD: Duration = Duration::from_secs(1);
/// How often the machine's usable cores are read again.
const CORES_RECHECK: Duration = Duration::from_secs(1);
/// A parked helper re-checks on its own this often (its wake-up is the
/// normal path; this bounds a missed one).
const PARK_SLICE: Duration = Duration::from_millis(100);
/// How long the first worker polls an empty ring before it sleeps, when
/// a core is free for it (eager), beyond the short spin of
/// [`mempipe::Consumer::recv`]. A crew that keeps ahead of QEMU finds the
/// ring empty after every chunk; asleep, it makes QEMU pay a futex wake-up
/// per chunk (a system call, and on a VM an interrupt to another CPU).
/// Zero by default: on a 16-core VM, 100 us made the PC+mem rows up to 20 %
/// faster and the PC rows up to 20 % slower (docs/performance.md, "Many
/// cores"). `CANNOLI_RING_SPIN_US` sets it, for such measurements.
const EAGER_SPIN: Duration = Duration::ZERO;

/// [`EAGER_SPIN`], or `CANNOLI_RING_SPIN_US` (at most 10 ms).
fn eager_spin() -> Duration {
    std::env::var("CANNOLI_RING_SPIN_US")
        .ok()
        .and_then(|v| v.parse().ok())
        .map_or(EAGER_SPIN, |us: u64| Duration::from_micros(us.min(10_000)))
}

/// Chunks waiting behind the one a worker took that call another worker
/// in. One: the crew grows as soon as it falls behind at all.
/// `CANNOLI_CALL_IN` sets it (1 to 64), for measurements of the crew's
/// growth on many cores.
const CALL_IN: u64 = 1;

/// [`CALL_IN`], or `CANNOLI_CALL_IN`.
fn call_in() -> u64 {
    std::env::var("CANNOLI_CALL_IN")
        .ok()
        .and_then(|v| v.parse().ok())
        .map_or(CALL_IN, |n: u64| n.clamp(1, 64))
}

/// Whether `CANNOLI_WAKE_OLDEST=1` asks that the helper parked longest be
/// called in first (see the module doc).
fn wake_oldest() -> bool {
    std::env::var_os("CANNOLI_WAKE_OLDEST").is_some_and(|v| v == "1")
}

/// The most worker threads the default gives a stream.
const MAX_DEFAULT_WORKERS: usize = 16;

/// Workers per stream by default: one for each core beyond QEMU's thread,
/// at least 2 (on two cores the second one relays) and at most
/// 16. `--threads N` of every tool overrides it.
pub fn default_workers() -> usize {
    // Once per process: a command line's parser asks for every tool's
    // default, and each ask reads the cgroup's files.
    static DEFAULT: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *DEFAULT.get_or_init(|| {
        usable_cores()
            .saturating_sub(1)
            .clamp(2, MAX_DEFAULT_WORKERS)
    })
}

/// The cores this process may run on: its affinity mask and cgroup quota
/// (what `available_parallelism` reads), 1 if unknown.
fn usable_cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// What the machine offers every stream's crew: its usable cores (read
/// again now and then), and a bound on the helper threads of all streams
/// together, so that a program with thousands of threads does not get
/// thousands of idle helpers.
pub(crate) struct Machine {
    cores: AtomicUsize,
    cores_read: Mutex<Instant>,
    helper_threads: AtomicUsize,
    max_helper_threads: usize,
}

impl Machine {
    pub fn new() -> Machine {
        Machine::with_cores(usable_cores())
    }

    /// A machine of `cores` usable cores (read again from the system after
    /// [`CORES_RECHECK`]).
    fn with_cores(cores: usize) -> Machine {
        Machine {
            cores: AtomicUsize::new(cores),
            cores_read: Mutex::new(Instant::now()),
            helper_threads: AtomicUsize::new(0),
            max_helper_threads: 4 * cores.max(2),
        }
    }

    /// The usable cores, read again at most every [`CORES_RECHECK`].
    fn cores(&self) -> usize {
        if let Ok(mut at) = self.cores_read.try_lock() {
            if at.elapsed() >= CORES_RECHECK {
                self.cores.store(usable_cores(), Ordering::Relaxed);
                *at = Instant::now();
            }
        }
        self.cores.load(Ordering::Relaxed)
    }

    /// A core beyond QEMU's thread and the first worker.
    fn has_spare_core(&self) -> bool {
        self.cores() >= 3
    }

    /// Takes a place for one more helper thread, if the bound allows.
    fn take_helper_place(&self) -> bool {
        self.helper_threads
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < self.max_helper_threads).then_some(n + 1)
            })
            .is_ok()
    }

    fn give_helper_place(&self) {
        self.helper_threads.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The policy in force (see the module doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Eager,
    Relay,
}

/// One stream's workers: see the module doc.
pub(crate) struct Crew<'a> {
    consumer: &'a Consumer,
    machine: &'a Machine,
    /// Workers wanted, the first included (the stream's `threads`).
    wanted: usize,
    /// QEMU's thread of this stream (pid, tid), for its schedstat.
    qemu: Option<(i32, i32)>,
    eager: AtomicBool,
    /// How long the first worker polls an empty ring in eager mode.
    spin: Duration,
    /// Chunks waiting that call a helper in ([`CALL_IN`]).
    call_in: u64,
    /// Helper threads started (they keep their index: 1, 2, ...).
    helpers: AtomicUsize,
    /// The helpers parked.
    idle: Idle,
    done: AtomicBool,
    /// The first worker could not be started: nothing drains the ring.
    failed: OnceLock<String>,
    /// Chunks taken by helpers (for the stats and the tests).
    helped: AtomicU64,
}

/// What the first worker keeps between its re-decisions.
struct Watch {
    next: Instant,
    /// QEMU's run delay (ns) and when it was read.
    delay: Option<(u64, Instant)>,
    relay_until: Option<Instant>,
}

impl<'a> Crew<'a> {
    /// The crew of `threads` workers of the ring `consumer`, whose producer
    /// is QEMU's thread `qemu` (pid, tid) when known.
    pub fn new(
        consumer: &'a Consumer,
        machine: &'a Machine,
        threads: usize,
        qemu: Option<(i32, i32)>,
    ) -> Crew<'a> {
        Crew {
            consumer,
            machine,
            wanted: threads.max(1),
            qemu,
            eager: AtomicBool::new(machine.has_spare_core()),
            spin: eager_spin(),
            call_in: call_in(),
            helpers: AtomicUsize::new(0),
            idle: Idle::new(wake_oldest()),
            done: AtomicBool::new(false),
            failed: OnceLock::new(),
            helped: AtomicU64::new(0),
        }
    }

    /// Runs the crew: `work(index, next)` on each worker thread, where
    /// `next()` hands out the worker's next chunk (`None`: the ring is
    /// finished), and `control` on the calling thread meanwhile. Returns
    /// what `control` returned, once every worker is done.
    ///
    /// If the first worker cannot be started, the ring is closed (QEMU
    /// goes on untraced instead of waiting for a reader) and
    /// [`Crew::failure`] says why.
    pub fn run<W, R>(&self, work: W, control: impl FnOnce() -> R) -> R
    where
        W: Fn(usize, &mut dyn FnMut() -> Option<Chunk<'a>>) + Sync,
    {
        std::thread::scope(|s| {
            let spawner = Spawner {
                scope: s,
                crew: self,
                work: &work,
            };
            if let Err(e) = spawner.spawn(0) {
                let _ = self
                    .failed
                    .set(format!("cannot start a worker thread: {e}"));
                self.consumer.close();
            }
            control()
        })
    }

    /// Why the crew could not drain the ring, if it could not.
    pub fn failure(&self) -> Option<&str> {
        self.failed.get().map(String::as_str)
    }

    /// Chunks the helpers took.
    #[allow(dead_code)]
    pub fn helped(&self) -> u64 {
        self.helped.load(Ordering::Relaxed)
    }

    /// The next chunk for worker `index`, `None` once the ring is finished.
    fn next_chunk<W>(
        &self,
        index: usize,
        spawner: &Spawner<'_, '_, 'a, W>,
        watch: &mut Watch,
    ) -> Option<Chunk<'a>>
    where
        W: Fn(usize, &mut dyn FnMut() -> Option<Chunk<'a>>) + Sync,
    {
        if index == 0 {
            self.redecide(watch);
            let spin = match self.mode() {
                Mode::Eager => self.spin,
                Mode::Relay => Duration::ZERO,
            };
            let c = self.consumer.recv_spinning(spin);
            match c {
                Some(_) => self.maybe_call_in(spawner),
                None => self.finish(),
            }
            return c;
        }
        loop {
            if self.helper_may_take() {
                if let Some(c) = self.consumer.try_recv() {
                    self.helped.fetch_add(1, Ordering::Relaxed);
                    self.maybe_call_in(spawner);
                    return Some(c);
                }
            }
            if self.consumer.is_finished() {
                return None;
            }
            self.park();
        }
    }

    fn mode(&self) -> Mode {
        if self.eager.load(Ordering::Relaxed) {
            Mode::Eager
        } else {
            Mode::Relay
        }
    }

    /// Whether a chunk waiting justifies another worker now: always in
    /// eager mode; in relay mode only while QEMU waits for a free slot.
    fn helper_may_take(&self) -> bool {
        match self.mode() {
            Mode::Eager => true,
            Mode::Relay => self.consumer.producer_waiting(),
        }
    }

    /// Enough chunks wait ([`Crew::call_in`]), and a helper may take them.
    fn help_wanted(&self) -> bool {
        self.consumer.backlog() >= self.call_in && self.helper_may_take()
    }

    /// Chunks are waiting: wake a parked helper, or start one if the crew
    /// and the machine have room.
    fn maybe_call_in<W>(&self, spawner: &Spawner<'_, '_, 'a, W>)
    where
        W: Fn(usize, &mut dyn FnMut() -> Option<Chunk<'a>>) + Sync,
    {
        if self.wanted < 2 || !self.help_wanted() {
            return;
        }
        if self.idle.wake_one() {
            return;
        }
        // Start another helper, if fewer than wanted are running.
        let n = self.helpers.load(Ordering::Acquire);
        if n + 1 >= self.wanted
            || self
                .helpers
                .compare_exchange(n, n + 1, Ordering::AcqRel, Ordering::Acquire)
                .is_err()
        {
            return;
        }
        if !self.machine.take_helper_place() {
            self.helpers.fetch_sub(1, Ordering::AcqRel);
            return;
        }
        if spawner.spawn(n + 1).is_err() {
            // No thread for a helper: the others go on without it.
            self.machine.give_helper_place();
        }
    }

    /// A helper waits to be called in (or for the end).
    fn park(&self) {
        self.idle.park(|| {
            self.done.load(Ordering::SeqCst) || self.consumer.is_finished() || self.help_wanted()
        });
    }

    fn finish(&self) {
        self.done.store(true, Ordering::SeqCst);
        self.idle.wake_all();
    }

    /// The first worker's periodic re-decision (see the module doc).
    fn redecide(&self, w: &mut Watch) {
        let now = Instant::now();
        if now < w.next {
            return;
        }
        w.next = now + RECHECK;
        let was_eager = self.eager.load(Ordering::Relaxed);
        let delay = self.qemu.and_then(|(pid, tid)| run_delay_ns(pid, tid));
        let starved = match (w.delay, delay) {
            (Some((d0, t0)), Some(d1)) if was_eager => {
                let wall = now.duration_since(t0).as_nanos() as f64;
                wall > 0.0 && (d1.saturating_sub(d0) as f64) / wall > STARVED_SHARE
            }
            _ => false,
        };
        w.delay = delay.map(|d| (d, now));
        if starved {
            w.relay_until = Some(now + RELAY_HOLD);
        }
        let holding = w.relay_until.is_some_and(|t| now < t);
        self.eager
            .store(self.machine.has_spare_core() && !holding, Ordering::Relaxed);
    }
}

/// The parked helpers of one crew, as a stack: a call-in wakes the one on
/// top, the helper that parked last (or, `oldest`, the one at the bottom).
///
/// A helper counts itself in [`Idle::parked`] before it looks whether it
/// is wanted after all, and a worker that called one in reads that count
/// after it saw the chunks waiting, so one of the two always sees the
/// other: a call-in is never lost while a helper goes to sleep. A helper
/// also re-checks on its own every [`PARK_SLICE`], keeping its place in
/// the stack.
struct Idle {
    stack: Mutex<Vec<Thread>>,
    /// Helpers parked or about to (so that a call-in skips the lock when
    /// none is).
    parked: AtomicU32,
    oldest: bool,
}

impl Idle {
    fn new(oldest: bool) -> Idle {
        Idle {
            stack: Mutex::new(Vec::new()),
            parked: AtomicU32::new(0),
            oldest,
        }
    }

    /// The calling thread sleeps until a call-in wakes it or `ready()`
    /// (checked now and every [`PARK_SLICE`]) says it has work or the
    /// stream ended.
    fn park(&self, ready: impl Fn() -> bool) {
        let me = std::thread::current();
        {
            let mut stack = lock(&self.stack);
            self.parked.fetch_add(1, Ordering::SeqCst);
            if ready() {
                self.parked.fetch_sub(1, Ordering::SeqCst);
                return;
            }
            stack.push(me.clone());
        }
        loop {
            // A wake-up may come before this (the token makes park return
            // at once) or without a call-in (checked below).
            std::thread::park_timeout(PARK_SLICE);
            let mut stack = lock(&self.stack);
            let Some(at) = stack.iter().rposition(|t| t.id() == me.id()) else {
                // A call-in took it off the stack.
                return;
            };
            if ready() {
                stack.remove(at);
                self.parked.fetch_sub(1, Ordering::SeqCst);
                return;
            }
        }
    }

    /// Wakes one parked helper; false if none was parked.
    fn wake_one(&self) -> bool {
        if self.parked.load(Ordering::SeqCst) == 0 {
            return false;
        }
        let woken = {
            let mut stack = lock(&self.stack);
            let t = if self.oldest && !stack.is_empty() {
                Some(stack.remove(0))
            } else {
                stack.pop()
            };
            if t.is_some() {
                self.parked.fetch_sub(1, Ordering::SeqCst);
            }
            t
        };
        woken.map(|t| t.unpark()).is_some()
    }

    /// Wakes every parked helper (the stream ended).
    fn wake_all(&self) {
        let all = std::mem::take(&mut *lock(&self.stack));
        self.parked.fetch_sub(all.len() as u32, Ordering::SeqCst);
        for t in all {
            t.unpark();
        }
    }
}

/// Starts worker threads of one crew in its scope (helpers on demand).
struct Spawner<'scope, 'env, 'a, W> {
    scope: &'scope Scope<'scope, 'env>,
    crew: &'env Crew<'a>,
    work: &'env W,
}

impl<W> Clone for Spawner<'_, '_, '_, W> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<W> Copy for Spawner<'_, '_, '_, W> {}

impl<'scope, 'env, 'a, W> Spawner<'scope, 'env, 'a, W>
where
    W: Fn(usize, &mut dyn FnMut() -> Option<Chunk<'a>>) + Sync,
    'a: 'env,
{
    fn spawn(&self, index: usize) -> io::Result<()> {
        let me = *self;
        std::thread::Builder::new()
            .name(format!("cannoli-w{index}"))
            .spawn_scoped(self.scope, move || {
                let mut watch = Watch {
                    next: Instant::now(),
                    delay: None,
                    relay_until: None,
                };
                let mut next = || me.crew.next_chunk(index, &me, &mut watch);
                (me.work)(index, &mut next);
                if index > 0 {
                    me.crew.machine.give_helper_place();
                }
            })
            .map(|_| ())
    }
}

/// The time QEMU's thread `tid` of process `pid` spent runnable but
/// waiting for a CPU, in ns (the second field of its schedstat), if the
/// kernel says.
fn run_delay_ns(pid: i32, tid: i32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/schedstat")).ok()?;
    s.split_whitespace().nth(1)?.parse().ok()
}

fn lock<X>(m: &Mutex<X>) -> std::sync::MutexGuard<'_, X> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
mod tests {
    //! The policy with a real ring: chunks published faster than one worker
    //! takes them call helpers in (eager), or only while the ring is full
    //! (relay); every chunk is taken exactly once, in either mode.

    use super::*;
    use mempipe::Producer;
    use std::os::fd::AsFd;

    const CHUNKS: u64 = 200;

    fn ring() -> (Producer, Consumer) {
        let p = Producer::create_memfd(4096, 8).unwrap();
        let fd = p.fd().unwrap().as_fd().try_clone_to_owned().unwrap();
        (p, Consumer::from_fd(fd).unwrap())
    }

    /// Publishes CHUNKS chunks (the first eight, a full ring, before the
    /// crew starts, so that a backlog is there when the first worker takes
    /// its first chunk)
    /// while a crew of `threads` takes them, each worker spending `work` per
    /// chunk; with `wait_for_help`, the first worker holds its first chunk
    /// until a helper took one. Returns the chunks each worker index took,
    /// and the crew's count of helped chunks.
    fn crew_run(
        machine: &Machine,
        threads: usize,
        work: Duration,
        wait_for_help: bool,
    ) -> (Vec<u64>, u64) {
        let (mut p, c) = ring();
        let crew = Crew::new(&c, machine, threads, None);
        let taken: Vec<AtomicU64> = (0..threads).map(|_| AtomicU64::new(0)).collect();
        let seen = Mutex::new(vec![0u32; CHUNKS as usize]);
        let publish = |p: &mut Producer| {
            p.acquire().unwrap();
            p.publish(64).unwrap();
        };
        for _ in 0..8 {
            publish(&mut p);
        }
        crew.run(
            |index, next| {
                while let Some(chunk) = next() {
                    if wait_for_help && index == 0 && chunk.seq() == 0 {
                        let since = Instant::now();
                        while crew.helped() == 0 && since.elapsed() < Duration::from_secs(120) {
                            std::thread::sleep(Duration::from_millis(1));
                        }
                    }
                    std::thread::sleep(work);
                    lock(&seen)[chunk.seq() as usize] += 1;
                    taken[index].fetch_add(1, Ordering::Relaxed);
                }
            },
            || {
                for _ in 8..CHUNKS {
                    publish(&mut p);
                }
                p.close();
            },
        );
        assert!(
            lock(&seen).iter().all(|&n| n == 1),
            "every chunk exactly once"
        );
        (
            taken.iter().map(|t| t.load(Ordering::Relaxed)).collect(),
            crew.helped(),
        )
    }

    #[test]
    fn eager_helpers_share_a_backlog() {
        let machine = Machine::with_cores(16);
        let (taken, helped) = crew_run(&machine, 4, Duration::from_micros(100), true);
        assert_eq!(taken.iter().sum::<u64>(), CHUNKS);
        assert_eq!(helped, CHUNKS - taken[0]);
        // Chunks were waiting when the first worker took its first one: a
        // helper was called in and took some (the first worker held on
        // until one did; by count, not by time).
        assert!(helped > 0, "{taken:?}");
        assert_eq!(machine.helper_threads.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn one_worker_takes_everything() {
        let machine = Machine::with_cores(16);
        let (taken, helped) = crew_run(&machine, 1, Duration::ZERO, false);
        assert_eq!((taken, helped), (vec![CHUNKS], 0));
    }

    #[test]
    fn relay_helpers_only_while_qemu_waits() {
        // Two cores: the relay. Help is wanted only while chunks wait and
        // the producer waits for a free slot.
        let machine = Machine::with_cores(2);
        let (mut p, c) = ring();
        let crew = Crew::new(&c, &machine, 2, None);
        assert_eq!(crew.mode(), Mode::Relay);
        assert!(!crew.help_wanted(), "nothing published");
        for _ in 0..8 {
            p.acquire().unwrap();
            p.publish(64).unwrap();
        }
        assert!(
            !crew.help_wanted(),
            "chunks wait, but the producer does not"
        );
        std::thread::scope(|s| {
            let held = c.try_recv().unwrap();
            // The ninth chunk: the ring is full, the producer waits.
            let producer = s.spawn(move || {
                p.acquire().unwrap();
                p.publish(64).unwrap();
                p
            });
            while !c.producer_waiting() {
                std::thread::sleep(Duration::from_millis(1));
            }
            assert!(
                crew.help_wanted(),
                "seven chunks wait, and so does the producer"
            );
            drop(held);
            let mut p = producer.join().unwrap();
            p.close();
        });
        // Eager on the same ring wants help whenever a chunk waits.
        let many = Machine::with_cores(16);
        let eager = Crew::new(&c, &many, 2, None);
        assert!(eager.help_wanted());
        // And a whole run delivers every chunk once.
        let (taken, helped) = crew_run(&machine, 2, Duration::from_micros(100), false);
        assert_eq!(taken.iter().sum::<u64>(), CHUNKS);
        assert_eq!(helped, taken[1]);
    }

    /// A call-in wakes the helper that parked last (or, asked to, the
    /// oldest); the other sleeps on through its own re-checks, in its
    /// place, until the next call-in or the end. By count: the only waits
    /// are for the helpers to park and wake (bounded, so that a wrong
    /// order fails instead of hanging).
    #[test]
    fn the_helper_parked_last_is_called_in_first() {
        let wait_until = |f: &dyn Fn() -> bool| {
            let since = Instant::now();
            while !f() && since.elapsed() < Duration::from_secs(60) {
                std::thread::sleep(Duration::from_millis(1));
            }
            f()
        };
        for oldest in [false, true] {
            let idle = Idle::new(oldest);
            let woke: [AtomicBool; 3] = Default::default();
            let stop = AtomicBool::new(false);
            let seen = std::thread::scope(|s| {
                for (i, w) in woke.iter().enumerate() {
                    let (idle, stop) = (&idle, &stop);
                    s.spawn(move || {
                        idle.park(|| stop.load(Ordering::SeqCst));
                        w.store(true, Ordering::SeqCst);
                    });
                    wait_until(&|| lock(&idle.stack).len() == i + 1);
                }
                let order: [usize; 3] = if oldest { [0, 1, 2] } else { [2, 1, 0] };
                let woken = |i: usize| woke[order[i]].load(Ordering::SeqCst);
                let mut seen = vec![idle.wake_one()];
                seen.push(wait_until(&|| woken(0)));
                // Long enough for the others to re-check on their own.
                std::thread::sleep(3 * PARK_SLICE);
                seen.extend([!woken(1), !woken(2)]);
                seen.push(idle.parked.load(Ordering::SeqCst) == 2);
                seen.push(idle.wake_one());
                seen.push(wait_until(&|| woken(1)));
                seen.push(!woken(2));
                stop.store(true, Ordering::SeqCst);
                idle.wake_all();
                seen
            });
            assert!(seen.iter().all(|&ok| ok), "oldest {oldest}: {seen:?}");
            assert!(woke.iter().all(|w| w.load(Ordering::SeqCst)));
            assert_eq!(idle.parked.load(Ordering::SeqCst), 0);
            assert!(!idle.wake_one(), "nobody is parked");
        }
    }

    /// A helper that is wanted when it would park does not sleep.
    #[test]
    fn a_ready_helper_does_not_park() {
        let idle = Idle::new(false);
        idle.park(|| true);
        assert_eq!(idle.parked.load(Ordering::SeqCst), 0);
        assert!(lock(&idle.stack).is_empty());
    }

    #[test]
    fn the_default_leaves_qemu_a_core() {
        let n = default_workers();
        assert!((2..=MAX_DEFAULT_WORKERS).contains(&n));
        assert!(n >= usable_cores().saturating_sub(1).min(MAX_DEFAULT_WORKERS));
    }
}
