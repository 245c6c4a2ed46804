// SPDX-License-Identifier: GPL-2.0-or-later
//! Helpers for the recording tests (`tests/recording.rs`):
//!
//! * [`Tool`]: one run of a release binary (`cannoli`, `cannoli-dump`)
//!   under the harness's identical conditions (empty environment but for
//!   where QEMU is, [`QEMU_COMMON_ARGS`] through `CANNOLI_QEMU_ARGS`,
//!   QEMU's [`QEMU_ENV`], the host's address space randomisation off,
//!   stdin `/dev/null`, stdout and stderr to files, cwd the run directory),
//!   with a time limit;
//! * [`frames`]: the frames of a recording, read from its bytes with the
//!   layout of `cannoli/src/recording/format.rs`, written down again here
//!   (the test must not trust the reader it tests);
//! * [`line_kinds`]: `cannoli-dump` lines counted by kind;
//! * [`by_stream`]: a tool's text output grouped by guest thread;
//! * [`Json`]: a small JSON parser, for `cannoli info --json`.

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use crate::locate::{qemu_builds, release_artifact, QEMU_COMMON_ARGS, QEMU_ENV};
use crate::run::{no_aslr, tail, ChildGuard, RunDir};

// ---------------------------------------------------------------------------
// Running the tools
// ---------------------------------------------------------------------------

/// A release binary to run, e.g. `Tool::new("cannoli").args(["info", f])`.
#[derive(Debug, Clone)]
pub struct Tool {
    pub exe: PathBuf,
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
}

/// One finished run of a [`Tool`].
#[derive(Debug)]
pub struct ToolRun {
    pub status: ExitStatus,
    pub stdout: Vec<u8>,
    pub stderr: String,
    pub cmdline: String,
    pub elapsed: Duration,
}

impl ToolRun {
    /// Its exit code; an error naming the signal if it died of one.
    pub fn code(&self) -> Result<i32, String> {
        self.status.code().ok_or_else(|| {
            format!(
                "`{}` died of {}\n--- stderr ---\n{}",
                self.cmdline,
                self.status,
                tail(&self.stderr, 20)
            )
        })
    }

    /// Ok if it exited with `want`.
    pub fn expect_code(&self, want: i32) -> Result<(), String> {
        let got = self.code()?;
        if got == want {
            return Ok(());
        }
        Err(format!(
            "`{}` exited with {got}, expected {want}\n--- stderr ---\n{}",
            self.cmdline,
            tail(&self.stderr, 20)
        ))
    }

    pub fn stderr_lines(&self) -> Vec<&str> {
        self.stderr.lines().collect()
    }
}

impl Tool {
    /// `target/release/<name>`.
    pub fn new(name: &str) -> Tool {
        Tool {
            exe: release_artifact(name),
            args: Vec::new(),
            env: Vec::new(),
        }
    }

    pub fn arg(mut self, a: impl AsRef<std::ffi::OsStr>) -> Tool {
        self.args.push(a.as_ref().to_string_lossy().into_owned());
        self
    }

    pub fn args<I, S>(mut self, args: I) -> Tool
    where
        I: IntoIterator<Item = S>,
        S: AsRef<std::ffi::OsStr>,
    {
        for a in args {
            self = self.arg(a);
        }
        self
    }

    pub fn env(mut self, k: &str, v: impl AsRef<std::ffi::OsStr>) -> Tool {
        self.env
            .push((k.to_string(), v.as_ref().to_string_lossy().into_owned()));
        self
    }

    /// Shell-like rendering for messages.
    pub fn display(&self) -> String {
        let mut s = String::new();
        for (k, v) in &self.env {
            s += &format!("{k}={v} ");
        }
        s += &self.exe.display().to_string();
        for a in &self.args {
            s += &format!(" {a}");
        }
        s
    }

