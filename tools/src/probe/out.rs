// SPDX-License-Identifier: GPL-2.0-or-later
//! How a hit is written: one text line like ftrace's, one JSON object, or
//! a line of SystemTap's call flow; and the flow's spans as a Chrome
//! trace-event file (Perfetto, `chrome://tracing`).

use std::io::Write as _;

use serde_json::{json, Value};

use super::hex::{self, Key};

/// Where in a function a hit is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum At {
    Entry,
    Return,
    Pc,
}

impl At {
    fn name(self) -> &'static str {
        match self {
            At::Entry => "entry",
            At::Return => "return",
            At::Pc => "pc",
        }
    }
}

/// One hit of a probe.
#[derive(Debug, Clone)]
pub struct Hit<'a> {
    pub pid: i32,
    pub tid: i32,
    /// Instructions this thread ran before this one (`--insns`).
    pub insn: Option<u64>,
    pub at: At,
    /// The `-p` as given.
    pub probe: &'a str,
    pub function: Option<&'a str>,
    /// The function's name as a person reads it, where that is not its
    /// symbol: `--flow`'s and the timeline's ([`super::plan::Plan::shown`]).
    pub shown: Option<&'a str>,
    pub pc: u64,
    /// At an entry; `None` for a stack slot this thread never stored.
    pub args: Vec<Option<u64>>,
    /// At a return: the result (`None`: unknown, see `unwound`).
    pub ret: Option<u64>,
    /// The frame was left without its return (a `longjmp`).
    pub unwound: bool,
    /// At a return: instructions since the entry (`--insns`).
    pub insns: Option<u64>,
    /// At a pc probe: every register by name.
    pub regs: Regs<'a>,
    /// Probed frames open in this thread, this one included.
    pub depth: usize,
}

/// Appends `0x` and `v` in lower-case hex: a million hits of 32
/// registers each are mostly this, and `write!` costs several times more.
fn push_hex(s: &mut Vec<u8>, v: u64) {
    let mut buf = [0u8; 18];
    let len = hex_into(&mut buf, v);
    s.extend_from_slice(&buf[..len]);
}

/// Writes `0x` and `v` in lower-case hex at the start of `out` (at least
/// 18 bytes); returns how many bytes that took.
fn hex_into(out: &mut [u8], v: u64) -> usize {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let digits = (64 - (v | 1).leading_zeros()).div_ceil(4) as usize;
    out[0] = b'0';
    out[1] = b'x';
    let mut v = v;
    for b in out[2..2 + digits].iter_mut().rev() {
        *b = DIGITS[(v & 0xf) as usize];
        v >>= 4;
    }
    2 + digits
}

/// Appends `v` in decimal (a thread id on every line).
fn push_dec(s: &mut Vec<u8>, v: u64) {
    let mut buf = [0u8; 20];
    let mut i = buf.len();
    let mut v = v;
    loop {
        i -= 1;
        buf[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    s.extend_from_slice(&buf[i..]);
}

/// The registers of a pc probe: each name with its value, the pc left
/// out (the line has it).
#[derive(Debug, Clone, Copy, Default)]
pub struct Regs<'a> {
    pub names: &'a [String],
    pub values: &'a [u64],
    /// [`hex::keys`] of `names`, for the text line's fast path; empty: none.
    pub keys: &'a [Key],
}

impl<'a> Regs<'a> {
    fn iter(&self) -> impl Iterator<Item = (&'a str, u64)> + 'a {
        self.names
            .iter()
            .zip(self.values.iter())
            .filter(|(n, _)| n.as_str() != "pc")
            .map(|(n, v)| (n.as_str(), *v))
    }
}

fn push_opt(s: &mut Vec<u8>, v: Option<u64>) {
    match v {
        Some(v) => push_hex(s, v),
        None => s.push(b'?'),
    }
}

fn hex(v: Option<u64>) -> String {
    match v {
        Some(v) => format!("{v:#x}"),
        None => "?".into(),
    }
}

/// A `--json` hit, as [`Hit::json`] writes it: written straight from the
/// hit, without a map built per line (a `-p '*'` run writes millions).
/// The fields are in the order of their names, as a `serde_json` map has
/// always written them; those a kind of hit lacks are left out.
#[derive(serde::Serialize)]
struct JsonLine<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    args: Option<Vec<Option<JsonHex>>>,
    at: &'a str,
    depth: usize,
    function: Option<&'a str>,
    insn: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    insns: Option<u64>,
    pc: JsonHex,
    pid: i32,
    probe: &'a str,
    /// By name, sorted; a repeated name keeps its last register.
    #[serde(skip_serializing_if = "Option::is_none")]
    regs: Option<std::collections::BTreeMap<&'a str, JsonHex>>,
    /// At a return, the result or `null`.
    #[serde(skip_serializing_if = "Option::is_none")]
    ret: Option<Option<JsonHex>>,
    tid: i32,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    unwound: bool,
}

/// A value as a JSON string of `0x` and lower-case hex.
struct JsonHex(u64);

impl serde::Serialize for JsonHex {
    fn serialize<S: serde::Serializer>(&self, ser: S) -> Result<S::Ok, S::Error> {
        let mut buf = [0u8; 18];
        let len = hex_into(&mut buf, self.0);
        // `hex_into` writes ASCII only.
        ser.serialize_str(std::str::from_utf8(&buf[..len]).unwrap_or("0x?"))
    }
}

/// A pc probe's line in the modes whose line needs the thread's serial
/// state (`--insns`, `--json`, `--flow`), split where it goes: a worker
/// writes the `pc_tail`, the serial phase the `pc_head` in front of
/// it. Together they are [`Hit::text`], [`Hit::json`] or [`Hit::flow`]
/// of the same hit, byte for byte.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Split {
    Text,
    Json,
    Flow,
}

