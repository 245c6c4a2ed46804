// SPDX-License-Identifier: GPL-2.0-or-later
//! Suppressions, in memcheck's own file format: findings a user has
//! looked at and does not want again (a C library's own leak, a known bug
//! of a vendor's firmware), so that a run that finds nothing else is clean
//! and exits with the program's status. A file `valgrind
//! --gen-suppressions=all` wrote for the x86_64 build of a program works
//! here unchanged, and `cannoli heap --gen-suppressions` writes one after
//! each finding, for every guest.
//!
//! ```text
//! {
//!    libc's buffer of stdout            <- a name, any text
//!    Memcheck:Leak                      <- the kind
//!    match-leak-kinds: definite         <- Leak only, optional
//!    fun:malloc                         <- frames, innermost first
//!    fun:_IO_file_doallocate
//!    ...                                <- any number of frames
//!    fun:main
//! }
//! ```
//!
//! **Kinds.** `Memcheck:Addr1`, `Addr2`, `Addr4`, `Addr8`, `Addr16` and
//! `Addr32` match a bad load or store of that many bytes (a use after
//! free, an overflow or underflow), `Memcheck:Free` a double or invalid
//! free, `Memcheck:Leak` a definitely lost block (unless its
//! `match-leak-kinds` leaves `definite` out). memcheck's other kinds
//! (`Cond`, `Value8`, `Param`, `Overlap`...) are read and never match:
//! this tool has no such findings. A suppression for another tool only
//! (`Helgrind:Race`) is read and ignored, as memcheck ignores it.
//!
//! **Frames** match the finding's stack from its innermost frame (for a
//! leak, the allocation's stack; for a free, the free's), as a prefix:
//! frames past the last line are not looked at. `fun:GLOB` matches a
//! frame's function name (C++ names demangled, as the stacks show them; an
//! exact mangled name, as memcheck writes them, is demangled first),
//! `obj:GLOB` a frame whose function is not known by its file (the
//! program's for a frame in one of its sections, a library's file name;
//! a pattern's directories are left out, since stacks name a library by
//! its file name alone), and `...` any number of frames. In a glob, `*`
//! matches any text and `?` one character. glibc's own names of the
//! allocation functions (`cfree`, `__libc_malloc`...) also answer to the
//! names memcheck shows for them (`free`, `malloc`...), which are what its
//! replacement functions are called, and the C library's function that
//! calls `main` (`__libc_start_call_main`) to `(below main)`.

use std::path::{Path, PathBuf};

use super::blocks::Kind;
use super::report::{Finding, Op};
use crate::demangle::demangle;

/// One suppression of a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Suppression {
    /// Its name, and where it starts (`FILE:LINE`): the summary's label.
    pub name: String,
    pub at: String,
    what: What,
    frames: Vec<Frame>,
}

/// What a suppression's kind line matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum What {
    /// A bad access of this many bytes.
    Addr(u64),
    Free,
    /// A leak; `false`: its `match-leak-kinds` leaves definite out.
    Leak(bool),
    /// A kind this tool never reports, or another tool's.
    Never,
}

/// One frame line.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Frame {
    Fun(String),
    Obj(String),
    /// `...`: any number of frames.
    Any,
}

/// memcheck's kinds this tool cannot report: valid in a file, never
/// matching.
const OTHER_KINDS: &[&str] = &[
    "Cond",
    "Value1",
    "Value2",
    "Value4",
    "Value8",
    "Value16",
    "Value32",
    "Param",
    "Overlap",
    "Jump",
    "User",
    "Mempool",
    "FishyValue",
    "ReallocZero",
];

/// Every suppression of a run's files.
#[derive(Debug, Clone, Default)]
pub struct Suppressions {
    list: Vec<Suppression>,
    /// The program's file name: what `obj:` sees in a frame of one of its
    /// own sections.
    program: String,
}

