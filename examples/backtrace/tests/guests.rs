//! End to end: `tests/programs/bt_calls.c`, built with -O2 by Debian's
//! cross compilers for every guest of the matrix (mipsel, mips, mips64el,
//! arm in Thumb-2 and, with `-marm`, in A32, aarch64, riscv64, x86_64, i386,
//! ppc64le), traced by the `backtrace` binary under the patched QEMU; the
//! JSON lines must follow the program's known call structure (nested calls,
//! a five-deep recursion, a chain of two tail calls, a call through a
//! function pointer), which the cross binutils' disassembly confirms first.
//!
//! Needs what the rest of the workspace's end-to-end tests need: the cross
//! compilers and binutils (`scripts/deps.sh`), and a patched QEMU for each
//! guest (`scripts/build-qemu.sh`, or `$CANNOLI_QEMU_BUILD`). These tests
//! fail when something is missing; they never skip.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

use serde_json::Value;

const ARCHES: [&str; 9] = [
    "mipsel", "mips", "mips64el", "arm", "aarch64", "riscv64", "x86_64", "i386", "ppc64le",
];

/// What bt_calls prints with no arguments (argc = 1): bt_middle(1) = 9,
/// bt_fact(5) = 120, bt_tail1(1) = bt_leaf(6) + 7 = 19, bt_leaf(1) = 2.
const OUTPUT: &str = "bt_calls: 150\n";

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

/// `target/guests/<arch>/bt_calls`, built once per test process by
/// `scripts/build-guests.sh` (which skips what is up to date).
fn guest(arch: &str) -> PathBuf {
    static BUILT: OnceLock<Result<(), String>> = OnceLock::new();
    let built = BUILT.get_or_init(|| {
        let out = Command::new("bash")
            .arg(workspace().join("scripts/build-guests.sh"))
            .arg("--quiet")
            .args(ARCHES)
            .current_dir(workspace())
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("cannot run scripts/build-guests.sh: {e}"))?;
        if out.status.success() {
            Ok(())
        } else {
            Err(format!(
                "scripts/build-guests.sh failed ({}):\n{}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            ))
        }
    });
    if let Err(e) = built {
        panic!("{e}");
    }
    let p = workspace()
        .join("target/guests")
        .join(arch)
        .join("bt_calls");
    assert!(p.is_file(), "{} missing after build-guests.sh", p.display());
    p
}

/// `bt_calls` for ARM in A32 (`-marm`; the default is Thumb-2), built here:
/// its calls into the C library, which is Thumb code, switch state.
fn guest_a32() -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            let out = tmp("bt_calls_a32");
            let o = Command::new("arm-linux-gnueabihf-gcc")
                .args(["-marm", "-O2", "-static", "-g0", "-o"])
                .arg(&out)
                .arg(workspace().join("tests/programs/bt_calls.c"))
                .output()
                .unwrap_or_else(|e| {
                    panic!("cannot run arm-linux-gnueabihf-gcc (scripts/deps.sh installs it): {e}")
                });
            assert!(
                o.status.success(),
                "arm-linux-gnueabihf-gcc -marm: {}",
                String::from_utf8_lossy(&o.stderr)
            );
            out
        })
        .clone()
}

/// The `backtrace` binary, with its hook library built next to it.
fn backtrace_bin() -> PathBuf {
    e2e::tool_exe(env!("CARGO_BIN_EXE_backtrace"))
}

/// Kills and reaps a child process when dropped (a failing test leaves no
/// client behind).
struct Reap(std::process::Child);

impl Drop for Reap {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn tmp(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("backtrace-test-{}-{name}", std::process::id()))
}

// ---------------------------------------------------------------------------
// The machine code really has the structure the test is about
// ---------------------------------------------------------------------------

fn objdump(arch: &str) -> &'static str {
    match arch {
        "mipsel" => "mipsel-linux-gnu-objdump",
        "mips" => "mips-linux-gnu-objdump",
        "mips64el" => "mips64el-linux-gnuabi64-objdump",
        "arm" => "arm-linux-gnueabihf-objdump",
        "aarch64" => "aarch64-linux-gnu-objdump",
        "riscv64" => "riscv64-linux-gnu-objdump",
        "i386" => "i686-linux-gnu-objdump",
        "ppc64le" => "powerpc64le-linux-gnu-objdump",
        _ => "objdump",
    }
}

