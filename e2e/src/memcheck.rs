// SPDX-License-Identifier: GPL-2.0-or-later
//! Valgrind memcheck (Debian's `valgrind`) as the ground truth of the
//! `cannoli heap` tests: [`run_memcheck`] runs an x86_64 program under
//! `valgrind --tool=memcheck --xml=yes --leak-check=full` and reads its
//! XML into [`Finding`]s (kind, the innermost program function, the
//! block's size) in the kinds `cannoli heap --json` names:
//!
//! | memcheck | auxwhat | kind |
//! |---|---|---|
//! | `InvalidRead`, `InvalidWrite` | "... inside a block ... free'd" | `use-after-free` |
//! | `InvalidRead`, `InvalidWrite` | "... after/before a block ... alloc'd" | `heap-buffer-overflow` |
//! | `InvalidFree`, `MismatchedFree` | "... inside a block ... free'd" | `double-free` |
//! | `InvalidFree` | anything else (alloc'd block, a stack) | `invalid-free` |
//! | `Leak_DefinitelyLost` | | `leak` |
//!
//! memcheck replaces `malloc` through its preload library, which only a
//! dynamically linked program loads: on a static glibc program it sees no
//! allocation at all. So its runs are of the dynamically linked build of a
//! planted program (`dyn_heapbugs`, the same source as `heapbugs`).
//!
//! [`heap_usage`] reads the "total heap usage: N allocs, M frees" line of
//! a run without XML (memcheck writes it only to its text log). Every run
//! also asks for a suppression of each error (`--gen-suppressions=all`,
//! kept as [`Report::suppressions`]), for `cannoli heap --suppressions`.

use std::fs::{self, File};
use std::path::Path;
use std::process::{Command, Stdio};

use crate::run::RunDir;
use crate::xml::{self, Element};

/// One memcheck error, reduced to what the heap tests compare.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Finding {
    /// `use-after-free`, `heap-buffer-overflow`, `double-free`,
    /// `invalid-free` or `leak`.
    pub kind: String,
    /// The innermost frame of the error's stack (for a leak, the
    /// allocation stack) that is a function of the program itself (see
    /// [`program_function`]); `None` if no frame is.
    pub function: Option<String>,
    /// The size of the block the address is in or next to (for a leak:
    /// the lost bytes per block); `None` when there is no block (a free of
    /// a stack address).
    pub block_size: Option<u64>,
}

/// What one memcheck run said.
#[derive(Debug, Clone)]
pub struct Report {
    /// The errors memcheck's kinds map to a heap kind, in its order.
    pub findings: Vec<Finding>,
    /// The kinds of every error it reported, mapped or not (e.g.
    /// `UninitCondition`), so a test can demand there are none.
    pub all_kinds: Vec<String>,
    /// The program's exit status.
    pub status: Option<i32>,
    /// What the program wrote to stdout.
    pub stdout: Vec<u8>,
    /// Its XML documents, one per process (the first process's first).
    pub xml: Vec<std::path::PathBuf>,
    /// The suppression memcheck wrote for each error (`--gen-suppressions=all`:
    /// its `<rawtext>`), in its order.
    pub suppressions: Vec<String>,
}