impl Suppressions {
    /// Reads the files of `--suppressions`; `program` is the program run.
    pub fn read(paths: &[PathBuf], program: &Path) -> Result<Suppressions, String> {
        let mut list = Vec::new();
        for p in paths {
            let text = std::fs::read_to_string(p).map_err(|e| {
                format!(
                    "--suppressions {}: {e}; give a file of memcheck suppressions",
                    p.display()
                )
            })?;
            list.extend(parse(&text, &p.display().to_string())?);
        }
        Ok(Suppressions {
            list,
            program: file_name(program),
        })
    }

    /// The first suppression that matches `f`.
    pub fn matching(&self, f: &Finding) -> Option<&Suppression> {
        if self.list.is_empty() {
            return None;
        }
        let frames: Vec<Parts> = f.stack.iter().map(|s| self.parts(s)).collect();
        self.list
            .iter()
            .find(|s| s.what.matches(f) && frames_match(&s.frames, &frames))
    }

    fn parts<'a>(&'a self, frame: &'a str) -> Parts<'a> {
        let Some(i) = frame.rfind("+0x") else {
            return Parts::default();
        };
        let name = &frame[..i];
        if name.starts_with('.') {
            Parts {
                fun: None,
                obj: Some(&self.program),
            }
        } else if name.contains(".so") || name == self.program {
            // A library's file (`libc.so.6`), or the program's own where
            // it has no section headers to name.
            Parts {
                fun: None,
                obj: Some(name),
            }
        } else {
            Parts {
                fun: Some(name),
                obj: None,
            }
        }
    }
}

impl What {
    fn matches(self, f: &Finding) -> bool {
        match (self, f.bad.kind, f.op) {
            (What::Leak(definite), Kind::Leak, _) => definite,
            (What::Free, Kind::DoubleFree | Kind::InvalidFree, _) | (What::Free, _, Op::Free) => {
                true
            }
            (What::Addr(n), Kind::UseAfterFree | Kind::Overflow, Op::Read | Op::Write) => {
                n == f.size
            }
            _ => false,
        }
    }
}

/// A frame of a stack as the lines see it.
#[derive(Debug, Default, Clone, Copy)]
struct Parts<'a> {
    fun: Option<&'a str>,
    obj: Option<&'a str>,
}

/// Whether `lines` match a prefix of `stack`: a glob's walk over frames,
/// where `...` is the star (on a mismatch, the last `...` takes one more
/// frame), so that a file of many `...` lines takes time linear in them
/// for each frame, not exponential.
fn frames_match(lines: &[Frame], stack: &[Parts]) -> bool {
    let (mut i, mut j) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    loop {
        match lines.get(i) {
            None => return true,
            Some(Frame::Any) => {
                star = Some((i, j));
                i += 1;
            }
            Some(line) if stack.get(j).is_some_and(|f| frame_matches(line, f)) => {
                i += 1;
                j += 1;
            }
            _ => match star {
                Some((si, sj)) if sj < stack.len() => {
                    star = Some((si, sj + 1));
                    i = si + 1;
                    j = sj + 1;
                }
                _ => return false,
            },
        }
    }
}

fn frame_matches(line: &Frame, f: &Parts) -> bool {
    match (line, f.fun, f.obj) {
        (Frame::Fun(p), Some(name), _) => {
            glob(p, name)
                || memcheck_name(name).is_some_and(|m| glob(p, m))
                || (below_main(name) && glob(p, BELOW_MAIN))
        }
        (Frame::Obj(p), _, Some(file)) => {
            let last = p.rsplit('/').next().unwrap_or(p);
            glob(p, file) || glob(last, file)
        }
        _ => false,
    }
}

/// What memcheck calls the C library's function that calls `main`.
const BELOW_MAIN: &str = "(below main)";

/// Whether `name` is one of the C library's functions that call `main`,
/// which memcheck shows as [`BELOW_MAIN`] (and ends a stack with): glibc's
/// `__libc_start_main` (and its versioned and `_impl` forms),
/// `__libc_start_call_main` and the older `generic_start_main`.
fn below_main(name: &str) -> bool {
    name == "__libc_start_call_main"
        || name.starts_with("__libc_start_main")
        || name.starts_with("generic_start_main")
}