/// Mnemonics of a call (leaves a return address) and of a plain jump.
fn mnemonics(arch: &str) -> (&'static [&'static str], &'static [&'static str]) {
    match arch {
        "mipsel" | "mips" | "mips64el" => {
            (&["bal", "jal", "jalr", "bgezal", "bltzal"], &["b", "j"])
        }
        "riscv64" => (&["jal", "jalr", "call"], &["j", "jr", "tail"]),
        "arm" => (&["bl", "blx"], &["b", "b.w", "b.n"]),
        "aarch64" => (&["bl", "blr"], &["b", "br"]),
        "ppc64le" => (&["bl", "bctrl", "blrl"], &["b", "bctr"]),
        _ => (&["call"], &["jmp"]),
    }
}

/// How `main` is entered: called by the C library's start-up code, except
/// on aarch64, where glibc's static `_start` holds a `__wrap_main: b main`
/// (inside `_start`'s symbol size) that `__libc_start_call_main` calls.
fn main_via(arch: &str) -> &'static str {
    if arch == "aarch64" {
        "jump"
    } else {
        "call"
    }
}

/// Whether the operands of a branch name `target` as objdump prints it:
/// `<f>`, or on ppc64le `<f+0x8>`, the local entry point (ELFv2) where
/// calls and tail calls between functions sharing the TOC land.
fn names_target(arch: &str, ops: &str, target: &str) -> bool {
    ops.contains(&format!("<{target}>"))
        || (arch == "ppc64le" && ops.contains(&format!("<{target}+0x8>")))
}

/// The bt_* functions, main and aarch64's `__wrap_main` (a label objdump
/// shows as its own block): their instructions as (mnemonic, operands).
fn disassemble(arch: &str, path: &Path) -> BTreeMap<String, Vec<(String, String)>> {
    let out = Command::new(objdump(arch))
        .args(["-d", "--no-show-raw-insn", "-w"])
        .arg(path)
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "cannot run {} (binutils for {arch}; scripts/deps.sh installs it): {e}",
                objdump(arch)
            )
        });
    assert!(out.status.success(), "{} failed", objdump(arch));
    let text = String::from_utf8_lossy(&out.stdout);
    let mut funcs = BTreeMap::new();
    let mut current: Option<String> = None;
    for line in text.lines() {
        if let Some(name) = line
            .split_once(" <")
            .and_then(|(_, r)| r.strip_suffix(">:"))
        {
            current = (name.starts_with("bt_") || name == "main" || name == "__wrap_main")
                .then(|| name.to_string());
            continue;
        }
        let Some(f) = &current else { continue };
        let Some((_, insn)) = line.split_once(":\t") else {
            continue;
        };
        let insn = insn.trim();
        let (m, ops) = insn.split_once(char::is_whitespace).unwrap_or((insn, ""));
        funcs
            .entry(f.clone())
            .or_insert_with(Vec::new)
            .push((m.to_string(), ops.trim().to_string()));
    }
    funcs
}