    /// Runs it in `dir` with the harness's conditions (see the module doc):
    /// an empty environment plus `CANNOLI_QEMU_BUILD`, `CANNOLI_QEMU_ARGS`
    /// (the common QEMU arguments: `-seed 1`, and `-U` of QEMU's own
    /// variables), [`QEMU_ENV`] and `self.env`; stdout and stderr to
    /// `<tag>.stdout` / `<tag>.stderr`. Killed after `limit`, which is then
    /// an error.
    pub fn run(&self, dir: &RunDir, tag: &str, limit: Duration) -> Result<ToolRun, String> {
        let q = qemu_builds();
        let out_path = dir.file(&format!("{tag}.stdout"));
        let err_path = dir.file(&format!("{tag}.stderr"));
        let mut c = Command::new(&self.exe);
        c.args(&self.args)
            .env_clear()
            .envs(QEMU_ENV.iter().copied())
            .env("CANNOLI_QEMU_BUILD", &q.build)
            .env("CANNOLI_QEMU_ARGS", QEMU_COMMON_ARGS.join(" "))
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .current_dir(dir.path())
            .stdin(Stdio::null())
            .stdout(File::create(&out_path).expect("create stdout file"))
            .stderr(File::create(&err_path).expect("create stderr file"));
        no_aslr(&mut c);
        let line = self.display();
        let start = Instant::now();
        let child = c
            .spawn()
            .map_err(|e| format!("cannot start `{line}`: {e}"))?;
        let mut child = ChildGuard::new(child, line.clone());
        let status = child.wait_timeout(limit);
        let elapsed = start.elapsed();
        let stderr = String::from_utf8_lossy(&fs::read(&err_path).unwrap_or_default()).into_owned();
        let status = status.ok_or_else(|| {
            format!(
                "`{line}` did not finish within {limit:?}; killed\n--- stderr ---\n{}",
                tail(&stderr, 20)
            )
        })?;
        Ok(ToolRun {
            status,
            stdout: fs::read(&out_path).unwrap_or_default(),
            stderr,
            cmdline: line,
            elapsed,
        })
    }
}

// ---------------------------------------------------------------------------
// The file's frames
// ---------------------------------------------------------------------------

/// First bytes of a recording.
pub const MAGIC: &[u8; 8] = b"CNLTRACE";
/// Last bytes of a finished one.
pub const TRAILER_MAGIC: &[u8; 8] = b"CNLINDEX";
pub const HEADER_BYTES: usize = 16;
pub const FRAME_HEADER_BYTES: usize = 32;
pub const TRAILER_BYTES: usize = 16;
/// Frame kinds.
pub const KIND_INFO: u8 = 1;
pub const KIND_STREAM: u8 = 2;
pub const KIND_TABLE: u8 = 3;
pub const KIND_CHUNK: u8 = 4;
pub const KIND_END: u8 = 5;
pub const KIND_EXIT: u8 = 6;
pub const KIND_INDEX: u8 = 7;

/// One frame of a recording.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Frame {
    /// Offset of its header in the file.
    pub offset: usize,
    pub kind: u8,
    pub codec: u8,
    pub stream: u32,
    pub seq: u64,
    pub stored_len: usize,
    pub raw_len: usize,
}

impl Frame {
    /// Offset of its payload.
    pub fn payload(&self) -> usize {
        self.offset + FRAME_HEADER_BYTES
    }
    /// Offset just past it.
    pub fn end(&self) -> usize {
        self.payload() + self.stored_len
    }
}

