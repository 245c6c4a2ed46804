// SPDX-License-Identifier: GPL-2.0-or-later
//! Comparing runs: the first difference of two long sequences with
//! context, accesses modulo the values that no run can reproduce, dumps of
//! two runs, outputs; and [`Failures`], which collects every failed check of
//! a test so that one run reports all of them.

use std::fs::File;
use std::io::{BufRead, Read};
use std::path::Path;
use std::sync::Mutex;

use crate::lines::open_log;
use crate::lines::tail;
use crate::model::{MemAccess, SyscallEvent};

/// Lines of context shown around the first difference.
pub const CONTEXT: usize = 5;

/// Compares two sequences; on a difference returns a message with the first
/// differing index and `CONTEXT` entries either side from both.
pub fn compare_seq<T: PartialEq>(
    what: &str,
    left_name: &str,
    left: &[T],
    right_name: &str,
    right: &[T],
    fmt: impl Fn(&T) -> String,
) -> Result<(), String> {
    compare_seq_by(
        what,
        left_name,
        left,
        right_name,
        right,
        |_, a, b| a == b,
        |_, x| fmt(x),
    )
}

/// [`compare_seq`] with an equality that also gets the index, and a
/// formatter that gets the index too.
pub fn compare_seq_by<T>(
    what: &str,
    left_name: &str,
    left: &[T],
    right_name: &str,
    right: &[T],
    eq: impl Fn(usize, &T, &T) -> bool,
    fmt: impl Fn(usize, &T) -> String,
) -> Result<(), String> {
    let common = left.len().min(right.len());
    let first = (0..common).find(|&i| !eq(i, &left[i], &right[i]));
    let idx = match first {
        Some(i) => i,
        None if left.len() == right.len() => return Ok(()),
        None => common,
    };
    let mut msg = format!(
        "{what}: {left_name} has {} entries, {right_name} has {}; first difference at index {idx}\n",
        left.len(),
        right.len()
    );
    let from = idx.saturating_sub(CONTEXT);
    for (name, seq) in [(left_name, left), (right_name, right)] {
        msg.push_str(&format!("  --- {name} [{from}..]\n"));
        let to = (idx + CONTEXT + 1).min(seq.len());
        for (i, item) in seq.iter().enumerate().take(to).skip(from) {
            let mark = if i == idx { ">>" } else { "  " };
            msg.push_str(&format!("  {mark} {i:>9}: {}\n", fmt(i, item)));
        }
        if idx >= seq.len() {
            msg.push_str(&format!("  >> {idx:>9}: <end>\n"));
        }
    }
    Err(msg)
}

/// Compares two runs' libmem outputs of the same program: they must agree
/// on every access's pc, address, size and kind. Returns, per access, whether
/// its value differed: such values depend on something outside the guest's
/// control, so no third run can be expected to reproduce them either. In
/// practice: the thread id (`set_tid_address`, stored by glibc and loaded by
/// its locks), `getrandom` bytes (glibc's malloc `tcache_key`, loaded and
/// stored by every `free`), and `fstat` results of the stdout file (inode,
/// timestamps: copied field by field by mipsel's glibc). To catch the
/// timestamps, the two runs' stdout files must be created in different
/// seconds.
pub fn volatile_values(a: &[MemAccess], b: &[MemAccess]) -> Result<Vec<bool>, String> {
    compare_seq_by(
        "two ground-truth runs' accesses (pc, addr, size, kind)",
        "libmem run 1",
        a,
        "libmem run 2",
        b,
        |_, x, y| x.pc == y.pc && x.addr == y.addr && x.size == y.size && x.kind == y.kind,
        |_, m| m.to_string(),
    )
    .map_err(|e| format!("the guest is not deterministic under QEMU: {e}"))?;
    Ok(a.iter().zip(b).map(|(x, y)| x.value != y.value).collect())
}

/// Compares cannoli's accesses with libmem's: everything must be equal,
/// except the value where `volatile[i]` is set.
pub fn compare_accesses(
    libmem: &[MemAccess],
    cannoli: &[MemAccess],
    volatile: &[bool],
) -> Result<(), String> {
    let is_vol = |i: usize| volatile.get(i).copied().unwrap_or(false);
    compare_seq_by(
        "loads/stores",
        "libmem",
        libmem,
        "cannoli",
        cannoli,
        |i, x, y| {
            x.pc == y.pc
                && x.addr == y.addr
                && x.size == y.size
                && x.kind == y.kind
                && (x.value == y.value || is_vol(i))
        },
        |i, m| {
            if is_vol(i) {
                format!("{m}   (value differs between runs)")
            } else {
                m.to_string()
            }
        },
    )
}