/// The JSON object keys of `names` in the order `serde_json` writes a
/// map's (sorted; a repeated name keeps its last register), each with the
/// register's index and its key written as JSON; the pc left out.
pub fn json_keys(names: &[String]) -> Vec<(usize, Vec<u8>)> {
    let mut m = std::collections::BTreeMap::new();
    for (i, n) in names.iter().enumerate() {
        if n != "pc" {
            m.insert(n.as_str(), i);
        }
    }
    m.into_iter()
        .map(|(n, i)| (i, Value::from(n).to_string().into_bytes()))
        .collect()
}

/// What comes before a pc hit's `pc_tail`: the thread, the instruction
/// index, the depth, as `split` writes them.
pub fn pc_head(split: Split, tid: i32, insn: Option<u64>, depth: usize, s: &mut Vec<u8>) {
    match split {
        Split::Text => {
            let _ = write!(s, "{tid} ");
            match insn {
                Some(i) => push_dec(s, i),
                None => s.push(b'-'),
            }
            s.push(b' ');
        }
        Split::Flow => {
            if let Some(i) = insn {
                let _ = write!(s, "{i:>10} ");
            }
            let _ = write!(s, "{tid}: ");
            for _ in 1..depth {
                s.extend_from_slice(b"  ");
            }
        }
        Split::Json => {
            let _ = write!(
                s,
                "{{\"at\":\"pc\",\"depth\":{depth},\"function\":null,\"insn\":"
            );
            match insn {
                Some(i) => push_dec(s, i),
                None => s.extend_from_slice(b"null"),
            }
            s.push(b',');
        }
    }
}

impl Hit<'_> {
    /// The rest of a pc hit's line after its [`pc_head`]; `keys`: the
    /// [`json_keys`] of the registers' names, for [`Split::Json`].
    pub fn pc_tail(&self, split: Split, keys: &[(usize, Vec<u8>)], s: &mut Vec<u8>) {
        match split {
            Split::Text => {
                s.extend_from_slice(self.probe.as_bytes());
                s.push(b' ');
                push_hex(s, self.pc);
                self.values(s);
            }
            Split::Flow => {
                let _ = write!(s, "@ {} {:#x}", self.probe, self.pc);
                self.values(s);
            }
            Split::Json => {
                s.extend_from_slice(b"\"pc\":\"");
                push_hex(s, self.pc);
                let _ = write!(s, "\",\"pid\":{},\"probe\":", self.pid);
                let _ = serde_json::to_writer(&mut *s, self.probe);
                s.extend_from_slice(b",\"regs\":{");
                let mut first = true;
                for (i, k) in keys {
                    let Some(v) = self.regs.values.get(*i) else {
                        continue;
                    };
                    if !first {
                        s.push(b',');
                    }
                    first = false;
                    s.extend_from_slice(k);
                    s.extend_from_slice(b":\"");
                    push_hex(s, *v);
                    s.push(b'"');
                }
                let _ = write!(s, "}},\"tid\":{}}}", self.tid);
            }
        }
        s.push(b'\n');
    }
}