/// The frames of a whole recording, checking the header, every frame
/// header's own CRC-32 and the trailer (which must point at the last index
/// frame and end the file).
pub fn frames(b: &[u8]) -> Result<Vec<Frame>, String> {
    if b.len() < HEADER_BYTES + TRAILER_BYTES || &b[..8] != MAGIC {
        return Err("no CNLTRACE header".into());
    }
    let u32_at = |o: usize| u32::from_le_bytes(b[o..o + 4].try_into().unwrap());
    let u64_at = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().unwrap());
    if u32_at(8) != 1 || u32_at(12) as usize != HEADER_BYTES {
        return Err(format!(
            "header: version {}, {} bytes",
            u32_at(8),
            u32_at(12)
        ));
    }
    let body_end = b.len() - TRAILER_BYTES;
    if &b[body_end + 8..] != TRAILER_MAGIC {
        return Err("no CNLINDEX trailer".into());
    }
    let mut out = Vec::new();
    let mut o = HEADER_BYTES;
    while o < body_end {
        if o + FRAME_HEADER_BYTES > body_end {
            return Err(format!("a frame header at byte {o} runs into the trailer"));
        }
        if crc32(&b[o..o + 28]) != u32_at(o + 28) {
            return Err(format!("the frame header at byte {o} fails its checksum"));
        }
        let f = Frame {
            offset: o,
            kind: b[o],
            codec: b[o + 1],
            stream: u32_at(o + 4),
            seq: u64_at(o + 8),
            stored_len: u32_at(o + 16) as usize,
            raw_len: u32_at(o + 20) as usize,
        };
        if !(KIND_INFO..=KIND_INDEX).contains(&f.kind) || f.end() > body_end {
            return Err(format!("bad frame at byte {o}: {f:?}"));
        }
        if crc32(&b[f.payload()..f.end()]) != u32_at(o + 24) {
            return Err(format!(
                "the payload of the frame at byte {o} fails its checksum"
            ));
        }
        out.push(f);
        o = f.end();
    }
    let last_index = u64_at(body_end) as usize;
    match out.iter().rev().find(|f| f.kind == KIND_INDEX) {
        Some(f) if f.offset == last_index => Ok(out),
        other => Err(format!(
            "the trailer points at byte {last_index}, the last index frame is {other:?}"
        )),
    }
}

/// CRC-32 (IEEE, as zlib and `crc32fast`), bit by bit: small inputs only.
pub fn crc32(data: &[u8]) -> u32 {
    let mut c = !0u32;
    for &x in data {
        c ^= x as u32;
        for _ in 0..8 {
            c = if c & 1 != 0 {
                (c >> 1) ^ 0xedb8_8320
            } else {
                c >> 1
            };
        }
    }
    !c
}

// ---------------------------------------------------------------------------
// Outputs
// ---------------------------------------------------------------------------

/// Lines of `cannoli-dump` output files counted by their kind letter.
pub fn line_kinds<'a>(
    files: impl IntoIterator<Item = &'a Path>,
) -> Result<BTreeMap<char, u64>, String> {
    let mut m = BTreeMap::new();
    for p in files {
        let text = fs::read(p).map_err(|e| format!("cannot read {}: {e}", p.display()))?;
        for l in text.split(|&c| c == b'\n').filter(|l| !l.is_empty()) {
            *m.entry(l[0] as char).or_insert(0) += 1;
        }
    }
    Ok(m)
}

/// A tool's text output split by guest thread, each thread's lines in
/// order: the symbolizer and regtrace start a thread's lines with `== pid
/// P tid T ==` whenever the output switches threads, backtrace's JSON lines
/// carry `"pid"` and `"tid"`. Lines before any header go under `""`.
pub fn by_stream(out: &[u8]) -> BTreeMap<String, Vec<String>> {
    let mut m: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut cur = String::new();
    for l in String::from_utf8_lossy(out).lines() {
        if l.starts_with("== pid ") && l.ends_with(" ==") {
            cur = l.to_string();
            m.entry(cur.clone()).or_default();
            continue;
        }
        if l.starts_with('{') {
            let field = |name: &str| -> Option<String> {
                let k = format!("\"{name}\":");
                let at = l.find(&k)? + k.len();
                Some(
                    l[at..]
                        .chars()
                        .take_while(|c| c.is_ascii_digit() || *c == '-')
                        .collect(),
                )
            };
            if let (Some(p), Some(t)) = (field("pid"), field("tid")) {
                m.entry(format!("pid {p} tid {t}"))
                    .or_default()
                    .push(l.to_string());
                continue;
            }
        }
        m.entry(cur.clone()).or_default().push(l.to_string());
    }
    m
}