/// The message for two files that differ at `lineno`: each side's line as
/// read (`n` bytes; 0 is the end of the file).
fn line_difference(
    a: &Path,
    b: &Path,
    lineno: u64,
    la: (usize, &[u8]),
    lb: (usize, &[u8]),
) -> String {
    let show = |(n, l): (usize, &[u8])| {
        if n == 0 {
            "<end of file>".to_string()
        } else {
            format!("{:?}", String::from_utf8_lossy(l).trim_end_matches('\n'))
        }
    };
    format!(
        "{} and {} differ at line {lineno}:\n  {}\n  {}",
        a.display(),
        b.display(),
        show(la),
        show(lb)
    )
}

/// Compares two files byte for byte; on a difference reports the first
/// differing line (1-based) of each.
pub fn compare_files(a: &Path, b: &Path) -> Result<(), String> {
    let open = |p: &Path| open_log(p);
    let (mut ra, mut rb) = (open(a)?, open(b)?);
    let (mut la, mut lb) = (Vec::new(), Vec::new());
    let mut lineno = 0u64;
    loop {
        la.clear();
        lb.clear();
        let na = ra
            .read_until(b'\n', &mut la)
            .map_err(|e| format!("reading {}: {e}", a.display()))?;
        let nb = rb
            .read_until(b'\n', &mut lb)
            .map_err(|e| format!("reading {}: {e}", b.display()))?;
        lineno += 1;
        if la != lb {
            return Err(line_difference(a, b, lineno, (na, &la), (nb, &lb)));
        }
        if na == 0 {
            return Ok(());
        }
    }
}

/// Syscalls whose result (and buffer) differ from run to run of the same
/// program: thread and process ids, random bytes, clocks.
const VOLATILE_SYSCALLS: &[&str] = &[
    "set_tid_address",
    "gettid",
    "getpid",
    "getppid",
    "getrandom",
    "clone",
    "clone3",
    "fork",
    "vfork",
    "clock_gettime",
    "clock_gettime64",
    "gettimeofday",
    "time",
];

/// Two `Y` lines of a volatile syscall that agree on everything but the
/// result and the data.
fn same_syscall_but_volatile(a: &[u8], b: &[u8]) -> bool {
    let parse = |l: &[u8]| SyscallEvent::parse(String::from_utf8_lossy(l).trim_end_matches('\n'));
    match (parse(a), parse(b)) {
        (Ok(x), Ok(y)) => {
            VOLATILE_SYSCALLS.contains(&x.name.as_str())
                && SyscallEvent {
                    ret: None,
                    data: Vec::new(),
                    ..x
                } == SyscallEvent {
                    ret: None,
                    data: Vec::new(),
                    ..y
                }
        }
        _ => false,
    }
}

/// Two `L`/`S` lines that agree on everything but the value.
fn same_access_but_value(a: &[u8], b: &[u8]) -> bool {
    let parse = |l: &[u8]| MemAccess::parse(String::from_utf8_lossy(l).trim_end_matches('\n'));
    match (parse(a), parse(b)) {
        (Ok(x), Ok(y)) => MemAccess { value: 0, ..x } == MemAccess { value: 0, ..y },
        _ => false,
    }
}

/// Compares two `cannoli-dump` files of the same program from different
/// runs: byte for byte, except the value field of the `volatile` accesses
/// (indexes among the `L`/`S` lines; see [`volatile_values`]) and the
/// result and data of the syscalls in `VOLATILE_SYSCALLS`.
pub fn compare_dumps(a: &Path, b: &Path, volatile: &[bool]) -> Result<(), String> {
    let (mut ra, mut rb) = (open_log(a)?, open_log(b)?);
    let (mut la, mut lb) = (Vec::new(), Vec::new());
    let mut lineno = 0u64;
    let mut access = 0usize;
    loop {
        la.clear();
        lb.clear();
        let na = ra
            .read_until(b'\n', &mut la)
            .map_err(|e| format!("reading {}: {e}", a.display()))?;
        let nb = rb
            .read_until(b'\n', &mut lb)
            .map_err(|e| format!("reading {}: {e}", b.display()))?;
        lineno += 1;
        let is_access = matches!(la.first(), Some(b'L' | b'S'));
        let same = if la == lb {
            true
        } else if la.starts_with(b"Y ") {
            same_syscall_but_volatile(&la, &lb)
        } else {
            is_access
                && volatile.get(access).copied().unwrap_or(false)
                && same_access_but_value(&la, &lb)
        };
        if !same {
            return Err(line_difference(a, b, lineno, (na, &la), (nb, &lb)));
        }
        if is_access {
            access += 1;
        }
        if na == 0 {
            return Ok(());
        }
    }
}