/// The name memcheck shows for a C library's own name of an allocation
/// function (`cfree`, `__libc_malloc`, `__malloc`): its replacements are
/// named by the C standard's names, whatever the C library calls them.
fn memcheck_name(name: &str) -> Option<&'static str> {
    const STANDARD: [&str; 10] = [
        "malloc",
        "free",
        "calloc",
        "realloc",
        "reallocarray",
        "memalign",
        "posix_memalign",
        "aligned_alloc",
        "valloc",
        "pvalloc",
    ];
    if name == "cfree" {
        return Some("free");
    }
    let bare = name
        .strip_prefix("__libc_")
        .or_else(|| name.strip_prefix("__"))?;
    STANDARD.into_iter().find(|s| *s == bare)
}

/// Whether `text` matches `pat`, where `*` is any text and `?` one
/// character.
pub fn glob(pat: &str, text: &str) -> bool {
    let (p, t): (Vec<char>, Vec<char>) = (pat.chars().collect(), text.chars().collect());
    // The classic two-pointer walk: on a mismatch, the last `*` takes one
    // more character.
    let (mut i, mut j) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while j < t.len() {
        if i < p.len() && (p[i] == '?' || p[i] == t[j]) {
            i += 1;
            j += 1;
        } else if i < p.len() && p[i] == '*' {
            star = Some((i, j));
            i += 1;
        } else if let Some((si, sj)) = star {
            i = si + 1;
            j = sj + 1;
            star = Some((si, sj + 1));
        } else {
            return false;
        }
    }
    p[i..].iter().all(|&c| c == '*')
}

/// The suppressions of one file's `text`; `file` names it in errors.
pub fn parse(text: &str, file: &str) -> Result<Vec<Suppression>, String> {
    let mut out = Vec::new();
    let mut lines = text
        .lines()
        .enumerate()
        .map(|(i, l)| (i + 1, l.trim()))
        .filter(|(_, l)| !l.is_empty() && !l.starts_with('#'));
    let bad = |n: usize, why: &str| {
        format!("--suppressions {file}:{n}: {why}; see memcheck's suppression format in `cannoli heap --help`")
    };
    while let Some((start, l)) = lines.next() {
        if l != "{" {
            return Err(bad(start, &format!("expected '{{', found {l:?}")));
        }
        let mut body = Vec::new();
        let mut closed = false;
        for (n, l) in lines.by_ref() {
            if l == "}" {
                closed = true;
                break;
            }
            if l == "{" {
                return Err(bad(
                    n,
                    "a '{' inside a suppression: the one before lacks its '}'",
                ));
            }
            body.push((n, l));
        }
        if !closed {
            return Err(bad(start, "the suppression has no closing '}'"));
        }
        let mut body = body.into_iter();
        let Some((_, name)) = body.next() else {
            return Err(bad(
                start,
                "an empty suppression: give a name, a kind and frames",
            ));
        };
        let Some((kn, kind)) = body.next() else {
            return Err(bad(
                start,
                "the suppression has no kind line (Memcheck:Leak, say)",
            ));
        };
        let Some((tools, kind)) = kind.split_once(':') else {
            return Err(bad(
                kn,
                &format!("{kind:?} is not TOOL:KIND (Memcheck:Leak, say)"),
            ));
        };
        let ours = tools.split(',').any(|t| t == "Memcheck");
        let mut body = body.peekable();
        let mut what = match kind {
            "Free" => What::Free,
            "Leak" => What::Leak(true),
            k if k.starts_with("Addr") => match k[4..].parse::<u64>() {
                Ok(n @ (1 | 2 | 4 | 8 | 16 | 32)) => What::Addr(n),
                _ => return Err(bad(kn, &format!("unknown kind {k:?}"))),
            },
            k if OTHER_KINDS.contains(&k) || !ours => What::Never,
            k => return Err(bad(kn, &format!("unknown memcheck kind {k:?}"))),
        };
        if kind == "Param" {
            // Its extra line: the system call's parameter.
            body.next();
        }
        if let Some(&(n, l)) = body.peek() {
            if let Some(kinds) = l.strip_prefix("match-leak-kinds:") {
                body.next();
                if what == What::Leak(true) {
                    what = What::Leak(leak_kinds_have_definite(kinds).map_err(|w| bad(n, &w))?);
                }
            }
        }
        let mut frames = Vec::new();
        for (n, l) in body {
            frames.push(if l == "..." {
                Frame::Any
            } else if let Some(p) = l.strip_prefix("fun:") {
                Frame::Fun(fun_pattern(p))
            } else if let Some(p) = l.strip_prefix("obj:") {
                Frame::Obj(p.to_string())
            } else if l.starts_with("src:") {
                // A source line: stacks here have no line numbers.
                Frame::Obj(String::from("\0"))
            } else {
                return Err(bad(
                    n,
                    &format!("{l:?} is not a frame (fun:, obj:, src: or ...)"),
                ));
            });
        }
        if frames.is_empty() {
            return Err(bad(
                start,
                "the suppression has no frame lines (fun:NAME, obj:FILE or ...)",
            ));
        }
        if !ours {
            what = What::Never;
        }
        out.push(Suppression {
            name: name.to_string(),
            at: format!("{file}:{start}"),
            what,
            frames,
        });
    }
    Ok(out)
}