impl Hit<'_> {
    /// `TID INSN PROBE PC` and what the probe reports.
    pub fn text(&self, s: &mut Vec<u8>) {
        if self.tid < 0 {
            s.push(b'-');
        }
        push_dec(s, u64::from(self.tid.unsigned_abs()));
        s.push(b' ');
        match self.insn {
            Some(i) => push_dec(s, i),
            None => s.push(b'-'),
        }
        s.push(b' ');
        s.extend_from_slice(self.probe.as_bytes());
        s.push(b' ');
        push_hex(s, self.pc);
        self.values(s);
        s.push(b'\n');
    }

    fn values(&self, s: &mut Vec<u8>) {
        match self.at {
            At::Entry => {
                for (i, a) in self.args.iter().enumerate() {
                    let _ = write!(s, " arg{i}=");
                    push_opt(s, *a);
                }
            }
            At::Return => {
                s.extend_from_slice(b" ret=");
                push_opt(s, self.ret);
                if self.unwound {
                    s.extend_from_slice(b" unwound");
                }
                if let Some(n) = self.insns {
                    let _ = write!(s, " insns={n}");
                }
            }
            At::Pc if self.regs.keys.len() == self.regs.names.len() => {
                // Written in place: room for every register made at once
                // (a memset), each key and number put in as fixed-size
                // moves, the rest cut off.
                let start = s.len();
                s.resize(start + self.regs.keys.len() * hex::MAX_PER_KEY, 0);
                let at = hex::put_regs(&mut s[start..], self.regs.keys, self.regs.values);
                s.truncate(start + at);
            }
            At::Pc => {
                for (n, v) in self.regs.iter() {
                    s.push(b' ');
                    s.extend_from_slice(n.as_bytes());
                    s.push(b'=');
                    push_hex(s, v);
                }
            }
        }
    }

    /// One JSON object on a line: a `JsonLine`, its keys in the sorted
    /// order a `serde_json` map writes them.
    pub fn json(&self, s: &mut Vec<u8>) {
        let line = JsonLine {
            args: (self.at == At::Entry)
                .then(|| self.args.iter().map(|a| a.map(JsonHex)).collect()),
            at: self.at.name(),
            depth: self.depth,
            function: self.function,
            insn: self.insn,
            insns: self.insns.filter(|_| self.at == At::Return),
            pc: JsonHex(self.pc),
            pid: self.pid,
            probe: self.probe,
            regs: (self.at == At::Pc)
                .then(|| self.regs.iter().map(|(n, v)| (n, JsonHex(v))).collect()),
            ret: (self.at == At::Return).then(|| self.ret.map(JsonHex)),
            tid: self.tid,
            unwound: self.at == At::Return && self.unwound,
        };
        // Writing to a vector fails only where serializing does, and these
        // fields always serialize.
        let _ = serde_json::to_writer(&mut *s, &line);
        s.push(b'\n');
    }

    /// SystemTap's call flow: `[INSN] TID: -> func(arg0=..)`, indented by
    /// depth, `<- func ret=..` at the return (INSN with `--insns`).
    pub fn flow(&self, s: &mut Vec<u8>) {
        let indent = "  ".repeat(self.depth.saturating_sub(1));
        let func = self.shown.or(self.function).unwrap_or(self.probe);
        if let Some(i) = self.insn {
            let _ = write!(s, "{i:>10} ");
        }
        let _ = write!(s, "{}: {indent}", self.tid);
        match self.at {
            At::Entry => {
                let _ = write!(s, "-> {func}(");
                for (i, a) in self.args.iter().enumerate() {
                    let sep = if i == 0 { "" } else { ", " };
                    let _ = write!(s, "{sep}arg{i}={}", hex(*a));
                }
                s.push(b')');
            }
            At::Return => {
                let _ = write!(s, "<- {func}");
                self.values(s);
            }
            At::Pc => {
                let _ = write!(s, "@ {} {:#x}", self.probe, self.pc);
                self.values(s);
            }
        }
        s.push(b'\n');
    }

    /// A Chrome trace event: `B` at an entry, `E` at a return, `i` at a
    /// pc. The clock is the thread's instruction count with `--insns`, else
    /// its count of hits.
    pub fn timeline(&self, ts: u64) -> Value {
        let ph = match self.at {
            At::Entry => "B",
            At::Return => "E",
            At::Pc => "i",
        };
        let mut v = json!({
            "name": self.shown.or(self.function).unwrap_or(self.probe),
            "ph": ph,
            "pid": self.pid,
            "tid": self.tid,
            "ts": ts,
        });
        let args = match self.at {
            At::Entry => json!({
                "args": self.args.iter().map(|a| hex(*a)).collect::<Vec<_>>(),
                "pc": format!("{:#x}", self.pc),
            }),
            At::Return => json!({ "ret": hex(self.ret) }),
            At::Pc => json!({ "pc": format!("{:#x}", self.pc) }),
        };
        v["args"] = args;
        if self.at == At::Pc {
            v["s"] = json!("t");
        }
        v
    }
}