fn check_machine_code(arch: &str, path: &Path) {
    let d = disassemble(arch, path);
    let (calls, jumps) = mnemonics(arch);
    let to = |f: &str, target: &str, kinds: &[&str]| {
        d[f].iter()
            .filter(|(m, ops)| kinds.contains(&m.as_str()) && names_target(arch, ops, target))
            .count()
    };
    // i386 position independent code reads its pc with a call to a thunk
    // (`call __x86.get_pc_thunk.dx`), which is a real call and return but
    // none of the program's.
    let any_call = |f: &str| {
        d[f].iter()
            .filter(|(m, ops)| calls.contains(&m.as_str()) && !ops.contains("<__x86.get_pc_thunk."))
            .count()
    };
    // The tail calls are jumps, and the two tail-calling functions call
    // nothing.
    for (f, target) in [("bt_tail1", "bt_tail2"), ("bt_tail2", "bt_tail_end")] {
        assert_eq!(
            to(f, target, jumps),
            1,
            "{arch}: {f} should jump to {target}: {:?}",
            d[f]
        );
        assert_eq!(
            any_call(f),
            0,
            "{arch}: {f} should make no call: {:?}",
            d[f]
        );
    }
    // The recursion stayed a recursion; the other calls are calls.
    assert_eq!(
        to("bt_fact", "bt_fact", calls),
        1,
        "{arch}: {:?}",
        d["bt_fact"]
    );
    assert_eq!(
        to("bt_middle", "bt_leaf", calls),
        2,
        "{arch}: {:?}",
        d["bt_middle"]
    );
    assert_eq!(
        to("bt_tail_end", "bt_leaf", calls),
        1,
        "{arch}: {:?}",
        d["bt_tail_end"]
    );
    for f in ["bt_middle", "bt_fact", "bt_tail1"] {
        assert_eq!(
            to("main", f, calls),
            1,
            "{arch}: main should call {f}: {:?}",
            d["main"]
        );
    }
    // The call through the pointer: a call with no direct target.
    let indirect = d["main"]
        .iter()
        .filter(|(m, ops)| calls.contains(&m.as_str()) && !ops.contains('<'))
        .count();
    assert_eq!(indirect, 1, "{arch}: main's indirect call: {:?}", d["main"]);
    // Where main is entered by a jump, the jump is there.
    if main_via(arch) == "jump" {
        assert_eq!(
            to("__wrap_main", "main", jumps),
            1,
            "{arch}: {:?}",
            d.get("__wrap_main")
        );
    }
}

// ---------------------------------------------------------------------------
// The expected call structure, from the program's source
// ---------------------------------------------------------------------------