/// The first difference of two line sequences, with context, or `Ok`.
pub fn same_lines(an: &str, a: &[String], bn: &str, b: &[String]) -> Result<(), String> {
    let n = a.iter().zip(b).take_while(|(x, y)| x == y).count();
    if n == a.len() && n == b.len() {
        return Ok(());
    }
    let show = |v: &[String]| {
        let from = n.saturating_sub(2);
        let to = (n + 3).min(v.len());
        v[from..to]
            .iter()
            .enumerate()
            .map(|(i, l)| {
                format!(
                    "  {:>8}{} {l}",
                    from + i + 1,
                    if from + i == n { '>' } else { ':' }
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    };
    Err(format!(
        "{an} ({} lines) and {bn} ({} lines) differ from line {}:\n--- {an} ---\n{}\n--- {bn} ---\n{}",
        a.len(),
        b.len(),
        n + 1,
        show(a),
        show(b)
    ))
}

/// The lines of a file (lossily as UTF-8).
pub fn file_lines(p: &Path) -> Result<Vec<String>, String> {
    let b = fs::read(p).map_err(|e| format!("cannot read {}: {e}", p.display()))?;
    Ok(String::from_utf8_lossy(&b)
        .lines()
        .map(str::to_string)
        .collect())
}

// ---------------------------------------------------------------------------
// JSON
// ---------------------------------------------------------------------------

/// A JSON value (numbers as f64: the counts compared here are far below
/// 2^53).
#[derive(Debug, Clone, PartialEq)]
pub enum Json {
    Null,
    Bool(bool),
    Num(f64),
    Str(String),
    Arr(Vec<Json>),
    Obj(BTreeMap<String, Json>),
}

impl Json {
    pub fn parse(s: &str) -> Result<Json, String> {
        let b = s.as_bytes();
        let mut p = 0;
        let v = parse_value(b, &mut p)?;
        skip_ws(b, &mut p);
        if p != b.len() {
            return Err(format!("JSON: trailing bytes at {p}"));
        }
        Ok(v)
    }

    /// `self[key]`, `Null` if absent or not an object.
    pub fn get(&self, key: &str) -> &Json {
        match self {
            Json::Obj(m) => m.get(key).unwrap_or(&Json::Null),
            _ => &Json::Null,
        }
    }

    pub fn as_u64(&self) -> Option<u64> {
        match self {
            Json::Num(n) if *n >= 0.0 && n.fract() == 0.0 => Some(*n as u64),
            _ => None,
        }
    }

    pub fn as_i64(&self) -> Option<i64> {
        match self {
            Json::Num(n) if n.fract() == 0.0 => Some(*n as i64),
            _ => None,
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Json::Str(s) => Some(s),
            _ => None,
        }
    }

    pub fn as_array(&self) -> &[Json] {
        match self {
            Json::Arr(v) => v,
            _ => &[],
        }
    }
}

fn skip_ws(b: &[u8], p: &mut usize) {
    while *p < b.len() && b[*p].is_ascii_whitespace() {
        *p += 1;
    }
}

fn parse_value(b: &[u8], p: &mut usize) -> Result<Json, String> {
    skip_ws(b, p);
    let rest = &b[*p..];
    let lit = |w: &str, v: Json, p: &mut usize| {
        *p += w.len();
        Ok(v)
    };
    match rest.first() {
        None => Err("JSON: unexpected end".into()),
        Some(b'n') if rest.starts_with(b"null") => lit("null", Json::Null, p),
        Some(b't') if rest.starts_with(b"true") => lit("true", Json::Bool(true), p),
        Some(b'f') if rest.starts_with(b"false") => lit("false", Json::Bool(false), p),
        Some(b'"') => parse_string(b, p).map(Json::Str),
        Some(b'[') => {
            *p += 1;
            let mut v = Vec::new();
            skip_ws(b, p);
            if b.get(*p) == Some(&b']') {
                *p += 1;
                return Ok(Json::Arr(v));
            }
            loop {
                v.push(parse_value(b, p)?);
                skip_ws(b, p);
                match b.get(*p) {
                    Some(b',') => *p += 1,
                    Some(b']') => {
                        *p += 1;
                        return Ok(Json::Arr(v));
                    }
                    _ => return Err(format!("JSON: expected , or ] at {p}")),
                }
            }
        }
        Some(b'{') => {
            *p += 1;
            let mut m = BTreeMap::new();
            skip_ws(b, p);
            if b.get(*p) == Some(&b'}') {
                *p += 1;
                return Ok(Json::Obj(m));
            }
            loop {
                skip_ws(b, p);
                let k = parse_string(b, p)?;
                skip_ws(b, p);
                if b.get(*p) != Some(&b':') {
                    return Err(format!("JSON: expected : at {p}"));
                }
                *p += 1;
                m.insert(k, parse_value(b, p)?);
                skip_ws(b, p);
                match b.get(*p) {
                    Some(b',') => *p += 1,
                    Some(b'}') => {
                        *p += 1;
                        return Ok(Json::Obj(m));
                    }
                    _ => return Err(format!("JSON: expected , or }} at {p}")),
                }
            }
        }
        Some(_) => {
            let n = rest
                .iter()
                .take_while(|c| c.is_ascii_digit() || b"+-.eE".contains(c))
                .count();
            let s = std::str::from_utf8(&rest[..n]).unwrap();
            let v: f64 = s.parse().map_err(|_| format!("JSON: bad value at {p}"))?;
            *p += n;
            Ok(Json::Num(v))
        }
    }
}

fn parse_string(b: &[u8], p: &mut usize) -> Result<String, String> {
    if b.get(*p) != Some(&b'"') {
        return Err(format!("JSON: expected a string at {p}"));
    }
    *p += 1;
    let mut out = Vec::new();
    loop {
        match b.get(*p) {
            None => return Err("JSON: unterminated string".into()),
            Some(b'"') => {
                *p += 1;
                return String::from_utf8(out).map_err(|e| format!("JSON: {e}"));
            }
            Some(b'\\') => {
                let c = *b.get(*p + 1).ok_or("JSON: bad escape")?;
                *p += 2;
                match c {
                    b'n' => out.push(b'\n'),
                    b't' => out.push(b'\t'),
                    b'r' => out.push(b'\r'),
                    b'b' => out.push(8),
                    b'f' => out.push(12),
                    b'u' => {
                        let h = std::str::from_utf8(b.get(*p..*p + 4).ok_or("JSON: bad \\u")?)
                            .map_err(|e| e.to_string())?;
                        let cp = u32::from_str_radix(h, 16).map_err(|e| e.to_string())?;
                        *p += 4;
                        let ch = char::from_u32(cp).unwrap_or('\u{fffd}');
                        out.extend_from_slice(ch.to_string().as_bytes());
                    }
                    c => out.push(c),
                }
            }
            Some(&c) => {
                out.push(c);
                *p += 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json() {
        let j =
            Json::parse(r#" {"a": [1, 2.5, -3], "b": {"c": null, "d": true}, "e": "x\"\u0041"} "#)
                .unwrap();
        assert_eq!(j.get("a").as_array().len(), 3);
        assert_eq!(j.get("a").as_array()[2].as_i64(), Some(-3));
        assert_eq!(j.get("b").get("c"), &Json::Null);
        assert_eq!(j.get("b").get("d"), &Json::Bool(true));
        assert_eq!(j.get("e").as_str(), Some("x\"A"));
        assert!(Json::parse("{\"a\":1,}").is_err());
    }

    #[test]
    fn crc() {
        assert_eq!(crc32(b"123456789"), 0xcbf4_3926);
    }

    #[test]
    fn streams_of_tool_output() {
        let out = b"== pid 1 tid 1 ==\na\nb\n== pid 1 tid 2 ==\nc\n== pid 1 tid 1 ==\nd\n";
        let m = by_stream(out);
        assert_eq!(m["== pid 1 tid 1 =="], ["a", "b", "d"]);
        assert_eq!(m["== pid 1 tid 2 =="], ["c"]);
        let m = by_stream(b"{\"event\":\"enter\",\"pid\":7,\"tid\":8}\n{\"pid\":7,\"tid\":9}\n");
        assert_eq!(m.len(), 2);
        assert_eq!(m["pid 7 tid 8"].len(), 1);
    }
}