/// The timeline track of goroutine `n` of a Go program: a thread id no
/// thread has (Linux's are below 2^22), so that a goroutine's spans nest
/// on a track of their own whichever threads ran them.
pub fn goroutine_track(n: u64) -> u64 {
    (1 << 30) + n
}

/// The trace-event metadata that names track `tid` of process `pid`.
pub fn track_name(pid: i32, tid: u64, name: &str) -> Value {
    json!({
        "name": "thread_name",
        "ph": "M",
        "pid": pid,
        "tid": tid,
        "args": { "name": name },
    })
}

#[cfg(test)]
mod tests {
    use super::hex::keys;
    use super::*;

    fn hit(at: At) -> Hit<'static> {
        Hit {
            pid: 7,
            tid: 8,
            insn: Some(100),
            at,
            probe: "pr_add6",
            function: Some("pr_add6"),
            shown: None,
            pc: 0x40089c,
            args: vec![Some(1), None],
            ret: Some(0x15),
            unwound: false,
            insns: Some(12),
            regs: Regs {
                names: Box::leak(Box::new(["a0".into(), "pc".into(), "sp".into()])),
                values: &[1, 0x40089c, 0x7ff0],
                keys: &[],
            },
            depth: 2,
        }
    }

    #[test]
    fn hex_digits() {
        let more = [
            0x9,
            0xa,
            0x1234_5678_9abc_def0,
            0xfedc_ba98,
            0x8000_0000,
            0x1_0000_0000,
        ];
        for v in [0, 1, 0xf, 0x10, 0xff, 0x100, 0xdead_beef, 1 << 63, u64::MAX]
            .into_iter()
            .chain(more)
        {
            let mut s = Vec::new();
            push_hex(&mut s, v);
            assert_eq!(s, format!("{v:#x}").as_bytes());
            let mut s = Vec::new();
            push_dec(&mut s, v);
            assert_eq!(s, format!("{v}").as_bytes());
        }
    }

    #[test]
    fn pc_head_and_tail_are_the_line() {
        let names: Vec<String> = ["zero", "sp", "pc", "a0", "sp", "b\"q"]
            .map(String::from)
            .into();
        let k = keys(&names);
        let jk = json_keys(&names);
        let values = [0, 0x7ff0, 0x40089c, u64::MAX, 0x7fe0];
        for (insn, depth, tid, keyed) in [(Some(100), 2, 8, true), (None, 0, -3, false)] {
            let mut h = hit(At::Pc);
            // A pc probe names no function (`base` in the tracer).
            h.function = None;
            h.insn = insn;
            h.depth = depth;
            h.tid = tid;
            h.probe = "0x4\"0";
            h.regs = Regs {
                names: &names,
                values: &values,
                keys: if keyed { &k } else { &[] },
            };
            for split in [Split::Text, Split::Json, Split::Flow] {
                let mut whole = Vec::new();
                match split {
                    Split::Text => h.text(&mut whole),
                    Split::Json => h.json(&mut whole),
                    Split::Flow => h.flow(&mut whole),
                }
                let mut parts = Vec::new();
                pc_head(split, tid, insn, depth, &mut parts);
                h.pc_tail(split, &jk, &mut parts);
                assert_eq!(
                    String::from_utf8(parts),
                    String::from_utf8(whole),
                    "{split:?}"
                );
            }
        }
    }

    #[test]
    fn pc_line_by_keys_is_by_names() {
        let mut h = hit(At::Pc);
        let names: Vec<String> = ["zero", "a0", "pc", "t9", "sp"].map(String::from).into();
        let k = keys(&names);
        let values = [0, u64::MAX, 0x40089c, 0x1234_5678, 1 << 31];
        h.regs = Regs {
            names: &names,
            values: &values,
            keys: &[],
        };
        let mut by_names = Vec::new();
        h.text(&mut by_names);
        h.regs.keys = &k;
        let mut by_keys = Vec::new();
        h.text(&mut by_keys);
        assert_eq!(String::from_utf8(by_keys), String::from_utf8(by_names));
    }

    /// [`Hit::json`] as a `serde_json` map writes it (what it did before
    /// it wrote its struct): the same bytes, for every kind of hit.
    #[test]
    fn json_lines_are_the_maps() {
        fn hex_or_null(v: Option<u64>) -> Value {
            v.map_or(Value::Null, |v| Value::String(format!("{v:#x}")))
        }
        fn as_map(h: &Hit) -> String {
            let mut m = serde_json::Map::new();
            m.insert("pid".into(), json!(h.pid));
            m.insert("tid".into(), json!(h.tid));
            m.insert("insn".into(), json!(h.insn));
            m.insert("probe".into(), json!(h.probe));
            m.insert("at".into(), json!(h.at.name()));
            m.insert("function".into(), json!(h.function));
            m.insert("pc".into(), json!(format!("{:#x}", h.pc)));
            match h.at {
                At::Entry => {
                    let a = h.args.iter().map(|a| hex_or_null(*a)).collect();
                    m.insert("args".into(), Value::Array(a));
                }
                At::Return => {
                    m.insert("ret".into(), hex_or_null(h.ret));
                    if h.unwound {
                        m.insert("unwound".into(), json!(true));
                    }
                    if let Some(n) = h.insns {
                        m.insert("insns".into(), json!(n));
                    }
                }
                At::Pc => {
                    let r = h
                        .regs
                        .iter()
                        .map(|(n, v)| (n.to_string(), hex_or_null(Some(v))));
                    m.insert("regs".into(), Value::Object(r.collect()));
                }
            }
            m.insert("depth".into(), json!(h.depth));
            Value::Object(m).to_string() + "\n"
        }
        let names: Vec<String> = ["sp", "pc", "a0", "sp", "b\"q"].map(String::from).into();
        let values = [0x7ff0, 0x40089c, u64::MAX, 0x7fe0, 0];
        for at in [At::Entry, At::Return, At::Pc] {
            for odd in [false, true] {
                let mut h = hit(at);
                if odd {
                    (h.insn, h.insns, h.ret, h.function) = (None, None, None, None);
                    (h.unwound, h.tid, h.probe) = (true, -1, "main.\"x\\");
                    h.args = vec![];
                    h.regs = Regs {
                        names: &names,
                        values: &values,
                        keys: &[],
                    };
                }
                let mut s = Vec::new();
                h.json(&mut s);
                assert_eq!(String::from_utf8(s).unwrap(), as_map(&h), "{at:?} {odd}");
            }
        }
    }

    #[test]
    fn text_json_and_flow() {
        let mut s = Vec::new();
        hit(At::Entry).text(&mut s);
        hit(At::Return).text(&mut s);
        hit(At::Pc).text(&mut s);
        assert_eq!(
            String::from_utf8(s).unwrap(),
            "8 100 pr_add6 0x40089c arg0=0x1 arg1=?\n\
             8 100 pr_add6 0x40089c ret=0x15 insns=12\n\
             8 100 pr_add6 0x40089c a0=0x1 sp=0x7ff0\n"
        );
        let mut s = Vec::new();
        hit(At::Entry).json(&mut s);
        let v: Value = serde_json::from_slice(&s).unwrap();
        assert_eq!(v["args"], json!(["0x1", null]));
        assert_eq!(
            (v["at"].as_str(), v["depth"].as_u64()),
            (Some("entry"), Some(2))
        );
        let mut s = Vec::new();
        hit(At::Entry).flow(&mut s);
        hit(At::Return).flow(&mut s);
        let mut h = hit(At::Return);
        h.insn = None;
        h.insns = None;
        h.flow(&mut s);
        assert_eq!(
            String::from_utf8(s).unwrap(),
            "       100 8:   -> pr_add6(arg0=0x1, arg1=?)\n       100 8:   <- pr_add6 ret=0x15 insns=12\n\
             8:   <- pr_add6 ret=0x15\n"
        );
    }
}