/// One event of the known functions: `+name via` or `-name`, and the
/// backtrace from `main` down after it.
type Expected = Vec<(String, Vec<&'static str>)>;

struct Model {
    stack: Vec<&'static str>,
    events: Expected,
}

impl Model {
    fn call(&mut self, f: &'static str, via: &str, body: impl FnOnce(&mut Model)) {
        self.stack.push(f);
        self.events
            .push((format!("+{f} {via}"), self.stack.clone()));
        body(self);
        self.stack.pop();
        self.events.push((format!("-{f}"), self.stack.clone()));
    }

    fn fact(&mut self, n: u32) {
        self.call("bt_fact", "call", |m| {
            if n > 1 {
                m.fact(n - 1)
            }
        });
    }
}

fn expected(arch: &str) -> Expected {
    let mut m = Model {
        stack: Vec::new(),
        events: Vec::new(),
    };
    m.call("main", main_via(arch), |m| {
        m.call("bt_middle", "call", |m| {
            m.call("bt_leaf", "call", |_| {});
            m.call("bt_leaf", "call", |_| {});
        });
        m.fact(5);
        m.call("bt_tail1", "call", |m| {
            m.call("bt_tail2", "jump", |m| {
                m.call("bt_tail_end", "jump", |m| m.call("bt_leaf", "call", |_| {}))
            })
        });
        m.call("bt_leaf", "call", |_| {});
    });
    m.events
}

// ---------------------------------------------------------------------------
// The JSON lines
// ---------------------------------------------------------------------------

fn hex(v: &Value, field: &str) -> u64 {
    let s = v[field]
        .as_str()
        .unwrap_or_else(|| panic!("{field} missing: {v}"));
    u64::from_str_radix(s.strip_prefix("0x").expect("0x"), 16).unwrap()
}

/// Checks the lines are consistent among themselves (each backtrace is the
/// previous one plus or minus the function; an exit goes on at the
/// frame's return address) and returns the known functions' events.
fn check_json(arch: &str, text: &str) -> Expected {
    let known = [
        "main",
        "bt_leaf",
        "bt_middle",
        "bt_fact",
        "bt_tail1",
        "bt_tail2",
        "bt_tail_end",
    ];
    let mut stack: Vec<(String, Option<u64>)> = Vec::new();
    let mut tid = None;
    let mut got = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let v: Value = serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("{arch}: line {} is not JSON ({e}): {line}", n + 1));
        let ctx = || format!("{arch}: line {}: {line}", n + 1);
        assert!(v["pid"].is_i64(), "{}", ctx());
        let t = v["tid"].as_i64().expect("tid");
        assert_eq!(*tid.get_or_insert(t), t, "one guest thread: {}", ctx());
        let f = v["function"].as_str().expect("function").to_string();
        let bt: Vec<String> = v["backtrace"]
            .as_array()
            .expect("backtrace")
            .iter()
            .map(|x| x.as_str().unwrap().to_string())
            .collect();
        assert_eq!(v["depth"].as_u64(), Some(bt.len() as u64), "{}", ctx());
        hex(&v, "pc");
        let via = match v["event"].as_str() {
            Some("enter") => {
                let via = v["via"].as_str().expect("via").to_string();
                if n == 0 {
                    assert_eq!(via, "start", "{}", ctx());
                } else {
                    assert!(via == "call" || via == "jump", "{}", ctx());
                    hex(&v, "from");
                }
                // A tail call from a frame that returns nowhere (the
                // thread's first, like ppc64le's `_start: b
                // __libc_start_main`) returns nowhere either; any other
                // frame has a return address.
                let ret = match via.as_str() {
                    "start" => None,
                    "jump" if stack.last().is_some_and(|(_, r)| r.is_none()) => {
                        assert!(v.get("return").is_none(), "{}", ctx());
                        None
                    }
                    _ => Some(hex(&v, "return")),
                };
                stack.push((f.clone(), ret));
                via
            }
            Some("exit") => {
                let (top, ret) = stack
                    .pop()
                    .unwrap_or_else(|| panic!("exit from nothing: {}", ctx()));
                assert_eq!(top, f, "{}", ctx());
                assert_eq!(
                    ret,
                    Some(hex(&v, "pc")),
                    "an exit goes on at the return address: {}",
                    ctx()
                );
                hex(&v, "from");
                String::new()
            }
            _ => panic!("bad event: {}", ctx()),
        };
        let names: Vec<&str> = stack.iter().map(|(s, _)| s.as_str()).collect();
        assert_eq!(names, bt, "{}", ctx());
        if known.contains(&f.as_str()) {
            let from_main: Vec<&'static str> = match bt.iter().position(|s| s == "main") {
                Some(i) => bt[i..]
                    .iter()
                    .map(|s| *known.iter().find(|k| *k == s).unwrap_or(&"?"))
                    .collect(),
                None => Vec::new(),
            };
            let ev = match v["event"].as_str() {
                Some("enter") => format!("+{f} {via}"),
                _ => format!("-{f}"),
            };
            got.push((ev, from_main));
        }
    }
    got
}

fn show(e: &Expected) -> String {
    e.iter()
        .map(|(ev, bt)| format!("{ev:<22} {}\n", bt.join(" > ")))
        .collect()
}

fn run_backtrace(arch: &str, prog: &Path) -> (String, String) {
    let out_file = tmp(&format!(
        "{arch}-{}.jsonl",
        prog.file_name().unwrap().to_string_lossy()
    ));
    let out = Command::new(backtrace_bin())
        .arg("-o")
        .arg(&out_file)
        .arg(prog)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        out.status.success(),
        "{arch}: backtrace failed ({}): {err}",
        out.status
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        OUTPUT,
        "{arch}: {err}"
    );
    let text = std::fs::read_to_string(&out_file).unwrap();
    let _ = std::fs::remove_file(&out_file);
    (text, err)
}

fn traces_bt_calls(arch: &str) {
    traces(arch, &guest(arch));
}

fn traces(arch: &str, prog: &Path) {
    check_machine_code(arch, prog);
    let (text, err) = run_backtrace(arch, prog);
    assert!(
        err.contains("backtrace: ") && err.contains(" function entries"),
        "{err}"
    );
    assert!(!err.contains("warning"), "{arch}: {err}");
    let got = check_json(arch, &text);
    let want = expected(arch);
    assert_eq!(
        show(&got),
        show(&want),
        "{arch}: the known functions' events differ from the program's call structure"
    );
}