/// `match-leak-kinds:`' list: whether it has definite (the one kind of
/// leak this tool reports).
fn leak_kinds_have_definite(list: &str) -> Result<bool, String> {
    let mut definite = false;
    for k in list.split(',').map(str::trim) {
        match k {
            "definite" | "all" => definite = true,
            "indirect" | "possible" | "reachable" | "none" => {}
            k => return Err(format!("unknown leak kind {k:?} in match-leak-kinds")),
        }
    }
    Ok(definite)
}

/// A `fun:` pattern as the stacks' names are written: an exact mangled
/// name demangled.
fn fun_pattern(p: &str) -> String {
    if p.contains(['*', '?']) {
        p.to_string()
    } else {
        demangle(p).into_owned()
    }
}

/// memcheck's kind line of a finding.
fn kind_line(f: &Finding) -> String {
    match (f.bad.kind, f.op) {
        (Kind::Leak, _) => "Memcheck:Leak\n   match-leak-kinds: definite".into(),
        (Kind::DoubleFree | Kind::InvalidFree, _) | (_, Op::Free) => "Memcheck:Free".into(),
        _ => format!("Memcheck:Addr{}", f.size),
    }
}

/// A suppression that matches `f` (in memcheck's words, as its
/// `--gen-suppressions=all` writes them): its stack up to `main`, or up
/// to the function below it in a program whose `main` has no name.
pub fn generate(f: &Finding, program: &Path) -> String {
    let s = Suppressions {
        list: Vec::new(),
        program: file_name(program),
    };
    let mut out = format!(
        "{{\n   <insert_a_suppression_name_here>\n   {}\n",
        kind_line(f)
    );
    for frame in f.stack.iter() {
        let p = s.parts(frame);
        let line = match (p.fun, p.obj) {
            (Some(name), _) if below_main(name) => format!("fun:{BELOW_MAIN}"),
            (Some(name), _) => format!("fun:{}", memcheck_name(name).unwrap_or(name)),
            (None, Some(file)) => format!("obj:*/{file}"),
            // Nothing names it.
            (None, None) => "...".into(),
        };
        if !(line == "..." && out.ends_with("...\n")) {
            out.push_str("   ");
            out.push_str(&line);
            out.push('\n');
        }
        if p.fun.is_some_and(|f| f == "main" || below_main(f)) {
            break;
        }
    }
    out.push_str("}\n");
    out
}

/// The last component of `path`, as text.
fn file_name(path: &Path) -> String {
    path.file_name()
        .map_or(String::new(), |n| n.to_string_lossy().into_owned())
}

#[cfg(test)]
mod tests;