/// The planted cases of `heapbugs`, as the program lists them (run with
/// no argument; the x86_64 build, on the host).
pub fn planted_cases() -> Vec<String> {
    let o = Command::new(crate::guest("x86_64", "heapbugs"))
        .output()
        .expect("run heapbugs");
    assert!(
        o.status.success(),
        "heapbugs with no argument: {:?}",
        o.status
    );
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

/// The function name of a symbol as the heap tests compare it: without a
/// `+0xoff` and without GCC's clone suffixes (`.constprop.0`, `.isra.0`,
/// `.part.0`, `.cold`).
pub fn base_function(sym: &str) -> &str {
    let s = sym.split('+').next().unwrap_or(sym);
    s.split('.').next().unwrap_or(s)
}

/// True for a function of the planted programs: they name every function
/// of their own `hb_*` (`main` aside, which no finding is in), so a C
/// library frame, static or shared, never counts.
pub fn program_function(sym: &str) -> bool {
    base_function(sym).starts_with("hb_")
}

/// The innermost program function of a stack of symbol names.
pub fn innermost_program_function<'a, I: IntoIterator<Item = &'a str>>(stack: I) -> Option<String> {
    stack
        .into_iter()
        .find(|s| program_function(s))
        .map(|s| base_function(s).to_string())
}

/// The `fn` of each frame of a `<stack>`.
fn frames(stack: &Element) -> Vec<String> {
    stack
        .all("frame")
        .map(|f| f.child_text("fn").unwrap_or_default())
        .collect()
}

/// "Address 0x.. is 24 bytes inside a block of size 48 free'd" → (48,
/// "inside", "free'd").
fn block_of(auxwhat: &str) -> Option<(u64, &str, &str)> {
    let (before, after) = auxwhat.split_once(" a block of size ")?;
    let size = after.split_whitespace().next()?.parse().ok()?;
    let state = after.split_whitespace().nth(1)?;
    let place = before.split_whitespace().last()?;
    Some((size, place, state))
}

/// One `<error>` as a [`Finding`], if its kind is a heap kind.
fn finding(e: &Element) -> Option<Finding> {
    let kind = e.child_text("kind")?;
    let stacks: Vec<&Element> = e.all("stack").collect();
    let function = stacks
        .first()
        .and_then(|s| innermost_program_function(frames(s).iter().map(|s| s.as_str())));
    let aux = e.child_text("auxwhat").unwrap_or_default();
    let block = block_of(&aux);
    let (kind, block_size) = match kind.as_str() {
        "InvalidRead" | "InvalidWrite" => {
            let (size, place, state) = block?;
            let k = if state == "free'd" && place == "inside" {
                "use-after-free"
            } else {
                "heap-buffer-overflow"
            };
            (k, Some(size))
        }
        "InvalidFree" | "MismatchedFree" => match block {
            Some((size, "inside", "free'd")) => ("double-free", Some(size)),
            Some((size, _, _)) => ("invalid-free", Some(size)),
            None => ("invalid-free", None),
        },
        "Leak_DefinitelyLost" => {
            let x = e.child("xwhat")?;
            // "112 (16 direct, 96 indirect) bytes in 1 blocks": the
            // lost blocks' own bytes are the direct ones; `leakedbytes`
            // counts the blocks only they point at too.
            let text = x.child_text("text").unwrap_or_default();
            let direct = text
                .split_once(" direct,")
                .and_then(|(b, _)| b.rsplit('(').next()?.trim().parse().ok());
            let bytes: u64 = match direct {
                Some(d) => d,
                None => x.child_text("leakedbytes")?.parse().ok()?,
            };
            let blocks: u64 = x.child_text("leakedblocks")?.parse().ok()?;
            ("leak", Some(bytes / blocks.max(1)))
        }
        _ => return None,
    };
    Some(Finding {
        kind: kind.to_string(),
        function,
        block_size,
    })
}

/// Reads memcheck's XML document: the mapped findings and every kind.
pub fn parse_xml(doc: &str) -> Result<(Vec<Finding>, Vec<String>), xml::XmlError> {
    let root = xml::parse(doc)?;
    let mut findings = Vec::new();
    let mut kinds = Vec::new();
    for e in root.all("error") {
        kinds.push(e.child_text("kind").unwrap_or_default());
        findings.extend(finding(e));
    }
    Ok((findings, kinds))
}

/// The suppression memcheck wrote for each `<error>` of the document (its
/// `<suppression>`'s `<rawtext>`), in order.
pub fn error_suppressions(doc: &str) -> Result<Vec<String>, xml::XmlError> {
    let root = xml::parse(doc)?;
    Ok(root
        .all("error")
        .filter_map(|e| e.child("suppression")?.child_text("rawtext"))
        .collect())
}

/// The innermost program function of each `<error>`'s first stack (an
/// access's, a free's, a leaked block's allocation), in the document's
/// order, as [`parse_xml`] gives the kinds.
pub fn error_functions(doc: &str) -> Result<Vec<Option<String>>, xml::XmlError> {
    let root = xml::parse(doc)?;
    Ok(root
        .all("error")
        .map(|e| {
            e.all("stack")
                .next()
                .and_then(|s| innermost_program_function(frames(s).iter().map(|s| s.as_str())))
        })
        .collect())
}

/// `valgrind --tool=memcheck` with `opts`, then `prog args`, in `dir`: an
/// empty environment, stdin `/dev/null`, stdout to `<tag>.stdout` (a file,
/// as in the traced runs), memcheck's own log to `<tag>.log`.
fn valgrind(dir: &RunDir, tag: &str, opts: &[String], prog: &Path, args: &[&str]) -> Option<i32> {
    let out = File::create(dir.file(&format!("{tag}.stdout"))).expect("create stdout file");
    let status = Command::new("valgrind")
        .arg("--tool=memcheck")
        // A traced run's C library frees nothing at exit; memcheck's would
        // (its stdout buffer), one free more than the run really makes.
        .arg("--run-libc-freeres=no")
        .arg(format!(
            "--log-file={}",
            dir.file(&format!("{tag}.log")).display()
        ))
        .args(opts)
        .arg(prog)
        .args(args)
        .env_clear()
        .current_dir(dir.path())
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(Stdio::null())
        .status()
        .unwrap_or_else(|e| panic!("cannot run valgrind ({e}): apt-get install valgrind"));
    status.code()
}

/// Runs `prog args` under memcheck with `--leak-check=full` and reads what
/// it found. memcheck follows forks (not execs): each process writes its
/// own XML (`<tag>.<pid>.xml`), and the findings are all of theirs. A
/// process that exec'd leaves its document unfinished; with no error in
/// it, it found none. Panics if valgrind cannot run or writes no readable
/// XML.
pub fn run_memcheck(dir: &RunDir, tag: &str, prog: &Path, args: &[&str]) -> Report {
    let opts = [
        "--xml=yes".to_string(),
        format!(
            "--xml-file={}",
            dir.file(&format!("{tag}.%p.xml")).display()
        ),
        "--leak-check=full".to_string(),
        // A suppression of each error, for `cannoli heap --suppressions`.
        "--gen-suppressions=all".to_string(),
    ];
    let status = valgrind(dir, tag, &opts, prog, args);
    let prefix = format!("{tag}.");
    let mut docs: Vec<_> = fs::read_dir(dir.path())
        .expect("read the run's directory")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name().and_then(|n| n.to_str()).is_some_and(|n| {
                n.strip_prefix(&prefix)
                    .and_then(|r| r.strip_suffix(".xml"))
                    .is_some_and(|pid| pid.bytes().all(|b| b.is_ascii_digit()))
            })
        })
        .collect();
    // By pid, so the first process first (pids wrap rarely within a run).
    docs.sort_by_key(|p| (p.as_os_str().len(), p.clone()));
    assert!(
        !docs.is_empty(),
        "memcheck wrote no XML for {tag}; its log:\n{}",
        fs::read_to_string(dir.file(&format!("{tag}.log"))).unwrap_or_default()
    );
    let (mut findings, mut all_kinds, mut suppressions) = (Vec::new(), Vec::new(), Vec::new());
    for path in &docs {
        let doc = fs::read_to_string(path).unwrap_or_default();
        match parse_xml(&doc) {
            Ok((f, k)) => {
                findings.extend(f);
                all_kinds.extend(k);
                suppressions.extend(error_suppressions(&doc).unwrap_or_default());
            }
            Err(_) if !doc.contains("</valgrindoutput>") && !doc.contains("<error>") => {}
            Err(e) => panic!("{}: {e}", path.display()),
        }
    }
    Report {
        findings,
        all_kinds,
        status,
        stdout: fs::read(dir.file(&format!("{tag}.stdout"))).unwrap_or_default(),
        xml: docs,
        suppressions,
    }
}