#[test]
fn mipsel_bt_calls() {
    traces_bt_calls("mipsel");
}

#[test]
fn riscv64_bt_calls() {
    traces_bt_calls("riscv64");
}

#[test]
fn x86_64_bt_calls() {
    traces_bt_calls("x86_64");
}

#[test]
fn mips_bt_calls() {
    traces_bt_calls("mips");
}

#[test]
fn mips64el_bt_calls() {
    traces_bt_calls("mips64el");
}

/// Thumb-2, Debian's default for armhf: 2- and 4-byte instructions, return
/// addresses with the interworking bit set.
#[test]
fn arm_thumb_bt_calls() {
    traces_bt_calls("arm");
}

/// A32 (`-marm`) calling into the Thumb C library and back.
#[test]
fn arm_a32_bt_calls() {
    let prog = guest_a32();
    let d = disassemble("arm", &prog);
    // Really A32: 4-byte instructions only, in main.
    let main_bytes = Command::new("arm-linux-gnueabihf-nm")
        .args(["-S", "--defined-only"])
        .arg(&prog)
        .output()
        .unwrap();
    let nm = String::from_utf8_lossy(&main_bytes.stdout);
    let size = nm
        .lines()
        .find_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() == 4 && f[3] == "main").then(|| u64::from_str_radix(f[1], 16).unwrap())
        })
        .expect("main's size");
    let insns = d["main"].len() as u64;
    assert_eq!(size, 4 * insns, "main is not all A32: {:?}", d["main"]);
    traces("arm", &prog);
}

#[test]
fn aarch64_bt_calls() {
    traces_bt_calls("aarch64");
}

#[test]
fn i386_bt_calls() {
    traces_bt_calls("i386");
}

/// The lines `backtrace` writes for `target/guests/<arch>/calls` (some
/// 28,000 entries and exits), without the ids that differ between runs;
/// `env`: variables set for the run (`CANNOLI_CHUNK_KB` is unset unless
/// given).
fn calls_lines(arch: &str, tag: &str, env: &[(&str, &str)]) -> Vec<String> {
    guest(arch);
    let prog = workspace().join(format!("target/guests/{arch}/calls"));
    let out_file = tmp(&format!("{arch}-calls-{tag}.jsonl"));
    let mut c = Command::new(backtrace_bin());
    c.arg("-o").arg(&out_file).arg(&prog).stdin(Stdio::null());
    c.env_remove("CANNOLI_CHUNK_KB");
    c.env_remove("CANNOLI_REGS_IN_PLACE");
    c.envs(env.iter().copied());
    let out = c.output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{arch} calls, {tag}: {err}");
    let text = std::fs::read_to_string(&out_file).unwrap();
    let _ = std::fs::remove_file(&out_file);
    text.lines()
        .map(|l| {
            let mut v: Value = serde_json::from_str(l).unwrap();
            let o = v.as_object_mut().unwrap();
            o.remove("pid");
            o.remove("tid");
            v.to_string()
        })
        .collect()
}

/// Panics at the first line where `b` differs from `a`.
fn same_lines(what: &str, a: &[String], b: &[String], b_is: &str) {
    assert!(a.len() > 1000, "{what}: {} lines", a.len());
    if let Some(i) = (0..a.len().max(b.len())).find(|&i| a.get(i) != b.get(i)) {
        panic!(
            "{what}: line {} differs {b_is}:\n  before: {:?}\n  after:  {:?}",
            i + 1,
            a.get(i),
            b.get(i)
        );
    }
}

/// An x86 call is told by the return address it pushes, a store the tool
/// takes with its branch's event: a branch that ends one chunk and its
/// store that opens the next are still a call. The lines of `calls` (some
/// 28,000 entries and exits) are the same at the smallest chunks (8 KiB, a
/// boundary every few hundred events) as at the default size.
#[test]
fn x86_calls_across_chunk_boundaries() {
    for arch in ["x86_64", "i386"] {
        let whole = calls_lines(arch, "default", &[]);
        let small = calls_lines(arch, "8", &[("CANNOLI_CHUNK_KB", "8")]);
        same_lines(&format!("{arch} calls"), &whole, &small, "at 8 KiB chunks");
    }
}

