//! Target `hello`: the handshake and control-line parsers of the wire crate
//! (`wire::parse_hello`, `wire::parse_control`), which read what any local
//! process may send the client.
//!
//! Checked for every input:
//! - no panic;
//! - an accepted hello respects every bound the client allocates or
//!   indexes by (the register count and names, syscall names, string
//!   lengths, pids, guest width, ring fd), and so does the `ClientInfo` the
//!   server makes of it (whose register accessors must not panic on a
//!   registers event of that size); it survives a round trip through JSON;
//! - an accepted control line is an `Expect` of a pid above 1 or a
//!   `Goodbye`;
//! - a refusal is one line, of bounded length, without control characters
//!   (it goes to the user's terminal and into QEMU's message).
//!
//! Input: a mode byte, then the line (mode even) or bytes from which
//! `arbitrary` edits a valid hello or control message (mode odd); bit 1 of
//! the mode picks the control parser.

use arbitrary::{Arbitrary, Unstructured};
use serde_json::{json, Map, Value};
use wire::{Control, Hello};

/// Runs the target on one input.
pub fn run(input: &[u8]) {
    let (mode, rest) = input.split_first().unwrap_or((&0, &[]));
    let line = if mode & 1 == 0 {
        String::from_utf8_lossy(rest).into_owned()
    } else {
        let mut u = Unstructured::new(rest);
        let base = if mode & 2 == 0 {
            good_hello()
        } else if mode & 4 == 0 {
            json!({"chunks": 3, "lost_events": 0, "exec": false})
        } else {
            json!({"expect_pid": 1234})
        };
        edit(base, &mut u)
    };
    if mode & 2 == 0 {
        check_hello(&line);
    } else {
        check_control(&line);
    }
}

/// A hello the client accepts, as JSON.
pub fn good_hello() -> Value {
    json!({
        "magic": wire::MAGIC,
        "wire_version": wire::WIRE_VERSION,
        "jitter_version": "0.1.0",
        "pid": 4242, "ppid": 1, "tid": 4243,
        "arch": "mipsel", "big_endian": false, "guest_bits": 32,
        "ring": {"proc_fd": 1000},
        "nonce": "00112233445566778899aabbccddeeff",
        "proof": "ab".repeat(32),
        "comm": "prog", "exe": "/usr/bin/prog",
        "regs": {"count": 32, "bytes": 4, "names": ["zero", "at"]},
        "syscall_names": {"4001": "exit", "4004": "write"}
    })
}

/// Checks what `parse_hello` makes of `line`.
pub fn check_hello(line: &str) {
    match wire::parse_hello(line) {
        Ok(h) => {
            check_accepted(&h);
            let again = serde_json::to_string(&h).expect("a hello serializes");
            match wire::parse_hello(&again) {
                Ok(h2) => assert_eq!(h, h2, "round trip"),
                Err(e) => panic!("an accepted hello, written back, is refused: {e}"),
            }
        }
        Err(e) => check_message(&e.to_string()),
    }
}

fn check_accepted(h: &Hello) {
    assert_eq!(h.magic, wire::MAGIC);
    assert_eq!(h.wire_version, wire::WIRE_VERSION);
    assert!(h.pid > 0 && h.tid > 0 && h.ppid >= 0, "pids {h:?}");
    assert!(h.guest_bits == 32 || h.guest_bits == 64);
    for s in [&h.arch, &h.jitter_version, &h.nonce] {
        assert!(s.len() <= wire::MAX_HELLO_NAME);
    }
    assert!(h.proof.len() <= 2 * wire::MAX_HELLO_NAME);
    for s in [&h.comm, &h.exe].into_iter().flatten() {
        assert!(s.len() <= wire::MAX_HELLO_STRING);
    }
    assert!(h.regs.count <= wire::MAX_REGS);
    assert!(h.regs.count == 0 || h.regs.bytes == 4 || h.regs.bytes == 8);
    assert!(h.regs.names.len() <= h.regs.count as usize);
    assert!(h.regs.names.iter().all(|n| n.len() <= wire::MAX_HELLO_NAME));
    assert!(h.syscall_names.len() <= wire::MAX_SYSCALL_NAMES);
    assert!(h
        .syscall_names
        .values()
        .all(|n| n.len() <= wire::MAX_HELLO_NAME));
    if let wire::channel::RingRef::ProcFd(fd) = h.ring {
        assert!(fd >= 0);
    }
    // What the server makes of it.
    let ci = cannoli::fuzzing::client_info(h);
    let names = ci.regs.names.len();
    assert!(names >= ci.regs.count as usize, "a name for every register");
    assert!(names <= (wire::MAX_REGS as usize).max(64), "{names} names");
    let regs: Vec<u8> = (0..ci.regs.count as usize * 8).map(|i| i as u8).collect();
    assert_eq!(ci.reg_values(&regs).count(), ci.regs.count as usize);
    for name in ["sp", "zero", "r0", "nonexistent"] {
        let _ = ci.reg(&regs, name);
        let _ = ci.reg(&regs[..regs.len() / 2], name);
    }
}

/// Checks what `parse_control` makes of `line`.
pub fn check_control(line: &str) {
    match wire::parse_control(line) {
        Ok(Control::Expect(e)) => assert!(e.expect_pid > 1, "{e:?}"),
        Ok(Control::Goodbye(_)) => {}
        Err(e) => check_message(&e.to_string()),
    }
}