/// Collects failed checks so one run reports all of them.
#[derive(Default)]
pub struct Failures {
    context: String,
    list: Mutex<Vec<String>>,
}

impl Failures {
    pub fn new(context: impl Into<String>) -> Self {
        Failures {
            context: context.into(),
            list: Mutex::new(Vec::new()),
        }
    }
    /// Records `r`'s error under `check`.
    pub fn check(&self, check: &str, r: Result<(), String>) -> bool {
        match r {
            Ok(()) => true,
            Err(e) => {
                self.list.lock().unwrap().push(format!("[{check}] {e}"));
                false
            }
        }
    }
    pub fn fail(&self, check: &str, msg: impl Into<String>) {
        self.list
            .lock()
            .unwrap()
            .push(format!("[{check}] {}", msg.into()));
    }
    pub fn is_empty(&self) -> bool {
        self.list.lock().unwrap().is_empty()
    }
    /// Panics with every recorded failure.
    pub fn finish(self) {
        let list = self.list.into_inner().unwrap();
        if !list.is_empty() {
            panic!(
                "{}: {} check(s) failed:\n\n{}",
                self.context,
                list.len(),
                list.join("\n\n")
            );
        }
    }
}

/// Lossy text of a byte buffer, for messages.
pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Reads a whole file, for small outputs.
pub fn read_text(p: &Path) -> String {
    let mut s = String::new();
    if let Ok(mut f) = File::open(p) {
        let _ = f.read_to_string(&mut s);
    }
    s
}

/// Ok if the two outputs are equal, else both (their tails) in a message.
pub fn same_output(an: &str, a: &[u8], bn: &str, b: &[u8]) -> Result<(), String> {
    if a == b {
        return Ok(());
    }
    Err(format!(
        "{an} and {bn} outputs differ\n--- {an} ---\n{}\n--- {bn} ---\n{}",
        tail(&text(a), 15),
        tail(&text(b), 15)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run::RunDir;
    use std::fs;

    #[test]
    fn compare() {
        let a: Vec<u64> = (0..100).collect();
        let mut b = a.clone();
        assert!(compare_seq("t", "a", &a, "b", &b, |x| format!("{x:x}")).is_ok());
        b[50] = 7;
        let e = compare_seq("t", "a", &a, "b", &b, |x| format!("{x:x}")).unwrap_err();
        assert!(e.contains("first difference at index 50"), "{e}");
        assert!(
            e.contains(">>        50: 32") && e.contains(">>        50: 7"),
            "{e}"
        );
        let e = compare_seq("t", "a", &a, "b", &a[..90], |x| format!("{x:x}")).unwrap_err();
        assert!(e.contains("index 90") && e.contains("<end>"), "{e}");
    }

    #[test]
    fn dumps_modulo_volatile() {
        let d = RunDir::new();
        let (a, b) = (d.file("a"), d.file("b"));
        fs::write(&a, "X 10\nS 10 20 4 7cc3\nX 14\nL 14 20 4 1\n").unwrap();
        fs::write(&b, "X 10\nS 10 20 4 7cd7\nX 14\nL 14 20 4 1\n").unwrap();
        assert!(compare_dumps(&a, &b, &[true, false]).is_ok());
        let e = compare_dumps(&a, &b, &[false, true]).unwrap_err();
        assert!(e.contains("line 2"), "{e}");
        fs::write(&b, "X 10\nS 10 24 4 7cd7\nX 14\nL 14 20 4 1\n").unwrap();
        assert!(compare_dumps(&a, &b, &[true, true]).is_err());
        fs::write(&b, "X 10\nS 10 20 4 7cc3\nX 14\n").unwrap();
        assert!(compare_dumps(&a, &b, &[true, true])
            .unwrap_err()
            .contains("<end of file>"));
    }

    #[test]
    fn dumps_modulo_volatile_syscalls() {
        let d = RunDir::new();
        let (a, b) = (d.file("a"), d.file("b"));
        fs::write(&a, "X 10\nY 178 gettid 7cc3 0 0 0 0 0 0 0 -\n").unwrap();
        fs::write(&b, "X 10\nY 178 gettid 7cd7 0 0 0 0 0 0 0 -\n").unwrap();
        assert!(compare_dumps(&a, &b, &[]).is_ok());
        fs::write(&b, "X 10\nY 178 gettid 7cd7 1 0 0 0 0 0 0 -\n").unwrap();
        assert!(compare_dumps(&a, &b, &[]).is_err());
        fs::write(&a, "X 10\nY 63 read 1 0 0 0 0 0 0 0 -\n").unwrap();
        fs::write(&b, "X 10\nY 63 read 2 0 0 0 0 0 0 0 -\n").unwrap();
        assert!(compare_dumps(&a, &b, &[]).is_err());
    }
}