/// Where a block starts, its own code copies the registers a narrowed
/// event carries, instead of calling the helper (`jitter`'s
/// `codegen::regs`): on every guest, the lines of `calls` are the same as
/// with the helper writing every register event
/// (`CANNOLI_REGS_IN_PLACE=0`).
#[test]
fn registers_copied_in_place_are_the_helpers() {
    for arch in ARCHES {
        let helper = calls_lines(arch, "helper", &[("CANNOLI_REGS_IN_PLACE", "0")]);
        let in_place = calls_lines(arch, "in-place", &[]);
        same_lines(
            &format!("{arch} calls"),
            &helper,
            &in_place,
            "with registers copied in place",
        );
    }
}

/// ELFv2: calls land on local entry points; the link register is not in
/// the trace, the code is read instead.
#[test]
fn ppc64le_bt_calls() {
    traces_bt_calls("ppc64le");
}

/// The two-terminal mode: the client listens, QEMU is started separately.
#[test]
fn classic_mode() {
    let prog = guest("mipsel");
    let out_file = tmp("classic.jsonl");
    let token = cannoli::wire::Token::generate().unwrap().to_hex();
    let mut client = Reap(
        Command::new(backtrace_bin())
            .args(["--listen", "127.0.0.1:0", "-q", "-o"])
            .arg(&out_file)
            .env("CANNOLI_TOKEN", &token)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let mut err = BufReader::new(client.0.stderr.take().unwrap());
    let mut line = String::new();
    err.read_line(&mut line).unwrap();
    // backtrace: listening on ADDR; now start QEMU with -cannoli LIB
    let rest = line
        .strip_prefix("backtrace: listening on ")
        .unwrap_or_else(|| panic!("{line}"));
    let (addr, lib) = rest
        .trim_end()
        .split_once("; now start QEMU with -cannoli ")
        .unwrap();
    // The QEMU command line the launcher would use, with that library.
    let mut qemu = launch::Launcher::new(launch::Options {
        hooks: lib,
        threads: 1,
    })
    .command(&OsString::from(&prog), &[])
    .unwrap_or_else(|e| panic!("{e}"));
    let out = qemu
        .env("CANNOLI_ADDR", addr)
        .env("CANNOLI_TOKEN", &token)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), OUTPUT);
    let status = client.0.wait().unwrap();
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut err, &mut rest).unwrap();
    assert!(status.success(), "{status}: {rest}");
    let text = std::fs::read_to_string(&out_file).unwrap();
    let _ = std::fs::remove_file(&out_file);
    assert_eq!(
        show(&check_json("mipsel", &text)),
        show(&expected("mipsel"))
    );
}

#[test]
fn missing_program_is_one_line() {
    let out = Command::new(env!("CARGO_BIN_EXE_backtrace"))
        .arg("/nonexistent/prog")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(127));
    let e = String::from_utf8_lossy(&out.stderr);
    assert_eq!(e.lines().count(), 1, "{e}");
    assert!(
        e.starts_with("backtrace: ") && e.contains("no such program"),
        "{e}"
    );
}

/// A live run's events show while the program runs, not when it ends:
/// the entry of `read`, in the host's `head -n 1` (x86_64, its C library's
/// symbols), comes while `read` waits for a line that
/// [`e2e::line_before_input`] writes only once it has seen that entry. The
/// program's start alone fills more than the output's buffer, so the first
/// line would come anyway; the last before the wait comes only if the
/// output is flushed while the program sleeps.
#[test]
fn events_are_seen_while_the_program_sleeps() {
    let q = e2e::qemu_builds();
    let w = e2e::line_before_input(
        e2e::no_aslr(&mut Command::new(backtrace_bin()))
            .args(["/usr/bin/head", "-n", "1"])
            .env_clear()
            .envs(e2e::QEMU_ENV.iter().copied())
            .env("CANNOLI_QEMU_BUILD", &q.build),
        |l| l.starts_with("{\"event\":\"enter\"") && l.contains("\"function\":\"read\""),
    );
    let (rest, stderr) = (&w.rest, &w.stderr);
    assert!(
        w.seen.is_some(),
        "no entry of read while the program waited in it; {} lines before, later: {:?}\n{stderr}",
        w.before.len(),
        rest.iter().take(3).collect::<Vec<_>>()
    );
    assert_eq!(w.status.code(), Some(0), "{stderr}");
    assert!(rest.iter().any(|l| l == "go"), "{stderr}");
}