/// memcheck's "total heap usage: N allocs, M frees, B bytes allocated"
/// of `prog args` (a run of its own, without XML): (N, M, B).
pub fn heap_usage(dir: &RunDir, tag: &str, prog: &Path, args: &[&str]) -> (u64, u64, u64) {
    valgrind(dir, tag, &[], prog, args);
    let log = fs::read_to_string(dir.file(&format!("{tag}.log"))).unwrap_or_default();
    parse_heap_usage(&log).unwrap_or_else(|| panic!("no heap usage line in memcheck's log:\n{log}"))
}

/// The numbers of memcheck's "total heap usage" line.
pub fn parse_heap_usage(log: &str) -> Option<(u64, u64, u64)> {
    let line = log.lines().find(|l| l.contains("total heap usage:"))?;
    let rest = line.split("total heap usage:").nth(1)?;
    // "1,908 allocs, 1,908 frees, 4,248,821 bytes allocated": the
    // thousands separators are commas too, so a number is the digits of
    // the words up to the next word that is not one.
    let mut vals = Vec::new();
    let mut cur = String::new();
    for tok in rest.split_whitespace() {
        let digits: String = tok.chars().filter(|c| c.is_ascii_digit()).collect();
        if tok.chars().next().is_some_and(|c| c.is_ascii_digit()) {
            cur.push_str(&digits);
        } else if !cur.is_empty() {
            vals.push(cur.parse().ok()?);
            cur.clear();
        }
    }
    match vals[..] {
        [a, f, b, ..] => Some((a, f, b)),
        _ => None,
    }
}