/// A refusal shown to the user: one line, bounded, no control characters
/// (`wire::tame`: this target found serde's messages quoting the offending
/// value whole and unescaped).
fn check_message(m: &str) {
    assert!(!m.contains('\n'), "a message of several lines: {m:?}");
    assert!(
        !m.chars().any(char::is_control),
        "control characters in the message {m:?}"
    );
    assert!(
        m.len() <= 1024,
        "a message of {} bytes: {:?}...",
        m.len(),
        m.chars().take(300).collect::<String>()
    );
}

/// A JSON value `arbitrary` chooses, with strings that may carry control
/// characters and be long.
#[derive(Debug, Arbitrary)]
enum J {
    Null,
    Bool(bool),
    I64(i64),
    U64(u64),
    F64(f64),
    Small(i8),
    Str(String),
    Repeat(String, u16),
    Escape(u8),
    Arr(Vec<J>),
    Obj(Vec<(String, J)>),
    /// A value of the right shape for the keys that take a map or list.
    Names(Vec<(u64, String)>),
    RegNames(Vec<String>),
    Ring(i64),
}

impl J {
    fn value(self, depth: u32) -> Value {
        match self {
            J::Null => Value::Null,
            J::Bool(b) => b.into(),
            J::I64(v) => v.into(),
            J::U64(v) => v.into(),
            J::F64(v) => serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number),
            J::Small(v) => v.into(),
            J::Str(s) => s.into(),
            J::Repeat(s, n) => s.repeat((n as usize).min(5000)).into(),
            J::Escape(c) => format!("\x1b[31m{}\x07", c as char).into(),
            J::Arr(v) if depth < 3 => v.into_iter().map(|j| j.value(depth + 1)).collect(),
            J::Obj(v) if depth < 3 => Value::Object(
                v.into_iter()
                    .map(|(k, j)| (k, j.value(depth + 1)))
                    .collect::<Map<_, _>>(),
            ),
            J::Names(v) => Value::Object(
                v.into_iter()
                    .map(|(k, s)| (k.to_string(), Value::from(s)))
                    .collect(),
            ),
            J::RegNames(v) => v.into(),
            J::Ring(fd) => json!({ "proc_fd": fd }),
            J::Arr(_) | J::Obj(_) => Value::Null,
        }
    }
}

/// One edit of a message.
#[derive(Debug, Arbitrary)]
enum Edit {
    Set(u8, J),
    SetReg(u8, J),
    Remove(u8),
    Add(String, J),
    Attached,
}

const KEYS: &[&str] = &[
    "magic",
    "wire_version",
    "jitter_version",
    "pid",
    "ppid",
    "tid",
    "arch",
    "big_endian",
    "guest_bits",
    "ring",
    "nonce",
    "proof",
    "comm",
    "exe",
    "regs",
    "syscall_names",
    "chunks",
    "lost_events",
    "exec",
    "expect_pid",
];

/// Applies the edits `u` describes to `v` and writes it as a line, perhaps
/// cut short.
fn edit(mut v: Value, u: &mut Unstructured<'_>) -> String {
    let edits: Vec<Edit> = u.arbitrary().unwrap_or_default();
    for e in edits {
        let Some(obj) = v.as_object_mut() else { break };
        match e {
            Edit::Set(k, j) => {
                obj.insert(KEYS[k as usize % KEYS.len()].into(), j.value(0));
            }
            Edit::SetReg(k, j) => {
                let key = ["count", "bytes", "names"][k as usize % 3];
                if let Some(Value::Object(r)) = obj.get_mut("regs") {
                    r.insert(key.into(), j.value(0));
                }
            }
            Edit::Remove(k) => {
                obj.remove(KEYS[k as usize % KEYS.len()]);
            }
            Edit::Add(k, j) => {
                obj.insert(k, j.value(0));
            }
            Edit::Attached => {
                obj.insert("ring".into(), "attached".into());
            }
        }
    }
    let mut line = v.to_string();
    if let Ok(cut) = u.arbitrary::<u16>() {
        if cut % 4 == 0 && !line.is_empty() {
            let mut at = cut as usize % line.len();
            while !line.is_char_boundary(at) {
                at -= 1;
            }
            line.truncate(at);
        }
    }
    line.push('\n');
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_good_hello_is_accepted() {
        let line = good_hello().to_string();
        let h = wire::parse_hello(&line).expect("accepted");
        check_accepted(&h);
        check_hello(&line);
        check_control("{\"expect_pid\": 7}\n");
        check_control("{\"chunks\": 1, \"lost_events\": 0}\n");
    }

    /// Lines whose refusals echo what QEMU's side sent (found by this
    /// target): a long value quoted whole, control characters in an
    /// unknown ring kind and in `jitter_version`.
    #[test]
    fn refusals_never_echo_the_line() {
        let mut lines = Vec::new();
        let mut v = good_hello();
        v["arch"] = "\0".repeat(2000).into();
        v["pid"] = "x".repeat(5000).into();
        lines.push(v.to_string());
        let mut v = good_hello();
        v["ring"] = "\u{1b}[31mred".into();
        lines.push(v.to_string());
        // A refusal of several lines (the newline escaped in the JSON).
        let mut v = good_hello();
        v["ring"] = "\u{1b}[31m\n\u{7}".into();
        lines.push(v.to_string());
        let mut v = good_hello();
        v["wire_version"] = 4.into();
        v["jitter_version"] = "\u{1b}]0;title\u{7}".into();
        lines.push(v.to_string());
        for line in lines {
            let e = wire::parse_hello(&line).expect_err("refused").to_string();
            assert!(
                !e.contains('\n') && !e.chars().any(char::is_control) && e.len() <= 1024,
                "{:?}",
                e.chars().take(200).collect::<String>()
            );
        }
    }
}