// ---------------------------------------------------------------------------
// C++ names
// ---------------------------------------------------------------------------

/// The program's own C++ functions in `nm`'s listing, mangled and as
/// binutils' demangler (`nm -C`, c++filt's) shows them, by address.
fn nm_cxx_names(prog: &Path) -> Vec<(String, String)> {
    let list = |demangle: bool| -> BTreeMap<String, String> {
        let mut cmd = Command::new("nm");
        if demangle {
            cmd.arg("-C");
        }
        let o = cmd.arg("--defined-only").arg(prog).output().unwrap();
        assert!(o.status.success(), "nm {}", prog.display());
        String::from_utf8(o.stdout)
            .unwrap()
            .lines()
            .filter_map(|l| {
                let (addr, rest) = l.split_once(' ')?;
                let (ty, name) = rest.split_once(' ')?;
                matches!(ty, "T" | "t" | "W").then(|| (addr.to_string(), name.to_string()))
            })
            .collect()
    };
    let (mangled, shown) = (list(false), list(true));
    mangled
        .into_iter()
        .filter(|(_, m)| m.starts_with("_Z"))
        .map(|(a, m)| (m, shown[&a].clone()))
        .collect()
}

/// The functions entered, in order, by `backtrace [opts] prog`.
fn entered(prog: &Path, opts: &[&str], tag: &str) -> Vec<String> {
    let out_file = tmp(&format!("cxx-{tag}.jsonl"));
    let out = Command::new(backtrace_bin())
        .args(opts)
        .arg("-o")
        .arg(&out_file)
        .arg(prog)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "backtrace {opts:?}: {err}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "area=21 scale=63\n");
    let text = std::fs::read_to_string(&out_file).unwrap();
    let _ = std::fs::remove_file(&out_file);
    text.lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|v| v["event"] == "enter")
        .map(|v| v["function"].as_str().unwrap().to_string())
        .collect()
}

/// C++ functions are shown as binutils' demangler shows them
/// (`geo::scale(long, int)`), and as the symbol table has them with
/// `--no-demangle` (`_ZN3geo5scaleEli`): the same entries either way
/// (`tests/programs/probe_cxx.cpp`, built by the host's g++).
#[test]
fn cxx_functions_are_demangled_as_binutils_shows_them() {
    let dir = e2e::RunDir::new();
    let prog = e2e::gxx(dir.path(), "probe_cxx");
    let names = nm_cxx_names(&prog);
    let mine: Vec<&(String, String)> = names
        .iter()
        .filter(|(m, _)| m.starts_with("_ZN3geo") || m.starts_with("_ZNK3geo"))
        .collect();
    assert_eq!(mine.len(), 2, "nm: {names:?}");
    let shown = entered(&prog, &[], "shown");
    let raw = entered(&prog, &["--no-demangle"], "raw");
    assert_eq!(shown.len(), raw.len(), "{shown:?}\n{raw:?}");
    for (m, d) in &names {
        let at = |v: &[String], n: &str| -> Vec<usize> {
            v.iter()
                .enumerate()
                .filter(|(_, f)| *f == n)
                .map(|(i, _)| i)
                .collect()
        };
        assert_eq!(at(&raw, m), at(&shown, d), "{m} is {d}");
    }
    for (m, d) in mine {
        assert!(raw.contains(m), "{m} not entered: {raw:?}");
        assert!(shown.contains(d), "{d} not entered: {shown:?}");
    }
    assert!(!shown.iter().any(|f| f.starts_with("_Z")), "{shown:?}");
}