/// memcheck's "in use at exit: B bytes in N blocks" of a log: (B, N).
pub fn parse_in_use(log: &str) -> Option<(u64, u64)> {
    let line = log.lines().find(|l| l.contains("in use at exit:"))?;
    let rest = line.split("in use at exit:").nth(1)?;
    let num = |w: &str| w.replace(',', "").parse::<u64>().ok();
    let mut words = rest.split_whitespace();
    let bytes = num(words.next()?)?;
    let blocks = num(words.nth(2)?)?;
    Some((bytes, blocks))
}

/// A freed block's stacks as memcheck gives them: (the free's, the
/// allocation's), each as its frames' function names, innermost first.
pub type BlockStacks = (Vec<String>, Vec<String>);

/// The stacks of each freed block an error concerns (a use after free, a
/// double free), in memcheck's XML document.
pub fn freed_block_stacks(doc: &str) -> Result<Vec<BlockStacks>, xml::XmlError> {
    let root = xml::parse(doc)?;
    Ok(root
        .all("error")
        .filter(|e| {
            e.child_text("auxwhat")
                .is_some_and(|a| a.contains("free'd"))
        })
        .filter_map(|e| {
            let stacks: Vec<&Element> = e.all("stack").collect();
            Some((frames(stacks.get(1)?), frames(stacks.get(2)?)))
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    const DOC: &str = r#"<?xml version="1.0"?>
<valgrindoutput>
<protocolversion>4</protocolversion>
<error>
  <unique>0x0</unique><tid>1</tid>
  <kind>InvalidRead</kind>
  <what>Invalid read of size 1</what>
  <stack>
    <frame><ip>0x1094BE</ip><obj>/p</obj><fn>hb_uaf_read</fn></frame>
    <frame><ip>0x10917F</ip><obj>/p</obj><fn>main</fn></frame>
  </stack>
  <auxwhat>Address 0x4a41058 is 24 bytes inside a block of size 48 free'd</auxwhat>
  <stack><frame><fn>free</fn></frame><frame><fn>hb_uaf_read</fn></frame></stack>
  <auxwhat>Block was alloc'd at</auxwhat>
  <stack><frame><fn>malloc</fn></frame><frame><fn>hb_uaf_read</fn></frame></stack>
</error>
<error><kind>InvalidWrite</kind>
  <stack><frame><fn>hb_fnptr_target.constprop.0</fn></frame></stack>
  <auxwhat>Address 0x4a420ac is 0 bytes after a block of size 44 alloc'd</auxwhat></error>
<error><kind>InvalidFree</kind>
  <stack><frame><fn>free</fn></frame><frame><fn>hb_double_free</fn></frame></stack>
  <auxwhat>Address 0x4a42320 is 0 bytes inside a block of size 24 free'd</auxwhat></error>
<error><kind>InvalidFree</kind>
  <stack><frame><fn>free</fn></frame><frame><fn>hb_free_interior</fn></frame></stack>
  <auxwhat>Address 0x4a42090 is 16 bytes inside a block of size 64 alloc'd</auxwhat></error>
<error><kind>InvalidFree</kind>
  <stack><frame><fn>free</fn></frame><frame><fn>hb_free_stack</fn></frame></stack>
  <auxwhat>Address 0x1fff000560 is on thread 1's stack</auxwhat></error>
<error><kind>Leak_DefinitelyLost</kind>
  <xwhat><text>33 bytes in 1 blocks are definitely lost</text>
  <leakedbytes>33</leakedbytes><leakedblocks>1</leakedblocks></xwhat>
  <stack><frame><fn>malloc</fn></frame><frame><fn>hb_leak</fn></frame></stack></error>
<error><kind>Leak_DefinitelyLost</kind>
  <xwhat><text>112 (16 direct, 96 indirect) bytes in 1 blocks are definitely lost in loss record 8 of 17</text>
  <leakedbytes>112</leakedbytes><leakedblocks>1</leakedblocks></xwhat>
  <stack><frame><fn>malloc</fn></frame><frame><fn>hb_list</fn></frame></stack></error>
<error><kind>UninitCondition</kind><stack><frame><fn>x</fn></frame></stack></error>
</valgrindoutput>
"#;

    #[test]
    fn maps_memcheck_kinds() {
        let (f, kinds) = parse_xml(DOC).unwrap();
        let got: Vec<(String, Option<String>, Option<u64>)> = f
            .into_iter()
            .map(|f| (f.kind, f.function, f.block_size))
            .collect();
        let s = |k: &str, f: &str, n: Option<u64>| (k.to_string(), Some(f.to_string()), n);
        assert_eq!(
            got,
            vec![
                s("use-after-free", "hb_uaf_read", Some(48)),
                s("heap-buffer-overflow", "hb_fnptr_target", Some(44)),
                s("double-free", "hb_double_free", Some(24)),
                s("invalid-free", "hb_free_interior", Some(64)),
                s("invalid-free", "hb_free_stack", None),
                s("leak", "hb_leak", Some(33)),
                // The lost block's own bytes, not the ones it leads to.
                s("leak", "hb_list", Some(16)),
            ]
        );
        assert_eq!(kinds.len(), 8);
        assert_eq!(kinds[7], "UninitCondition");
    }

    #[test]
    fn reads_heap_usage() {
        let log = "==1==   in use at exit: 0 bytes in 0 blocks\n\
                   ==1==   total heap usage: 1,908 allocs, 1,907 frees, 4,248,821 bytes allocated\n";
        assert_eq!(parse_heap_usage(log), Some((1908, 1907, 4248821)));
        assert_eq!(parse_heap_usage("nothing"), None);
        let log = "==1==     in use at exit: 4,096 bytes in 1 blocks\n";
        assert_eq!(parse_in_use(log), Some((4096, 1)));
    }

    #[test]
    fn freed_blocks_stacks() {
        // The double free's block has no allocation stack in DOC: left out.
        let v = |f: &[&str]| f.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            freed_block_stacks(DOC).unwrap(),
            vec![(v(&["free", "hb_uaf_read"]), v(&["malloc", "hb_uaf_read"]))]
        );
    }

    #[test]
    fn function_names() {
        assert_eq!(base_function("hb_leak+0x1c"), "hb_leak");
        assert_eq!(base_function("hb_x.isra.0+0x4"), "hb_x");
        assert!(!program_function("__libc_free+0x10"));
        assert_eq!(
            innermost_program_function(["malloc+0x3", "hb_leak+0x8", "main"]),
            Some("hb_leak".to_string())
        );
    }
}
